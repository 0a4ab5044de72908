"""``pyagent generate`` and ``pyagent chat``: run the model with the selected plugins.

The engine (and torch) is imported inside the commands, so the rest of the CLI stays fast.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import attrs
import typer

from pyagent_core.commands import ReasoningOpt, ToolParserOpt, ToolsOpt, error
from pyagent_core.errors import RequestError
from pyagent_core.options import parse_assignments
from pyagent_core.text import check_text, text_problem
from pyagent_engine.cli import (
    batch_flags,
    cache_flags,
    chat_parsing,
    constraints,
    input_file,
    logprob_flags,
    lora_flags,
)
from pyagent_engine.cli import speculative as spec_cli
from pyagent_engine.cli.line_editor import LineEditor, StopOnInterrupt
from pyagent_engine.cli.sampler_flags import SamplerSettings, with_sampler_flags
from pyagent_engine.models.config import DEFAULT_DTYPE

if TYPE_CHECKING:
    from pyagent_engine.api.llm import LLM, Prompt
    from pyagent_engine.requests.params import SamplingParams
    from pyagent_engine.requests.request import RequestOutput
    from pyagent_engine.spec.config import SpeculativeConfig
    from pyagent_engine.structured.orchestrator import StructuredConfig

ModelOpt = Annotated[str | None, typer.Option("--model", help="A .gguf file or checkpoint folder (default: embedded).")]
DtypeOpt = Annotated[str, typer.Option("--dtype", help="float32 or bfloat16.")]
DequantizeOpt = Annotated[bool, typer.Option(
    "--dequantize", help="Dequantize a GGUF's block-quantized matrices at load instead of decoding them per step.")]
PrecisionOpt = Annotated[str | None, typer.Option(
    "--precision", help="Products with a GGUF's quantized matrices: int8 (int8 activations, integer dot products, "
    "as llama.cpp) or exact (the dequantized model's bits). Default: $PYAGENT_PRECISION, pyagent.toml's "
    "[engine] precision, else int8.")]
AttentionOpt = Annotated[str | None, typer.Option("--attention", help="Attention backend (default: selection).")]
AttentionOptsOpt = Annotated[list[str] | None, typer.Option("--attention-opt", help="Attention option KEY=VALUE.")]
MaxTokensOpt = Annotated[int, typer.Option("--max-tokens", help="Most tokens to generate per request.")]
TemperatureOpt = Annotated[float, typer.Option("--temperature", help="0 is greedy.")]
TopPOpt = Annotated[float, typer.Option("--top-p", help="Nucleus sampling mass (1 turns it off).")]
TopKOpt = Annotated[int, typer.Option("--top-k", help="Keep the k most likely tokens (0 turns it off).")]
SeedOpt = Annotated[int | None, typer.Option("--seed", help="Per-request seed for reproducible sampling.")]
StopOpt = Annotated[list[str] | None, typer.Option("--stop", help="Stop string (repeatable).")]
SystemOpt = Annotated[str | None, typer.Option("--system", help="System message for chat-templated prompts.")]
COMMAND = re.compile(r"/[A-Za-z][\w-]*")
"""A line that is one word starting with ``/`` is a command of ``pyagent chat``, never sent to the model."""
CHAT_HELP = """Commands (a line holding one word that starts with /; anything else goes to the model):
  /help    this list
  /reset   forget the conversation (the --system message stays)
  /exit    quit (also /quit, or Ctrl-D)
Ctrl-C stops the reply being written; the conversation goes on."""

KvOpt = Annotated[float, typer.Option(
    "--kv-cache-gib", help="Memory for the KV cache (and the recurrent states of models with state layers), in GiB; "
    "checked against the memory available.")]


def _progress() -> Callable[[int, int, str], None]:
    """A rich progress bar on stderr fed by the loader's callback (shown only during the first conversion)."""
    from rich.console import Console
    from rich.progress import Progress

    bar = Progress(transient=True, console=Console(stderr=True))
    task: list[Any] = []

    def update(done: int, total: int, what: str) -> None:
        if not task:
            bar.start()
            task.append(bar.add_task("converting model", total=total))
        bar.update(task[0], completed=done, description=f"converting {what}"[:60])
        if done >= total:
            bar.stop()

    return update


def build_llm(model: str | None, dtype: str, attention: str | None, attention_opt: list[str] | None,
              kv_cache_gib: float, structured: StructuredConfig | None = None,
              speculative: SpeculativeConfig | None = None, sampler: SamplerSettings | None = None,
              cache: Mapping[str, Any] | None = None, dequantize: bool = False,
              precision: str | None = None, lora: Mapping[str, Any] | None = None) -> LLM:
    """Load the model and build the engine with the selected backends and sampler chain (``lora``: the
    LoRA keywords of :mod:`pyagent_engine.cli.lora_flags`)."""
    from pyagent_engine.api.llm import LLM
    from pyagent_engine.core.config import EngineConfig

    sampler = sampler or SamplerSettings()
    return LLM(model, dtype=dtype, attention=attention, attention_options=parse_assignments(attention_opt or []),
               samplers=sampler.order, sampler_options=sampler.options, progress=_progress(),
               config=EngineConfig(kv_cache_gib=kv_cache_gib, **(cache or {})), structured=structured,
               speculative=speculative, quantized=not dequantize, precision=precision, **(lora or {}))


def engine_fields(logprobs_mode: str, prefix_caching: bool, eviction: str | None, eviction_opt: list[str] | None,
                  kv_hash: str, offload_blocks: int, scheduler: str | None, scheduler_opt: list[str] | None,
                  max_num_seqs: int, max_num_batched_tokens: int, block_size: int) -> dict[str, Any]:
    """The :class:`~pyagent_engine.core.config.EngineConfig` fields the engine flags of ``generate`` and ``serve``
    set."""
    return {"logprobs_mode": logprobs_mode,
            **cache_flags.cache_config(prefix_caching, eviction, eviction_opt, kv_hash, offload_blocks),
            **batch_flags.scheduler_config(scheduler, scheduler_opt),
            **batch_flags.batch_config(max_num_seqs, max_num_batched_tokens, block_size)}


def check_arguments(texts: Mapping[str, str | None]) -> None:
    """Raise :class:`RequestError` for a command-line text that is not UTF-8 (its bytes arrive as surrogate
    escapes), naming the argument and the byte, before anything loads."""
    for where, text in texts.items():
        if text is not None:
            check_text(text, where, escaped_bytes=True)


def _record(output: RequestOutput, backends: dict[str, str],
            decode: Callable[[int], str] | None = None) -> dict[str, Any]:
    metrics = output.metrics
    logprobs = {}
    if output.logprobs is not None:
        logprobs["logprobs"] = logprob_flags.logprob_records(output.logprobs, decode)
    if output.prompt_logprobs is not None:
        logprobs["prompt_logprobs"] = logprob_flags.logprob_records(output.prompt_logprobs, decode)
    return {
        "request_id": output.request_id, "prompt": output.prompt, "prompt_token_ids": output.prompt_token_ids,
        "output_token_ids": output.output_token_ids, "text": output.text,
        "finish_reason": output.finish_reason, "error": output.error, "backends": backends,
        "time_to_first_token_s": metrics.time_to_first_token if metrics else None,
        "decode_tokens_per_s": metrics.decode_tokens_per_s if metrics else None,
        "total_time_s": metrics.total_time if metrics else None,
        "cached_prompt_tokens": output.num_cached_tokens,
        "grammar": output.structured.to_dict() if output.structured else None,
        **logprobs,
    }


def _backends(llm: LLM, outputs: list[RequestOutput]) -> dict[str, str]:
    grammar = constraints.grammar_backends(outputs)
    return llm.engine.backends if grammar is None else {**llm.engine.backends, "grammar": grammar}


def _summary(finals: list[RequestOutput], backends: dict[str, str], wall: float) -> str:
    done = [o for o in finals if o.error is None]
    prompt_tokens = sum(len(o.prompt_token_ids) for o in done)
    output_tokens = sum(len(o.output_token_ids) for o in done)
    ttfts = [o.metrics.time_to_first_token for o in done if o.metrics and o.metrics.time_to_first_token]
    decode = [o.metrics.decode_tokens_per_s for o in done if o.metrics and o.metrics.decode_tokens_per_s]
    used = ", ".join(f"{kind}={name}" for kind, name in backends.items())
    ttft = f"{1000 * sum(ttfts) / len(ttfts):.0f} ms" if ttfts else "-"
    per_stream = f"{sum(decode) / len(decode):.1f} tok/s per request" if decode else "- tok/s"
    cached = sum(o.num_cached_tokens for o in done)
    prompt = f"{prompt_tokens} prompt ({cached} cached)" if cached else f"{prompt_tokens} prompt"
    return (f"[{used}] {len(done)}/{len(finals)} requests, {prompt} + {output_tokens} output "
            f"tokens, ttft {ttft}, decode {per_stream}, {output_tokens / wall:.1f} tok/s overall")


def _run(llm: LLM, prompts: list[Prompt], params: SamplingParams | list[SamplingParams], chat: bool,
         system: str | None, stream_text: bool, lora: str | None) -> Iterator[RequestOutput]:
    for output in llm.stream(prompts, params, chat=chat, system=system, lora_request=lora):
        if stream_text and output.delta:
            sys.stdout.write(output.delta)
            sys.stdout.flush()
        if output.finished:
            yield output


def generate(
    prompt: Annotated[str | None, typer.Argument(help="The prompt (omit with --input).")] = None,
    input_path: Annotated[Path | None, typer.Option(
        "--input", help="Prompts file: text lines or JSON lines (prompt or messages, optional id/custom_id).")] = None,
    strict: Annotated[bool, typer.Option("--strict", help=(
        "With --input, stop before generating if any line is bad (default: bad lines fail alone)."))] = False,
    model: ModelOpt = None, dtype: DtypeOpt = DEFAULT_DTYPE, dequantize: DequantizeOpt = False,
    precision: PrecisionOpt = None,
    attention: AttentionOpt = None, attention_opt: AttentionOptsOpt = None, max_tokens: MaxTokensOpt = 128,
    temperature: TemperatureOpt = 0.0,
    top_p: TopPOpt = 1.0, top_k: TopKOpt = 0, seed: SeedOpt = None, stop: StopOpt = None,
    system: SystemOpt = None,
    raw: Annotated[bool, typer.Option("--raw", help="Send the prompt as is, without the chat template.")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="One JSON object per request instead of text.")] = False,
    kv_cache_gib: KvOpt = 1.0,
    json_schema: constraints.JsonSchemaOpt = None, json_object: constraints.JsonObjectOpt = False,
    regex: constraints.RegexOpt = None, choice: constraints.ChoiceOpt = None, grammar: constraints.GrammarOpt = None,
    grammar_backend: constraints.GrammarBackendOpt = "auto", no_grammar_fallback: constraints.NoFallbackOpt = False,
    grammar_order: constraints.GrammarOrderOpt = None, grammar_timeout: constraints.GrammarTimeoutOpt = 30.0,
    no_jump_forward: constraints.NoJumpForwardOpt = False, json_whitespace: constraints.JsonWhitespaceOpt = "bounded",
    speculative: spec_cli.SpeculativeOpt = None, num_draft_tokens: spec_cli.NumDraftOpt = 8,
    spec_opt: spec_cli.SpecOptsOpt = None, sampler: SamplerSettings | None = None,
    prefix_caching: cache_flags.PrefixCachingOpt = False, eviction: cache_flags.EvictionOpt = None,
    eviction_opt: cache_flags.EvictionOptsOpt = None, kv_hash: cache_flags.KvHashOpt = "sha256",
    offload_blocks: cache_flags.OffloadOpt = 0, scheduler: batch_flags.SchedulerOpt = None,
    scheduler_opt: batch_flags.SchedulerOptsOpt = None,
    max_num_seqs: batch_flags.MaxNumSeqsOpt = 32, max_num_batched_tokens: batch_flags.MaxNumBatchedTokensOpt = 1024,
    block_size: batch_flags.BlockSizeOpt = 16,
    logprobs: logprob_flags.LogprobsOpt = None, prompt_logprobs: logprob_flags.PromptLogprobsOpt = None,
    logprobs_mode: logprob_flags.LogprobsModeOpt = "raw",
    ignore_eos: Annotated[bool, typer.Option(
        "--ignore-eos", help="Keep generating past end-of-sequence tokens, up to --max-tokens.")] = False,
    lora: lora_flags.LoRAOpt = None,
) -> None:
    """Generate text for one prompt (streamed) or a file of prompts (batched), then print a summary line.

    With a constraint (--json-schema, --json-object, --regex, --choice or --grammar) the output follows it;
    the summary names the grammar backend that served it and the tokens jump-forward appended.
    """
    import time

    from pyagent_engine.requests.params import SamplingParams

    if (prompt is None) == (input_path is None):
        raise RequestError("give a PROMPT or --input FILE (exactly one)")
    check_arguments({"the prompt": prompt, "--system": system, "--regex": regex, "--choice": choice,
                     **{f"--stop {i + 1}": text for i, text in enumerate(stop or ())}})
    lines = input_file.read_prompt_lines(input_path) if input_path else [input_file.PromptLine(0, 1, prompt or "")]
    _stop_if_strict(lines, strict)
    structured_config = constraints.structured_config(grammar_order, grammar_timeout, no_jump_forward)
    structured = constraints.structured_params(json_schema, json_object, regex, choice, grammar, grammar_backend,
                                               no_grammar_fallback, structured_config, json_whitespace)
    params = SamplingParams(max_tokens=max_tokens, temperature=temperature, top_p=top_p, top_k=top_k,
                            seed=seed, stop=tuple(stop or ()), ignore_eos=ignore_eos, structured=structured,
                            extra=sampler.params if sampler else {}, logprobs=logprobs,
                            prompt_logprobs=prompt_logprobs)
    engine_config = engine_fields(logprobs_mode, prefix_caching, eviction, eviction_opt, kv_hash, offload_blocks,
                                  scheduler, scheduler_opt, max_num_seqs, max_num_batched_tokens, block_size)
    lora_keywords, adapter = lora_flags.single_adapter(lora)
    llm = build_llm(model, dtype, attention, attention_opt, kv_cache_gib, structured_config,
                    spec_cli.speculative_config(speculative, num_draft_tokens, spec_opt), sampler, engine_config,
                    dequantize, precision, lora_keywords)
    llm.check_params(params)
    if input_path and llm.loaded.chat_template is not None:
        lines = input_file.check_messages(input_path, lines, llm.loaded.chat_template)
        _stop_if_strict(lines, strict)
    started = time.perf_counter()
    single = input_path is None and not json_out
    good = [line for line in lines if line.prompt is not None]
    ready = {line.index: _line_failure(line) for line in lines if line.prompt is None}
    finals: list[RequestOutput] = []
    per_line = [attrs.evolve(params, **line.scheduling) for line in good]  # checked while reading the file
    outputs = _run(llm, [line.prompt for line in good if line.prompt is not None], per_line, not raw, system,
                   stream_text=single, lora=adapter)

    def write_ready() -> bool:
        """Write the outputs that are next in input order, each as soon as the ones before it are out;
        True when Ctrl-C came meanwhile (it waits until they are written, so none is cut or written twice)."""
        with StopOnInterrupt() as stop:
            while len(finals) in ready:
                line, output = lines[len(finals)], ready[len(finals)]
                if output.error is not None:
                    error(output.error)
                _emit(line, output, llm, json_out, single)
                finals.append(ready.pop(len(finals)))
        return stop.requested

    interrupted = False
    try:
        for output in outputs:
            line = good[int(output.request_id)]
            ready[line.index] = _named(output, line, input_path)
            if write_ready():
                raise KeyboardInterrupt
    except KeyboardInterrupt:  # Ctrl-C: what finished still goes out, the rest as interrupted
        interrupted = True
        for line in lines[len(finals):]:
            ready.setdefault(line.index, _interrupted(line, input_path))
    write_ready()  # failed lines left at the tail, or everything after an interrupt
    llm.close()
    summary = _summary(finals, _backends(llm, finals), time.perf_counter() - started)
    typer.echo(summary + constraints.grammar_notes(finals) + spec_cli.speculative_notes(llm), err=True)
    if interrupted:
        raise typer.Exit(130)
    if any(o.error is not None for o in finals):
        raise typer.Exit(2)


def _named(output: RequestOutput, line: input_file.PromptLine, input_path: Path | None) -> RequestOutput:
    """``output`` with its error headed by the line's ``FILE:LINE`` (a prompts file's line that failed in
    the engine, a prompt longer than the context, say), as a line that failed while being read has it."""
    if output.error is None or input_path is None:
        return output
    return attrs.evolve(output, error=f"{input_path}:{line.line}: {output.error}")


def _interrupted(line: input_file.PromptLine, input_path: Path | None) -> RequestOutput:
    """The output of a line that had not finished when Ctrl-C stopped the run."""
    from pyagent_engine.requests.request import RequestOutput

    where = f"{input_path}:{line.line}: " if input_path else ""
    return RequestOutput(request_id=f"line-{line.line}", prompt=None, prompt_token_ids=[], output_token_ids=[],
                         text="", delta="", finished=True, finish_reason="abort",
                         error=f"{where}interrupted (Ctrl-C) before it finished")


def _stop_if_strict(lines: list[input_file.PromptLine], strict: bool) -> None:
    """With ``strict``, print every bad line's error and stop when there is one."""
    failed = [line.error for line in lines if line.error is not None]
    if strict and failed:
        for problem in failed:
            error(problem)
        raise RequestError(f"{len(failed)} of {len(lines)} lines are bad; nothing was generated (--strict)")


def _line_failure(line: input_file.PromptLine) -> RequestOutput:
    """The output of a line that could not become a request."""
    from pyagent_engine.requests.request import RequestOutput

    return RequestOutput(request_id=f"line-{line.line}", prompt=None, prompt_token_ids=[], output_token_ids=[],
                         text="", delta="", finished=True, finish_reason="error", error=line.error)


def _emit(line: input_file.PromptLine, output: RequestOutput, llm: LLM, json_out: bool, single: bool) -> None:
    """Write one finished output: a JSON record carrying the line's index and ids, or its text."""
    if json_out:
        record = {"index": line.index, **line.ids,
                  **_record(output, _backends(llm, [output]), lambda token: llm.tokenizer.decode([token])),
                  "speculative": spec_cli.speculative_stats(llm)}
        sys.stdout.write(json.dumps(record) + "\n")
    elif single:
        sys.stdout.write("\n")
    elif output.error is None:
        name = " ".join(f"{key}={value}" for key, value in line.ids.items()) or f"line {line.line}"
        sys.stdout.write(f"--- [{name}] {output.finish_reason}\n{output.text}\n")
    sys.stdout.flush()


def chat(
    model: ModelOpt = None, dtype: DtypeOpt = DEFAULT_DTYPE, dequantize: DequantizeOpt = False,
    precision: PrecisionOpt = None, attention: AttentionOpt = None, attention_opt: AttentionOptsOpt = None,
    max_tokens: MaxTokensOpt = 512,
    temperature: TemperatureOpt = 0.7,
    top_p: TopPOpt = 0.95, top_k: TopKOpt = 0, seed: SeedOpt = None, system: SystemOpt = None,
    kv_cache_gib: KvOpt = 1.0, sampler: SamplerSettings | None = None,
    tools: ToolsOpt = None, tool_parser: ToolParserOpt = None,
    reasoning_parser: ReasoningOpt = None, scheduler: batch_flags.SchedulerOpt = None,
    scheduler_opt: batch_flags.SchedulerOptsOpt = None, lora: lora_flags.LoRAOpt = None,
) -> None:
    """Interactive multi-turn chat with streaming; /help lists the commands, /reset clears the history,
    /exit (or EOF) quits.

    Turns are typed in a line editor (readline: arrow keys, history, no line-length limit); Ctrl-C
    during a reply stops it and keeps the conversation, Ctrl-C while typing drops the line.

    With --tool-parser / --reasoning-parser each reply is parsed: reasoning is shown dimmed, tool calls
    in a table; --tools offers tools to the model (through its chat template, when it takes them).
    """
    from pyagent_engine.requests.params import SamplingParams

    check_arguments({"--system": system})
    parsing = chat_parsing.chat_parsing(tools, tool_parser, reasoning_parser)  # bad names fail before loading
    params = SamplingParams(max_tokens=max_tokens, temperature=temperature, top_p=top_p, top_k=top_k, seed=seed,
                            extra=sampler.params if sampler else {})
    lora_keywords, adapter = lora_flags.single_adapter(lora)
    llm = build_llm(model, dtype, attention, attention_opt, kv_cache_gib, sampler=sampler, dequantize=dequantize,
                    cache=batch_flags.scheduler_config(scheduler, scheduler_opt), precision=precision,
                    lora=lora_keywords)
    llm.check_params(params)
    history: list[dict[str, str]] = [{"role": "system", "content": system}] if system else []
    editor = LineEditor(sys.stdin.isatty())
    used = ", ".join(f"{kind}={name}" for kind, name in llm.engine.backends.items())
    typer.echo(f"pyagent chat: {llm.loaded.source.name} [{used}]; /help lists the commands, /exit or Ctrl-D quits",
               err=True)
    refused = False
    while (line := editor.read()) is not None:
        command = line.strip()
        if COMMAND.fullmatch(command):
            if command in ("/exit", "/quit"):
                break
            if command == "/reset":
                history = history[:1] if system else []
                typer.echo("[history cleared" + ("; the system message stays]" if system else "]"), err=True)
            elif command == "/help":
                typer.echo(CHAT_HELP, err=True)
            else:
                error(f"unknown command {command}; /help lists the commands")
            continue
        problem = text_problem(line, escaped_bytes=True)
        if problem is not None:
            error(f"the line was not sent: {problem}; type or pipe UTF-8 text")
            refused = True
            continue
        if not command:
            continue
        history.append({"role": "user", "content": line})
        with StopOnInterrupt() as stop:
            reply = _chat_reply(llm, history, params, stop, adapter) if parsing is None else \
                parsing.reply(llm, history, params, stop, adapter)
        if reply.error is not None:
            history.pop()
            error(reply.error)
            continue
        if stop.requested:
            typer.echo("[reply stopped; the conversation goes on, /exit or Ctrl-D quits]", err=True)
        history.append({"role": "assistant", "content": reply.text})
    llm.close()
    if refused:
        raise typer.Exit(2)


def _chat_reply(llm: LLM, history: list[dict[str, str]], params: SamplingParams,
                stop: StopOnInterrupt, lora: str | None) -> RequestOutput:
    """Stream one reply to stdout (with LoRA adapter ``lora``); return its last output (the text so far when
    Ctrl-C stopped it)."""
    final = None
    for output in chat_parsing.stream_reply(llm, history, params, stop, lora):
        sys.stdout.write(output.delta)
        sys.stdout.flush()
        final = output
    sys.stdout.write("\n")
    assert final is not None
    return final


def register(app: typer.Typer) -> None:
    """Add ``generate`` and ``chat`` to ``app``."""
    app.command("generate")(with_sampler_flags(generate))
    app.command("chat")(with_sampler_flags(chat))
