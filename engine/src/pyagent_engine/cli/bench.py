"""``pyagent bench``: benchmarks that compare against a named peer in the same run.

``startup`` times a cold ``pyagent list --json`` (every installed plugin discovered and listed)
against ``python -c pass`` (the interpreter floor) and ``python -c "import torch"`` (what listing
would cost if it imported torch), each in a fresh process.

``engine`` measures generation on the embedded model against Hugging Face transformers (and
llama.cpp when it is installed); the measuring lives in :mod:`pyagent_engine.benchmarks.engine`.

``kvcache`` replays a block trace through every installed eviction policy and Belady's MIN
(:mod:`pyagent_engine.benchmarks.kvcache`), LRU being the peer.

``prefix-cache`` times the first token of requests sharing a long system prompt with the prefix cache
on against off (:mod:`pyagent_engine.benchmarks.prefix_cache`).

``samplers`` times the default sampler chain per token with the C kernels, their torch fallbacks
and transformers' LogitsProcessorList (:mod:`pyagent_engine.benchmarks.samplers`).

``scheduling`` replays arrival-timed workloads (Mooncake arrivals and a synthetic mix) under every
scheduling policy, ``fcfs`` being the peer (:mod:`pyagent_engine.benchmarks.scheduling`).

``logprobs`` times decoding with logprobs asked for against none, on the same engine
(:mod:`pyagent_engine.benchmarks.logprobs`).

``lora`` measures concurrent streams over several LoRA adapters against the base model, adapter load
time, and llama-server's ``--lora`` on the same GGUF adapter (:mod:`pyagent_engine.benchmarks.lora`).

``grammars`` measures structured output: compile and mask times per backend, the engine's per-token
overhead over the backend called directly, and constrained against unconstrained generation
(:mod:`pyagent_engine.benchmarks.grammar_e2e`).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from pyagent_core.commands import print_json, print_table

app = typer.Typer(help="Benchmarks against a named peer, reported as ratios.", no_args_is_help=True)
OutOpt = Annotated[Path | None, typer.Option(help="Write the results as JSON to this file.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")]


def save_or_print_json(report: dict[str, Any], out: Path | None, json_out: bool) -> bool:
    """Write ``report`` to ``out`` (if given); print it as JSON and return True when ``json_out``."""
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(report, indent=2), encoding="utf-8")
    if json_out:
        print_json(report)
    return json_out


def _time_command(argv: list[str], repeat: int) -> list[float]:
    runs = []
    for _ in range(repeat):
        start = time.perf_counter()
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        runs.append(time.perf_counter() - start)
    return runs


@app.command("startup")
def startup(
    repeat: Annotated[int, typer.Option(min=1, help="Runs per command (the median is reported).")] = 10,
    out: OutOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Cold-start wall time of `pyagent list --json` against `python -c pass` and `import torch`."""
    python = sys.executable
    pyagent = str(Path(python).with_name("pyagent"))
    if not os.path.exists(pyagent):
        pyagent_argv = [python, "-m", "pyagent_core.cli", "list", "--json"]
    else:
        pyagent_argv = [pyagent, "list", "--json"]
    commands = {
        "python -c pass": [python, "-c", "pass"],
        "pyagent list --json": pyagent_argv,
        "python -c 'import torch'": [python, "-c", "import torch"],
    }
    _time_command(commands["pyagent list --json"], 1)  # warm the file system cache once
    results: dict[str, dict[str, Any]] = {}
    for label, argv in commands.items():
        runs = _time_command(argv, repeat)
        results[label] = {"median_s": statistics.median(runs), "min_s": min(runs), "runs": runs}
    listing = results["pyagent list --json"]["median_s"]
    report = {
        "benchmark": "startup",
        "repeat": repeat,
        "results": results,
        "ratio_list_to_python": listing / results["python -c pass"]["median_s"],
        "ratio_list_to_import_torch": listing / results["python -c 'import torch'"]["median_s"],
    }
    if save_or_print_json(report, out, json_out):
        return
    print_table(
        f"cold start, median of {repeat} runs", ["command", "median ms", "min ms", "vs pyagent list"],
        [(label, f"{r['median_s'] * 1e3:.1f}", f"{r['min_s'] * 1e3:.1f}", f"{r['median_s'] / listing:.2f}x")
         for label, r in results.items()],
    )


def _number(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _print_engine_report(report: dict[str, Any]) -> None:
    tokens = report["prompt_tokens"]
    print_table(
        f"single stream, greedy, {report['new_tokens']} new tokens, median of {len(tokens)} prompts "
        f"({min(tokens)}-{max(tokens)} prompt tokens), {report['torch_threads']} torch threads",
        ["engine", "dtype", "precision", "attention", "prefill tok/s", "decode tok/s", "ttft ms"],
        [(r["engine"], r["dtype"], r.get("precision", ""), r.get("attention", ""), _number(r["prefill_tok_s"]),
          _number(r["decode_tok_s"]), _number(r["ttft_s"] * 1e3)) for r in report["single_stream"]]
        + [(name, "", "", "", info["reason"], "", "") for name, info in report["peers"].items()
           if not info["available"]],
    )
    print_table(
        f"pyagent aggregate ({report['precision']}), {report['aggregate_new_tokens']} new tokens per request",
        ["concurrent requests", "dtype", "attention", "output tokens", "wall s", "output tok/s"],
        [(r["concurrency"], r["dtype"], r["attention"], r["output_tokens"], _number(r["wall_s"], 2),
          _number(r["tok_s"])) for r in report["aggregate"]],
    )
    pp_tg = report.get("pp_tg")
    if pp_tg is not None:
        pp, tg = pp_tg["prompt_tokens"], pp_tg["gen_tokens"]
        print_table(
            f"pp{pp} and tg{tg} against llama-bench, mean of {pp_tg['repetitions']} runs each",
            ["engine", "dtype", "precision", "threads", f"pp{pp} tok/s", f"tg{tg} tok/s"],
            [(r["engine"], r.get("dtype", r.get("model_type", "")), r.get("precision", ""), r["threads"],
              _number(r["pp_tok_s"]), _number(r["tg_tok_s"])) for r in pp_tg["rows"]]
            + ([] if pp_tg["peer"]["available"] else [("llama.cpp", "", "", "", pp_tg["peer"]["reason"], "")]),
        )
    _print_ratios([*report["ratios"], *(pp_tg["ratios"] if pp_tg else [])])


def _print_ratios(rows: list[dict[str, Any]]) -> None:
    """A ratios table: name, value, goal and whether it was met (``-`` where a side was not measured)."""
    print_table(
        "ratios", ["ratio", "value", "goal", "met"],
        [(r["name"], "-" if r["ratio"] is None else f"{r['ratio']:.2f}x",
          "" if r["goal"] is None else f">= {r['goal']:g}x", "-" if r["met"] is None else "yes" if r["met"] else "no")
         for r in rows],
    )


@app.command("engine")
def engine(
    dtype: Annotated[list[str] | None, typer.Option(
        help="pyagent single-stream dtype (repeat for several; default: bfloat16 and float32).")] = None,
    attention: Annotated[str | None, typer.Option(
        help="pyagent's attention backend (default: the registry's selection).")] = None,
    quick: Annotated[bool, typer.Option("--quick", help="One prompt and a few tokens: a smoke test.")] = False,
    model: Annotated[Path | None, typer.Option(
        "--model", help="A .gguf file or checkpoint folder of any installed architecture (default: embedded).")] = None,
    llama_bench: Annotated[Path | None, typer.Option(
        help="llama.cpp's llama-bench binary: adds pp512 and tg128 of pyagent and llama.cpp on the same GGUF.")] = None,
    precision: Annotated[list[str] | None, typer.Option(
        help="pyagent's precision for a GGUF's quantized matrices, int8 or exact (repeat to measure both; "
             "default: the engine's, see --precision of generate).")] = None,
    out: OutOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Generation speed of pyagent against transformers `generate()` (and llama.cpp on a GGUF when installed)."""
    import torch

    from pyagent_engine.benchmarks.engine import DTYPES, EngineBenchSettings, run_engine_benchmark
    from pyagent_engine.benchmarks.llama_bench import PpTgSettings

    dtypes = tuple(dtype or DTYPES)
    unknown = sorted(set(dtypes) - set(DTYPES))
    if unknown:
        raise typer.BadParameter(f"unknown dtype {', '.join(unknown)}; choose from {', '.join(DTYPES)}",
                                 param_hint="--dtype")
    if llama_bench is not None and model is not None and (model.suffix != ".gguf" or not model.is_file()):
        raise typer.BadParameter(f"{model} is not a .gguf file; llama-bench and pyagent must read the same GGUF",
                                 param_hint="--llama-bench")
    pp_tg = None if llama_bench is None else PpTgSettings(binary=llama_bench, threads=torch.get_num_threads())
    precisions = tuple(precision or ())
    settings = (EngineBenchSettings.quick(dtypes, attention, model=model, pp_tg=pp_tg, precisions=precisions) if quick
                else EngineBenchSettings(dtypes=dtypes, attention=attention, model=model, pp_tg=pp_tg,
                                         precisions=precisions))
    report = run_engine_benchmark(settings)
    if save_or_print_json(report, out, json_out):
        return
    _print_engine_report(report)


@app.command("kvcache")
def kvcache(
    trace: Annotated[list[Path] | None, typer.Option(
        help="Mooncake-format JSONL block trace (repeatable; default: both traces in ../shared/data/mooncake "
             "and every generated workload).")] = None,
    generate: Annotated[list[str] | None, typer.Option(
        help="A generated workload: chat, agent or mixed (repeatable; see docs/kvcache.md).")] = None,
    capacity: Annotated[str, typer.Option(
        help="Cache sizes, comma separated: blocks, or shares of each trace's unique blocks (20%).")] = "5%,20%,50%",
    policy: Annotated[list[str] | None, typer.Option(
        help="Only these policies (repeat; default: every installed one; lru, the peer, is always run).")] = None,
    limit: Annotated[int | None, typer.Option(min=1, help="Replay only each trace file's first N requests.")] = None,
    out: OutOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Hit ratio of every eviction policy and Belady's MIN on block traces; share of the LRU-to-MIN gap."""
    from pyagent_engine.benchmarks.kvcache import (
        DEFAULT_TRACES,
        PEER,
        generated_trace,
        policy_factories,
        run_kvcache_benchmark,
    )
    from pyagent_engine.kvsim.generate import WORKLOADS
    from pyagent_engine.kvsim.trace import load_trace

    if not trace and not generate:
        trace, generate = list(DEFAULT_TRACES), list(WORKLOADS)
    traces = [load_trace(path, limit=limit) for path in trace or ()]
    traces += [generated_trace(name) for name in generate or ()]
    names = [*policy, PEER] if policy else None
    capacities = [part.strip() for part in capacity.split(",") if part.strip()]
    report = run_kvcache_benchmark(traces, capacities, policy_factories(names=names))
    if save_or_print_json(report, out, json_out):
        return
    described = ", ".join(f"{t['trace']} ({t['requests']} requests, {t['unique_blocks']} unique blocks, "
                          f"unbounded {t['unbounded_hit_ratio']:.1%})" for t in report["traces"])
    print_table(
        f"{described}; gap = LRU to MIN",
        ["trace", "capacity", "policy", "hit ratio", "vs lru (points)", "gap closed", "ns/op", "ns vs lru",
         "ns/block vs lru"],
        [(r["trace"], f"{r['capacity']} ({r['share']})", r["policy"], f"{r['hit_ratio']:.2%}",
          f"{r['points_vs_lru']:+.2f}", "-" if r["gap_closed"] is None else f"{r['gap_closed']:.1%}",
          _number(r["ns_per_op"], 0),
          "-" if r["ns_ratio_to_lru"] is None else f"{r['ns_ratio_to_lru']:.2f}x",
          "-" if r["ns_per_block_ratio_to_lru"] is None else f"{r['ns_per_block_ratio_to_lru']:.2f}x")
         for r in report["results"]],
    )
    print_table(
        "every trace and capacity",
        ["policy", "mean gap closed", "worst vs lru (points)", "most ns vs lru", "most ns/block vs lru"],
        [(r["policy"], "-" if r["mean_gap_closed"] is None else f"{r['mean_gap_closed']:.1%}",
          f"{r['worst_points_vs_lru']:+.2f}", f"{r['max_ns_ratio_to_lru']:.2f}x",
          f"{r['max_ns_per_block_ratio_to_lru']:.2f}x") for r in report["summary"]],
    )


@app.command("spec-decode")
def spec_decode(
    proposer: Annotated[list[str] | None, typer.Option(
        help="Proposer to compare (repeatable; default ngram, suffix).")] = None,
    batch: Annotated[list[int] | None, typer.Option(help="Batch size (repeatable; default 1 and 8).")] = None,
    prompts: Annotated[int, typer.Option(min=1, help="Prompts per workload.")] = 2,
    max_tokens: Annotated[int, typer.Option(min=1, help="Most tokens per Spec-Bench request.")] = 64,
    code_editing_max_tokens: Annotated[int, typer.Option(
        min=1, help="Most tokens per code-editing request (room for the whole edited code).")] = 256,
    category: Annotated[list[str] | None, typer.Option(
        help="Only these workloads (Spec-Bench categories, code_editing).")] = None,
    no_peer: Annotated[bool, typer.Option("--no-peer", help="Skip transformers' prompt lookup.")] = False,
    repeats: Annotated[int, typer.Option(min=1, help="Runs per configuration (interleaved; the fastest counts).")] = 2,
    out: OutOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Speculative decoding speedup per workload and batch size, with transformers' prompt lookup as the peer."""
    from pyagent_engine.benchmarks.spec_decode import SpecBenchSettings, run_spec_decode_benchmark

    settings = SpecBenchSettings(proposers=tuple(proposer or ("ngram", "suffix")), batch_sizes=tuple(batch or (1, 8)),
                                 prompts_per_workload=prompts, max_tokens=max_tokens,
                                 code_editing_max_tokens=code_editing_max_tokens,
                                 categories=tuple(category) if category else None, peer=not no_peer,
                                 repeats=repeats)
    report = run_spec_decode_benchmark(settings)
    if save_or_print_json(report, out, json_out):
        return
    print_table(
        f"pyagent greedy, up to {max_tokens} tokens ({code_editing_max_tokens} for code editing), {prompts} prompts "
        f"per workload, median of {repeats} rounds",
        ["workload", "batch", "proposer", "tokens", "steps", "speedup", "modelled", "mean accepted length",
         "acceptance", "proposer us/step", "us/draft", "identical"],
        [(r["workload"], r["batch"], r["proposer"], r["output_tokens"], f"{r['steps']} / {r['baseline_steps']}",
          f"{r['speedup']:.2f}x", "-" if r["modelled_speedup"] is None else f"{r['modelled_speedup']:.2f}x",
          _number(r["mean_accepted_length"], 2), _number(r["acceptance_rate"], 2), _number(r["proposer_us_per_step"]),
          _number(r["proposer_us_per_draft"]), "yes" if r["identical"] else "NO")
         for r in report["rows"]],
    )
    print_table("verify cost: decode step with k draft tokens per request over a plain step",
                ["batch", "k", "ms/step", "ratio"],
                [(r["batch"], r["draft_tokens"], _number(r["step_ms"], 2), f"{r['ratio']:.2f}x")
                 for r in report["verify_costs"]])
    if report["peer_rows"]:
        print_table("transformers prompt lookup (batch 1)", ["workload", "plain s", "prompt lookup s", "speedup"],
                    [(r["workload"], _number(r["plain_s"], 2), _number(r["prompt_lookup_s"], 2), f"{r['speedup']:.2f}x")
                     for r in report["peer_rows"]])
    print_table("goals (ceiling: the most any draft could gain at that batch size, from the verify costs)",
                ["goal", "value", "met", "modelled", "ceiling"],
                [(g["goal"], _number(g["value"], 2), "yes" if g["met"] else "no", _number(g["modelled"], 2),
                  _number(g["ceiling"], 2)) for g in report["goals"]])


@app.command("samplers")
def samplers(
    batch: Annotated[list[int] | None, typer.Option(min=1, help="Batch size (repeatable; default 1, 8, 32).")] = None,
    vocab: Annotated[list[int] | None, typer.Option(
        min=2, help="Vocabulary size (repeatable; default 49152 and 151936).")] = None,
    steps: Annotated[int, typer.Option(min=1, help="Timed steps per cell (the median is reported).")] = 20,
    out: OutOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Default sampler chain per token: C kernels vs torch fallback vs transformers' LogitsProcessorList."""
    from pyagent_engine.benchmarks.samplers import BATCHES, VOCABS, run_samplers_benchmark

    report = run_samplers_benchmark(tuple(batch or BATCHES), tuple(vocab or VOCABS), steps)
    if save_or_print_json(report, out, json_out):
        return
    print_table(
        f"{report['chain']}, median of {steps} steps, {report['torch_threads']} torch threads",
        ["vocab", "batch", "impl", "ms/step", "us/row", "ns/logit", "vs c"],
        [(r["vocab"], r["batch"], r["impl"], _number(r["ms_per_step"], 3), _number(r["us_per_row"]),
          _number(r["ns_per_logit"], 2), f"{r['ratio_to_c']:.1f}x") for r in report["results"]],
    )
    goal = report["goal"]
    print_table(
        f"goal at vocab {goal['vocab']}: C <= {goal['us_per_row']:g} us per row and >= {goal['ratio']:g}x transformers",
        ["batch", "c us/row", "transformers / c", "met"],
        [(g["batch"], _number(g["us_per_row"]), f"{g['ratio']:.1f}x", "yes" if g["met"] else "no")
         for g in goal["by_batch"]],
    )


@app.command("parsers")
def parsers(
    parser: Annotated[list[str] | None, typer.Option("--parser", help="Only these parsers (repeatable).")] = None,
    chunk_chars: Annotated[int, typer.Option(min=1, help="Characters per streamed chunk (about a token).")] = 4,
    repeat: Annotated[int, typer.Option(min=1, help="Runs per measurement (the best counts).")] = 3,
    data: Annotated[Path | None, typer.Option(help="Folder of BFCL_*.json files (default: the shared data).")] = None,
    out: OutOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """µs per KB and per streamed chunk of each tool/reasoning parser, against a re-parse-per-chunk peer."""
    from pyagent_engine.benchmarks.parsers import DEFAULT_DATA, ParserBenchSettings, run_parser_benchmark

    settings = ParserBenchSettings(data=data or DEFAULT_DATA, chunk_chars=chunk_chars, repeat=repeat,
                                   names=tuple(parser or ()))
    report = run_parser_benchmark(settings)
    if save_or_print_json(report, out, json_out):
        return
    print_table(
        f"{report['calls']} BFCL calls per message, chunks of {report['chunk_chars']} characters, best of "
        f"{report['repeat']}", ["kind", "parser", "implementation", "KB", "extract µs/KB", "stream µs/KB",
                                "stream µs/chunk"],
        [(r["kind"], r["parser"], r["implementation"], r["kb"], _number(r["extract_us_per_kb"]),
          _number(r["stream_us_per_kb"]), _number(r["stream_us_per_chunk"], 2)) for r in report["rows"]],
    )
    print_table("ratios (peer time / pyagent time)", ["parser", "peer", "streaming", "whole message"],
                [(r["parser"], r["peer"], f"{r['stream_speedup']:.1f}x",
                  "-" if r["extract_ratio"] is None else f"{r['extract_ratio']:.2f}x") for r in report["ratios"]])


@app.command("scheduling")
def scheduling(
    requests: Annotated[int, typer.Option(min=4, help="Requests per workload.")] = 32,
    policies: Annotated[str, typer.Option(help="Comma-separated scheduling policies (fcfs first: the peer).")] = (
        "fcfs,priority,lpm,edf,fair,hrrn"),
    load: Annotated[float, typer.Option(min=0.05, help="Offered load of the Mooncake replay (of capacity).")] = 0.9,
    synthetic_load: Annotated[float, typer.Option(min=0.05, help="Offered load of the synthetic mix.")] = 3.0,
    out: OutOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Time to first token per priority class, deadline misses, tenant fairness and throughput per policy."""
    from pyagent_engine.benchmarks.scheduling import SchedulingBenchSettings, run_scheduling_benchmark

    names = tuple(p.strip() for p in policies.split(",") if p.strip())
    report = run_scheduling_benchmark(SchedulingBenchSettings(
        requests=requests, policies=names, load=load, synthetic_load=synthetic_load))
    if save_or_print_json(report, out, json_out):
        return
    for name, results in report["results"].items():
        shape = report["workloads"][name]
        print_table(
            f"{name}: {shape['requests']} requests over {shape['span_s']:.1f} s, prompts "
            f"{shape['prompt_tokens_mean']:.0f} and outputs {shape['output_tokens_mean']:.0f} tokens on average; "
            f"capacity {report['capacity_tokens_per_s']:.0f} tokens/s, {report['torch_threads']} torch threads",
            ["policy", "ttft p50/p99 ms prio 0", "ttft p50/p99 ms prio 1", "deadline misses", "jain (contended)",
             "jain (fair share)", "tok/s (vs fcfs)", "tok/cpu-s (vs fcfs)", "preempted"],
            [(policy, _ttft_ms(r, "priority 0"), _ttft_ms(r, "priority 1"),
              "-" if r["deadline_miss_rate"] is None else f"{r['deadline_miss_rate']:.0%}",
              _number(r["jain_contended"], 2), _number(r["jain_fair_share"], 2),
              f"{r['throughput_tok_s']:.1f} ({_number(r['throughput_vs_fcfs'], 3)})",
              f"{r['throughput_cpu_tok_s']:.1f} ({_number(r['throughput_cpu_vs_fcfs'], 3)})", r["preemptions"])
             for policy, r in results.items()],
        )


def _ttft_ms(figures: dict[str, Any], label: str) -> str:
    """``p50/p99`` time to first token of one priority class, in milliseconds."""
    p50, p99 = figures["ttft_p50_s"][label], figures["ttft_p99_s"][label]
    return "-" if p50 is None else f"{p50 * 1e3:.0f}/{p99 * 1e3:.0f}"


@app.command("prefix-cache")
def prefix_cache(
    requests: Annotated[int, typer.Option(min=2, help="Requests per engine (the first warms the cache).")] = 8,
    prefix_tokens: Annotated[int, typer.Option(min=16, help="Tokens of the shared system prompt.")] = 512,
    max_tokens: Annotated[int, typer.Option(min=1, help="Tokens generated per request.")] = 4,
    eviction: Annotated[str | None, typer.Option(help="Eviction policy (default: selection).")] = None,
    out: OutOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Time to first token on a shared-prefix workload with the prefix cache on, against the cache off."""
    from pyagent_engine.benchmarks.prefix_cache import PrefixCacheBenchSettings, run_prefix_cache_benchmark

    report = run_prefix_cache_benchmark(PrefixCacheBenchSettings(
        requests=requests, prefix_tokens=prefix_tokens, max_tokens=max_tokens, eviction=eviction))
    if save_or_print_json(report, out, json_out):
        return
    tokens = report["prompt_tokens"]
    print_table(
        f"{requests} requests of {min(tokens)}-{max(tokens)} prompt tokens sharing a {prefix_tokens}-token system "
        f"prompt, one at a time, greedy, {report['torch_threads']} torch threads",
        ["prefix cache", "cold ttft ms", "warm ttft ms (median)", "cached prompt tokens", "warm ttft off / on"],
        [(name, _number(r["cold_ttft_s"] * 1e3), _number(r["warm_ttft_median_s"] * 1e3),
          sum(r["cached_prompt_tokens"]), f"{report['ratio_warm_ttft_off_to_on']:.2f}x" if name == "on" else "")
         for name, r in report["results"].items()],
    )
    typer.echo(f"eviction policy: {report['eviction']}; greedy outputs identical: {report['outputs_identical']}")


@app.command("logprobs")
def logprobs(
    batch: Annotated[list[int] | None, typer.Option(min=1, help="Batch size (repeatable; default 1 and 8).")] = None,
    new_tokens: Annotated[int, typer.Option(min=2, help="Tokens generated per request.")] = 64,
    repeats: Annotated[int, typer.Option(min=1, help="Runs per configuration (interleaved; the fastest counts).")] = 3,
    threads: Annotated[int | None, typer.Option(min=1, help="Torch threads (default: torch's).")] = None,
    out: OutOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Decode tok/s with logprobs asked for (0, 5, 20 alternatives; raw and processed) against none."""
    from pyagent_engine.benchmarks.logprobs import LogprobsBenchSettings, run_logprobs_benchmark

    report = run_logprobs_benchmark(LogprobsBenchSettings(
        batch_sizes=tuple(batch or (1, 8)), new_tokens=new_tokens, repeats=repeats, threads=threads))
    if save_or_print_json(report, out, json_out):
        return
    print_table(
        f"greedy decode, {new_tokens} new tokens per request, best of {repeats}, "
        f"{report['torch_threads']} torch threads",
        ["batch", "logprobs mode", "logprobs", "decode tok/s", "vs none", "tok per CPU s", "vs none (CPU)"],
        [(r["batch"], r["mode"], "none" if r["logprobs"] is None else r["logprobs"], _number(r["decode_tok_s"]),
          f"{r['ratio_to_no_logprobs']:.3f}x", _number(r["decode_tok_per_cpu_s"]),
          f"{r['cpu_ratio_to_no_logprobs']:.3f}x") for r in report["results"]],
    )


@app.command("grammars")
def grammars(
    backend: Annotated[list[str] | None, typer.Option(
        "--backend", help="Grammar backend (repeatable; default: every available one).")] = None,
    schemas: Annotated[int, typer.Option(min=1, help="Schemas per backend generated end to end.")] = 50,
    max_tokens: Annotated[int, typer.Option(min=1, help="Most tokens per generated output.")] = 128,
    mask_schemas: Annotated[int | None, typer.Option(
        min=1, help="Schemas for compile and mask times (default: all).")] = None,
    quick: Annotated[bool, typer.Option("--quick", help="A few schemas and tokens: a smoke test.")] = False,
    jump_forward: Annotated[bool, typer.Option("--jump-forward", help="Also generate the schemas with jump-forward "
                                               "off, on and under the earlier rule: forced share, tok/s, "
                                               "outputs that differ.")] = False,
    grammar_timeout: Annotated[float, typer.Option(
        "--grammar-timeout", min=0.001, help="Seconds a constraint may take to compile, queueing included.")] = 30.0,
    out: OutOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Grammar backends: compile/mask p50/p99, engine overhead per token, constrained vs unconstrained tok/s."""
    import attrs

    from pyagent_engine.benchmarks.grammar_e2e import GrammarBenchSettings, print_report, run_grammar_benchmark

    names = tuple(backend or ())
    settings = (GrammarBenchSettings.quick(names, jump_forward) if quick else GrammarBenchSettings(
        backends=names, schemas=schemas, max_tokens=max_tokens, mask_limit=mask_schemas, jump_forward=jump_forward))
    settings = attrs.evolve(settings, compile_timeout_s=grammar_timeout)
    report = run_grammar_benchmark(settings)
    if save_or_print_json(report, out, json_out):
        return
    print_report(report)


@app.command("serve")
def serve(
    url: Annotated[str | None, typer.Option(
        help="A running pyagent server to measure (default: start `pyagent serve` on a free local port).")] = None,
    peer_url: Annotated[str | None, typer.Option(
        "--peer-url", help="A running OpenAI-compatible server measured with the same load; ratios to it.")] = None,
    peer_name: Annotated[str, typer.Option("--peer-name", help="The peer's name in the report.")] = "peer",
    llama_server: Annotated[Path | None, typer.Option(
        "--llama-server", help="llama.cpp's llama-server binary: started per level with as many slots as clients "
                               "(-np C -c C*ctx) on --gguf.")] = None,
    llama_server_arg: Annotated[list[str] | None, typer.Option(
        "--llama-server-arg", help="An extra argument for llama-server (repeatable; -t 2 is two of them).")] = None,
    gguf: Annotated[Path | None, typer.Option(
        help="The GGUF llama-server loads (default: the model pyagent loads, the embedded one).")] = None,
    model: Annotated[str | None, typer.Option(
        help="The model of the pyagent server started here and of the offline runs (default: embedded).")] = None,
    server_arg: Annotated[list[str] | None, typer.Option(
        "--server-arg", help="An extra argument for the `pyagent serve` started here (repeatable).")] = None,
    concurrency: Annotated[str, typer.Option(help="Concurrent clients per level, comma separated.")] = "1,8,32,64",
    max_tokens: Annotated[int, typer.Option(min=1, help="Tokens generated per request (EOS ignored).")] = 64,
    rounds: Annotated[int, typer.Option(min=1, help="Requests per client at each level.")] = 2,
    endpoint: Annotated[str, typer.Option(help="chat (/v1/chat/completions) or completions (/v1/completions).")]
    = "chat",
    offline: Annotated[bool, typer.Option(help="Also measure pyagent's offline LLM.generate at each level.")] = True,
    quick: Annotated[bool, typer.Option("--quick", help="Concurrency 1 and 2, a few tokens: a smoke test.")] = False,
    out: OutOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """OpenAI-compatible servers under the same streaming load: output tok/s, TTFT and ITL p50/p99, ratios."""
    from pyagent_engine.benchmarks.serve import ServeBenchSettings, ServeTargets, run_serve_benchmark

    try:
        levels = tuple(int(part) for part in concurrency.split(",") if part.strip())
    except ValueError:
        raise typer.BadParameter(f"expected comma-separated integers, got {concurrency!r}",
                                 param_hint="--concurrency") from None
    if llama_server is not None and not llama_server.is_file():
        raise typer.BadParameter(f"{llama_server} is not a file; give the path of llama-server",
                                 param_hint="--llama-server")
    settings = (ServeBenchSettings.quick(endpoint) if quick else ServeBenchSettings(
        concurrency=levels, max_tokens=max_tokens, rounds=rounds, endpoint=endpoint))
    targets = ServeTargets(pyagent_url=url, pyagent_args=tuple(server_arg or ()), model=model, peer_url=peer_url,
                           peer_name=peer_name, llama_server=llama_server,
                           llama_args=tuple(llama_server_arg or ()), gguf=gguf, offline=offline)
    report = run_serve_benchmark(settings, targets)
    if save_or_print_json(report, out, json_out):
        return
    _print_serve_report(report)


def _print_serve_report(report: dict[str, Any]) -> None:
    host = report["host"]
    print_table(
        f"{report['endpoint']}, streaming, {report['max_tokens']} tokens per request (EOS ignored), "
        f"{report['prompts']['count']} Spec-Bench prompts; {host['cpu']} x{host['logical_cpus']}, {report['date']}",
        ["clients", "server", "requests", "failed", "output tok/s", "TTFT p50 ms", "TTFT p99 ms", "ITL p50 ms",
         "ITL p99 ms"],
        [(level["concurrency"], name, r["requests"], r["failed"], _number(r["output_tok_s"]),
          _number(r.get("ttft_p50_ms")), _number(r.get("ttft_p99_ms")), _number(r.get("itl_p50_ms")),
          _number(r.get("itl_p99_ms"))) for level in report["levels"] for name, r in level["results"].items()],
    )
    _print_ratios(report["ratios"])
    for level in report["levels"]:
        for name, result in level["results"].items():
            if result["errors"]:
                typer.echo(f"{name} @{level['concurrency']} failed: {'; '.join(result['errors'])}", err=True)


@app.command("lora")
def lora(
    model: Annotated[str | None, typer.Option(help="A .gguf file (default: the embedded model).")] = None,
    streams: Annotated[int, typer.Option(min=1, help="Concurrent requests.")] = 8,
    adapters: Annotated[int, typer.Option(min=1, help="Random adapters, one slot each (--max-loras).")] = 4,
    rank: Annotated[int, typer.Option(min=1, help="Their rank (--max-lora-rank).")] = 8,
    targets: Annotated[str, typer.Option(help="What they adapt: qv (q/v projections) or all (every projection).")]
    = "qv",
    max_tokens: Annotated[int, typer.Option(min=1, help="Tokens generated per request (EOS ignored).")] = 64,
    rounds: Annotated[int, typer.Option(min=1, help="Rounds of the pyagent runs; medians are reported.")] = 5,
    llama_server: Annotated[Path | None, typer.Option(
        "--llama-server", help="llama.cpp's llama-server binary: measured without and with --lora on the first "
                               "adapter file, with as many slots as streams.")] = None,
    out: OutOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Throughput of concurrent streams over several LoRA adapters against the base model, adapter load time,
    and llama-server's --lora on the same GGUF adapter."""
    from pyagent_engine.benchmarks.lora import TARGETS, LoRABenchSettings, run_lora_benchmark

    if targets not in TARGETS:
        raise typer.BadParameter(f"choose one of {', '.join(TARGETS)}, got {targets!r}", param_hint="--targets")
    if llama_server is not None and not llama_server.is_file():
        raise typer.BadParameter(f"{llama_server} is not a file; give the path of llama-server",
                                 param_hint="--llama-server")
    report = run_lora_benchmark(LoRABenchSettings(model=model, streams=streams, adapters=adapters, rank=rank,
                                                  targets=targets, max_tokens=max_tokens, rounds=rounds,
                                                  llama_server=llama_server))
    if save_or_print_json(report, out, json_out):
        return
    host, ours = report["host"], report["pyagent"]
    print_table(
        f"{streams} concurrent streams, {max_tokens} tokens each (EOS ignored), {adapters} random adapters of rank "
        f"{rank} on {targets}; {host['cpu']} x{host['logical_cpus']}, kernels {host['isa']}, "
        f"precision {report['precision']}, load average {host['load_average']}",
        ["engine", "run", "output tok/s (median)", "x base (median of rounds)"],
        [("pyagent", name, _number(value), f"{ours['ratios'].get(name, 1.0):.2f}x")
         for name, value in ours["tok_s"].items()]
        + [("llama-server", name, _number(value),
            f"{value / report['llama_server']['tok_s']['base']:.2f}x")
           for name, value in report.get("llama_server", {}).get("tok_s", {}).items()],
    )
    typer.echo(f"adapter load: read {ours['load']['read_ms']:.1f} ms, copy into a slot "
               f"{ours['load']['slot_copy_ms']:.2f} ms (median of {adapters})")
