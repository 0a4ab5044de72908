"""program: a Program runs a decoder layer's prepared calls (norm, products at both precisions and
dtypes, RoPE, a torch step between them, SwiGLU) with the bits of running them one by one, on every ISA
variant; runs of known C calls become one call into C; a failing op is named; the torch fallbacks run
as they are."""

from __future__ import annotations

import pytest
import torch

import pyagent_kernels
from pyagent_kernels import KernelError, PreparedCall, run_prepared
from pyagent_kernels._extension import load
from pyagent_kernels.layer_ops import prepare_add_rms_norm, prepare_rope_split, prepare_silu_mul
from pyagent_kernels.linear import prepare_linear
from pyagent_kernels.program import Program
from pyagent_kernels.quantized import QuantizedWeight

from .test_kernels_linear_quantized import gguf_blocks

COMPILED = bool(pyagent_kernels.status()["compiled"])
needs_c = pytest.mark.skipif(not COMPILED, reason="pyagent_kernels._C is not built")
HEADS, KV_HEADS, DIM, HIDDEN, INTER = 4, 2, 8, 64, 96


def layer(dtype: torch.dtype, weights: str, backend: str,
          seed: int) -> tuple[list[PreparedCall], dict[str, torch.Tensor]]:
    """A layer's calls on fresh buffers: add_rms_norm, the q/k/v product, rope_split, a torch step
    (scaling v), the gate/up product, silu_mul, the down product. ``weights``: "dense" or a GGUF format
    (int8 for q/k/v and down, exact for gate/up)."""
    gen = torch.Generator().manual_seed(seed)
    tokens, qkv_rows = 3, (HEADS + 2 * KV_HEADS) * DIM

    def matrix(out: int, inner: int, offset: int) -> torch.Tensor | QuantizedWeight:
        if weights == "dense":
            return (torch.randn(out, inner, generator=gen) / inner**0.5).to(dtype)
        blocks = gguf_blocks(weights, out, inner, seed + offset)
        return QuantizedWeight.from_gguf(torch.from_numpy(blocks), weights, inner)

    b = {"hidden": torch.randn(tokens, HIDDEN, generator=gen).to(dtype),
         "delta": torch.randn(tokens, HIDDEN, generator=gen).to(dtype),
         "norm": (1 + torch.randn(HIDDEN, generator=gen) / 8).to(dtype),
         "cos": torch.randn(tokens, DIM, generator=gen).to(dtype),
         "sin": torch.randn(tokens, DIM, generator=gen).to(dtype)}
    b |= {name: torch.empty(tokens, width, dtype=dtype) for name, width in
          (("normed", HIDDEN), ("qkv", qkv_rows), ("gate_up", 2 * INTER), ("act", INTER), ("out", HIDDEN))}
    b |= {"q": torch.empty(tokens, HEADS, DIM, dtype=dtype), "k": torch.empty(tokens, KV_HEADS, DIM, dtype=dtype),
          "v": torch.empty(tokens, KV_HEADS, DIM, dtype=dtype)}
    qkv_w, gate_up_w, down_w = matrix(qkv_rows, HIDDEN, 1), matrix(2 * INTER, HIDDEN, 2), matrix(HIDDEN, INTER, 3)
    v = b["v"]

    def scale_v() -> int:
        v.mul_(2)
        return 0

    calls = [
        prepare_add_rms_norm(b["hidden"], b["norm"], 1e-5, b["delta"], b["normed"], backend=backend),
        prepare_linear(b["normed"], qkv_w, b["qkv"], threads=2, backend=backend, precision="int8"),
        prepare_rope_split(b["qkv"], b["cos"], b["sin"], HEADS, KV_HEADS, DIM, (b["q"], b["k"], v), backend=backend),
        PreparedCall(scale_v, (), "scale_v", (v,)),
        prepare_linear(b["normed"], gate_up_w, b["gate_up"], threads=1, backend=backend, precision="exact"),
        prepare_silu_mul(b["gate_up"], b["act"], backend=backend),
        prepare_linear(b["act"], down_w, b["out"], threads=2, backend=backend, precision="int8"),
    ]
    return calls, b


CASES = [(torch.float32, "dense"), (torch.bfloat16, "dense"), (torch.float32, "q4_1"), (torch.bfloat16, "q8_0"),
         (torch.float32, "q5_0")]


@needs_c
@pytest.mark.parametrize(("dtype", "weights"), CASES)
def test_a_program_gives_the_bits_of_the_calls_one_by_one(c_isa: str, dtype: torch.dtype, weights: str) -> None:
    calls, ours = layer(dtype, weights, "c", seed=7)
    reference_calls, reference = layer(dtype, weights, "c", seed=7)
    program = Program(calls)
    # norm + q/k/v + rope in one call into C, the torch step, then gate/up + silu + down in one
    assert [step.kernel for step in program.steps] == ["add_rms_norm+linear+rope_split", "scale_v",
                                                         "linear+silu_mul"]
    for _ in range(2):  # a second run reads the buffers' new values, as the calls one by one do
        program.run()
        run_prepared(reference_calls)
        for name in ("hidden", "normed", "qkv", "q", "k", "v", "gate_up", "act", "out"):
            assert torch.equal(ours[name], reference[name]), name


@pytest.mark.parametrize(("dtype", "weights"), [(torch.float32, "dense"), (torch.float32, "q4_1")])
def test_torch_fallbacks_run_as_they_are(dtype: torch.dtype, weights: str) -> None:
    calls, ours = layer(dtype, weights, "torch", seed=3)
    reference_calls, reference = layer(dtype, weights, "torch", seed=3)
    program = Program(calls)
    assert len(program.steps) == len(calls)  # nothing to batch: every call is Python
    program.run()
    run_prepared(reference_calls)
    assert torch.equal(ours["out"], reference["out"]) and torch.equal(ours["v"], reference["v"])


@needs_c
def test_a_failing_op_is_named_and_stops_the_run() -> None:
    ffi, lib = load().ffi, load().lib
    gate_up, out = torch.randn(1, 8), torch.zeros(1, 4)
    good = prepare_silu_mul(gate_up, out)
    bad = PreparedCall(lib.pak_rope_split, (ffi.NULL,) * 6 + (0, 1, 1, 1, 3, 1), "rope_split", ())  # odd dim
    after = torch.zeros(1, 4)
    never = prepare_silu_mul(gate_up, after)
    program = Program([good, bad, never])
    assert len(program.steps) == 1
    with pytest.raises(KernelError, match=r"^rope_split: the C kernel returned status"):
        program.run()
    assert bool(out.any()), "the call before the failing one did not run"
    assert not bool(after.any()), "the call after the failing one ran"
