"""pp/tg of one hybrid model, LiquidAI LFM2, in pyagent's engine beside llama.cpp's ``llama-bench``.

Builds transformers' ``Lfm2ForCausalLM`` of the size below on random weights (seeded), writes it as a
float32 GGUF file the way llama.cpp's converter writes LFM2 (the writer of pyagent-model-lfm2's
tests, with the checkpoint kit's placeholder vocabulary), then measures on that one file, in one run:
llama.cpp's pp512 and tg128 (``llama-bench``) and pyagent's (the functions ``pyagent bench engine
--llama-bench`` uses: :func:`~pyagent_engine.benchmarks.llama_bench.run_llama_bench` and
:func:`~pyagent_engine.benchmarks.llama_bench.pyagent_pp_tg`). Prints one JSON object with the sizes,
the host's CPU model, flags and load, both sides' figures and the ratios.

With ``--quantize TYPE`` the file is first requantized by the ``llama-quantize`` beside ``llama-bench``
(``Q8_0``, ``Q4_K_M``...), and both engines run the quantized file (pyagent at its default precision).

Usage: ``python tools/bench_hybrid.py LLAMA_BENCH [--quantize TYPE] [--threads N] [--repetitions R] [--out FILE]``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import torch
import transformers

from pyagent_core.testing.model import random_weights
from pyagent_engine.api.llm import LLM
from pyagent_engine.benchmarks.llama_bench import PpTgSettings, pyagent_pp_tg, run_llama_bench
from pyagent_engine.benchmarks.serve import host_info
from pyagent_engine.core.config import EngineConfig
from pyagent_model_base.checkpoint_kit import VOCAB_SIZE

ROOT = Path(__file__).resolve().parents[1]
#: The model: 10 layers (8 short-convolution, 2 attention), hidden 512, 8 heads of 64, 2 key/value heads.
SIZE = {"hidden_size": 512, "intermediate_size": 2048, "block_multiple_of": 256, "num_hidden_layers": 10,
        "num_attention_heads": 8, "num_key_value_heads": 2, "max_position_embeddings": 1024, "norm_eps": 1e-5,
        "conv_L_cache": 3, "layer_types": ["conv", "conv", "full_attention", "conv", "conv", "conv", "conv",
                                           "full_attention", "conv", "conv"],
        "tie_word_embeddings": True, "vocab_size": VOCAB_SIZE, "eos_token_id": 1, "bos_token_id": None,
        "pad_token_id": None}


def write_gguf(folder: Path) -> Path:
    """The random LFM2 of :data:`SIZE`, saved in ``folder`` and as ``folder/lfm2-bench.gguf``."""
    config = transformers.AutoConfig.for_model("lfm2", **SIZE)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config).float().eval()
    state = {name: tuple(t.shape) for name, t in model.state_dict().items() if t.is_floating_point()}
    model.load_state_dict(random_weights(state), strict=False)
    model.save_pretrained(folder, safe_serialization=True)
    spec = importlib.util.spec_from_file_location(
        "lfm2_tests", ROOT / "plugins/models/pyagent-model-lfm2/tests/test_lfm2.py")
    assert spec is not None and spec.loader is not None
    tests = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tests)
    path = folder / "lfm2-bench.gguf"
    tests.write_lfm2_gguf(folder, path)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("llama_bench", type=Path)
    parser.add_argument("--quantize", help="llama-quantize type to requantize the F32 file to first")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    settings = PpTgSettings(binary=args.llama_bench, threads=args.threads, repetitions=args.repetitions)
    with tempfile.TemporaryDirectory() as scratch:
        gguf = write_gguf(Path(scratch))
        if args.quantize:
            quantized = gguf.with_name(f"lfm2-bench-{args.quantize}.gguf")
            quantize = args.llama_bench.with_name("llama-quantize")
            subprocess.run([str(quantize), str(gguf), str(quantized), args.quantize], check=True, capture_output=True)
            gguf = quantized
        report: dict[str, Any] = {"model": {**SIZE, "gguf_bytes": gguf.stat().st_size,
                                            "type": args.quantize or "F32"},
                                  "host": host_info(), "threads": args.threads}
        peer, reason = run_llama_bench(settings, gguf)
        report["llama.cpp"] = peer if peer is not None else {"unavailable": reason}
        os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
        torch.set_num_threads(args.threads)
        llm = LLM(str(gguf), dtype="float32", config=EngineConfig(max_num_seqs=1, max_num_batched_tokens=1024),
                  precision=None if args.quantize else "exact")
        report["pyagent"] = pyagent_pp_tg(llm, "float32", settings)
        report["host"]["load_average_after"] = os.getloadavg()
    if peer is not None:
        report["ratios"] = {key: report["pyagent"][key] / peer[key] for key in ("pp_tok_s", "tg_tok_s")
                            if peer.get(key) and report["pyagent"].get(key)}
    text = json.dumps(report, indent=2)
    if args.out is not None:
        args.out.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
