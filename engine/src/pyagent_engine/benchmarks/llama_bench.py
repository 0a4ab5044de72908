"""pp/tg throughput of pyagent beside llama.cpp's native ``llama-bench``, for ``pyagent bench engine``.

``llama-bench -p 512 -n 128`` reports two numbers per model: ``pp512``, prompt processing (one
512-token batch, tok/s) and ``tg128``, text generation (128 single-token steps from an empty
context, tok/s), each the mean of ``-r`` repetitions after a warm-up. pyagent is measured the same
way on the same file in the same run: a 512-token prompt of random token ids (seeded) whose time to
first token gives pp, and 128 greedy tokens after a one-token prompt, whose decode rate gives tg
(``ignore_eos``; the rate of the steps after the first token). The binary is the user's (a native
build, ``GGML_NATIVE=ON``, is llama.cpp at its best); it runs in a child process, so a crash or a
missing binary makes the peer unavailable instead of ending the benchmark.
"""

from __future__ import annotations

import json
import statistics
import subprocess
from pathlib import Path
from typing import Any

import attrs


@attrs.frozen(kw_only=True)
class PpTgSettings:
    """What the pp/tg comparison runs.

    Attributes:
        binary: the ``llama-bench`` executable.
        prompt_tokens: pp's prompt length (llama-bench ``-p``).
        gen_tokens: tg's generated tokens (llama-bench ``-n``).
        repetitions: timed runs per test on each side (llama-bench ``-r``), after one warm-up.
        threads: threads for both (llama-bench ``-t``; pyagent's kernels use torch's thread count).
    """

    binary: Path
    prompt_tokens: int = 512
    gen_tokens: int = 128
    repetitions: int = 3
    threads: int = 2


def run_llama_bench(settings: PpTgSettings, gguf: Path, timeout_s: float = 1800) -> tuple[dict[str, Any] | None,
                                                                                          str | None]:
    """``(llama.cpp's pp and tg figures, None)`` or ``(None, why the peer is unavailable)``."""
    argv = [str(settings.binary), "-m", str(gguf), "-p", str(settings.prompt_tokens), "-n", str(settings.gen_tokens),
            "-t", str(settings.threads), "-r", str(settings.repetitions), "-o", "json"]
    try:
        child = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)
    except FileNotFoundError:
        return None, f"{settings.binary} does not exist; pass the path of llama.cpp's llama-bench"
    except PermissionError:
        return None, f"{settings.binary} is not executable"
    except subprocess.TimeoutExpired:
        return None, f"llama-bench did not finish within {timeout_s:.0f} s"
    if child.returncode != 0:
        detail = child.stderr.strip().splitlines()[-1:] or [f"exit status {child.returncode}"]
        return None, f"llama-bench failed ({detail[0]})"
    try:
        records = json.loads(child.stdout)
        pp = next(r for r in records if r["n_prompt"] > 0 and r["n_gen"] == 0)
        tg = next(r for r in records if r["n_gen"] > 0 and r["n_prompt"] == 0)
    except (ValueError, KeyError, TypeError, StopIteration):
        return None, f"llama-bench printed no pp and tg results as JSON: {child.stdout[:200]!r}"
    return {"engine": "llama.cpp", "build": f"{pp.get('build_number')} ({pp.get('build_commit')})",
            "cpu": pp.get("cpu_info"), "backend": pp.get("backends"), "model_type": pp.get("model_type"),
            "threads": pp.get("n_threads"), "pp_tok_s": pp["avg_ts"], "pp_runs": pp.get("samples_ts"),
            "tg_tok_s": tg["avg_ts"], "tg_runs": tg.get("samples_ts")}, None


def pyagent_pp_tg(llm: Any, dtype: str, settings: PpTgSettings) -> dict[str, Any]:
    """pyagent's pp and tg on ``llm`` (loaded in ``dtype``): a warm-up of each, then ``repetitions``
    timed runs; the means."""
    import torch

    from pyagent_engine.requests.params import SamplingParams

    generator = torch.Generator().manual_seed(0)

    def run(prompt_tokens: int, new_tokens: int) -> Any:
        ids = torch.randint(llm.loaded.config.vocab_size, (prompt_tokens,), generator=generator).tolist()
        params = SamplingParams(max_tokens=new_tokens, temperature=0.0, ignore_eos=True)
        (output,) = llm.generate([ids], params)
        if output.error is not None or output.metrics is None or output.metrics.time_to_first_token is None:
            raise RuntimeError(f"pyagent request failed: {output.error}")
        return output.metrics

    def timed(measure: Any) -> list[float]:
        measure()
        return [measure() for _ in range(settings.repetitions)]

    pp = timed(lambda: settings.prompt_tokens / run(settings.prompt_tokens, 1).time_to_first_token)
    # tg: the decode rate of the steps after the first token, which the one-token prompt gives
    tg = timed(lambda: run(1, settings.gen_tokens + 1).decode_tokens_per_s)
    return {"engine": "pyagent", "dtype": dtype, "precision": llm.loaded.precision,
            "threads": torch.get_num_threads(), "pp_tok_s": statistics.mean(pp), "pp_runs": pp,
            "tg_tok_s": statistics.mean(tg), "tg_runs": tg}
