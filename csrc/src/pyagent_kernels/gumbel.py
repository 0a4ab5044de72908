"""Gumbel-max token selection with a counter-based random stream, reproducible across batches.

Each row's noise is a function of its own ``(seed, step)`` and the token id only (splitmix64),
so a request chooses the same tokens whatever row it occupies and whatever else is in the batch,
and the C kernel and the pure-torch fallback choose the same token for the same stream. Noise is
computed for finite logits only: after top-k the cost is one pass to find the kept tokens.
"""

from __future__ import annotations

import torch

from pyagent_kernels import _extension
from pyagent_kernels._checks import check_tensor
from pyagent_kernels._extension import Backend
from pyagent_kernels._gumbel_torch import gumbel_sample_torch, unselectable_row_error

__all__ = ["gumbel_sample", "to_signed64"]


def to_signed64(value: int) -> int:
    """The int64 whose bits are the unsigned 64-bit ``value`` (for seeds and steps tensors)."""
    value &= (1 << 64) - 1
    return value - (1 << 64) if value >= 1 << 63 else value


def gumbel_sample(
    logits: torch.Tensor, seeds: torch.Tensor, steps: torch.Tensor, *, backend: Backend = "auto"
) -> torch.Tensor:
    """Choose one token per row: ``argmax_j logits[r, j] + g(seeds[r], steps[r], j)``.

    ``g`` is Gumbel(0, 1) noise from the counter-based stream of ``pyagent/gumbel.h`` (scores in
    double precision, the lowest id among equal scores, ``-inf`` logits never chosen).

    Args:
        logits: float32 ``[rows, vocab]`` CPU tensor (not modified).
        seeds, steps: int64 ``[rows]``, read as unsigned 64-bit (see :func:`to_signed64`).
        backend: "auto", "c" or "torch".

    Returns:
        int64 ``[rows]`` token ids.

    Raises:
        KernelArgumentError: bad tensors, or a row holding NaN / +inf or only -inf.
    """
    check_tensor(logits, "logits", dtypes=(torch.float32,), shape=(None, None))
    rows = int(logits.shape[0])
    check_tensor(seeds, "seeds", dtypes=(torch.int64,), shape=(rows,))
    check_tensor(steps, "steps", dtypes=(torch.int64,), shape=(rows,))
    if _extension.resolve(backend, "gumbel_sample") == "torch":
        return gumbel_sample_torch(logits, seeds, steps)
    ffi, lib = _extension.require()
    tokens = torch.empty(rows, dtype=torch.int64)
    err = ffi.new("int64_t *")
    rc = lib.pak_gumbel_sample_f32(
        ffi.cast("float *", logits.data_ptr()), rows, int(logits.shape[1]),
        ffi.cast("uint64_t *", seeds.data_ptr()), ffi.cast("uint64_t *", steps.data_ptr()),
        ffi.cast("int64_t *", tokens.data_ptr()), err,
    )
    if rc == lib.PAK_EVALUE:
        raise unselectable_row_error(int(err[0]))
    _extension.check_status(rc, "gumbel_sample")
    return tokens
