"""llama.cpp (``llama-cpp-python``) as a peer of ``pyagent bench engine``, run in a child process.

A native library that crashes (a build for another CPU, a bad GGUF) would take the whole benchmark
down with it, so the measuring runs in ``python -m pyagent_engine.benchmarks.llama_cpp_peer``, which
reads the GGUF path, the token budget and the prompts' token ids as JSON on stdin and prints one
JSON object: the per-prompt statistics. The parent turns a crash into an unavailable peer.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def measure(gguf: str, prompts: Sequence[list[int]], new_tokens: int) -> dict[str, Any]:
    """Greedy single-stream runs: a warm-up, then one per prompt; each prompt's token times."""
    import llama_cpp

    llm = llama_cpp.Llama(model_path=gguf, n_ctx=2048, verbose=False)

    def run_one(ids: list[int]) -> dict[str, Any]:
        llm.reset()  # no prompt prefix reused from the previous request
        start, tokens = time.perf_counter(), []
        for _ in llm.generate(ids, top_k=1, top_p=1.0, min_p=0.0, temp=0.0, reset=True):
            tokens.append(time.perf_counter())
            if len(tokens) == new_tokens:
                break
        return {"start": start, "tokens": tokens}

    run_one(prompts[0])
    return {"version": llama_cpp.__version__, "runs": [run_one(ids) for ids in prompts]}


def run_in_child(gguf: Path, prompts: Sequence[list[int]], new_tokens: int,
                 timeout_s: float = 600) -> tuple[dict[str, Any] | None, str | None]:
    """``(result of measure, None)``, or ``(None, why the peer is unavailable)``."""
    if importlib.util.find_spec("llama_cpp") is None:
        return None, "not installed"
    request = json.dumps({"gguf": str(gguf), "prompts": [list(p) for p in prompts], "new_tokens": new_tokens})
    try:
        child = subprocess.run([sys.executable, "-m", __name__], input=request, capture_output=True, text=True,
                               timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return None, f"llama.cpp did not finish within {timeout_s:.0f} s"
    if child.returncode != 0:
        detail = child.stderr.strip().splitlines()[-1:] or [f"exit status {child.returncode}"]
        cause = f"signal {-child.returncode}" if child.returncode < 0 else detail[0]
        return None, f"llama.cpp failed ({cause}); reinstall llama-cpp-python for this CPU"
    return json.loads(child.stdout), None


if __name__ == "__main__":
    job = json.load(sys.stdin)
    json.dump(measure(job["gguf"], job["prompts"], job["new_tokens"]), sys.stdout)
