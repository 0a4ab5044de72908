"""Gumbel-max token selection with a counter-based random stream, reproducible across batches.

Each row's noise is a function of its own ``(seed, step)`` and the token id only (splitmix64),
so a request chooses the same tokens whatever row it occupies and whatever else is in the batch,
and the C kernel and the pure-torch fallback choose the same token for the same stream. Noise is
computed for finite logits only: after top-k the cost is one pass to find the kept tokens, or none
when the mask recorded them (:class:`pyagent_kernels.sampling.KeptTokens`).
"""

from __future__ import annotations

from typing import Any

import torch

from pyagent_kernels import _extension
from pyagent_kernels._checks import check_tensor, unselectable_row_error
from pyagent_kernels._extension import Backend
from pyagent_kernels._fast_checks import check_plain
from pyagent_kernels._gumbel_torch import gumbel_sample_torch
from pyagent_kernels.errors import KernelArgumentError
from pyagent_kernels.sampling import KeptTokens

__all__ = ["GumbelStreams", "gumbel_sample", "to_signed64"]


def to_signed64(value: int) -> int:
    """The int64 whose bits are the unsigned 64-bit ``value`` (for seeds and steps tensors)."""
    value &= (1 << 64) - 1
    return value - (1 << 64) if value >= 1 << 63 else value


class GumbelStreams:
    """The random streams of a batch's rows: a seed and a step count each, checked once.

    :meth:`sample` draws one token per row and moves every row's stream one step on. ``seeds``
    and ``steps`` are int64 ``[rows]`` CPU tensors read as unsigned 64-bit (see
    :func:`to_signed64`); they are used, and ``steps`` advanced, in place.

    Raises:
        KernelArgumentError: tensors of the wrong dtype, shape, layout or device.
    """

    def __init__(self, seeds: torch.Tensor, steps: torch.Tensor) -> None:
        check_tensor(seeds, "seeds", dtypes=(torch.int64,), shape=(None,))
        check_tensor(steps, "steps", dtypes=(torch.int64,), shape=(int(seeds.shape[0]),), writable=True)
        self.seeds, self.steps = seeds, steps
        self.rows = int(seeds.shape[0])
        self._pointers: tuple[Any, Any] | None = None

    def sample(
        self, logits: torch.Tensor, *, kept: KeptTokens | None = None, backend: Backend = "auto"
    ) -> torch.Tensor:
        """One token per row as :func:`gumbel_sample` chooses it, then every step grows by one."""
        check_plain(logits, "logits", torch.float32, (self.rows, None))
        if _extension.resolve(backend, "gumbel_sample") == "torch":
            tokens = gumbel_sample_torch(logits, self.seeds, self.steps)
            self.steps += 1
            return tokens
        ffi, lib = _extension.require()
        if self._pointers is None:
            self._pointers = (
                ffi.cast("uint64_t *", self.seeds.data_ptr()), ffi.cast("uint64_t *", self.steps.data_ptr())
            )
        return _sample_c(ffi, lib, logits, *self._pointers, kept, advance=True)


def _sample_c(ffi: Any, lib: Any, logits: torch.Tensor, seeds: Any, steps: Any, kept: KeptTokens | None,
              *, advance: bool) -> torch.Tensor:
    """The C kernel over validated arguments; kept tokens are used only while they match ``logits``."""
    rows = int(logits.shape[0])
    if kept is not None and kept.matches(logits):
        kept_index, kept_values, kept_count = kept.pointers(ffi)
        capacity = kept.capacity
    else:
        kept_index, kept_values, kept_count, capacity = ffi.NULL, ffi.NULL, ffi.NULL, 0
    tokens = torch.empty(rows, dtype=torch.int64)
    err = ffi.new("int64_t *")
    rc = lib.pak_gumbel_sample_kept_f32(
        ffi.cast("float *", logits.data_ptr()), rows, int(logits.shape[1]), seeds, steps,
        kept_index, kept_values, kept_count, capacity, ffi.cast("int64_t *", tokens.data_ptr()), int(advance), err,
    )
    if rc == 0:
        return tokens
    if rc == lib.PAK_EVALUE:
        raise unselectable_row_error("gumbel_sample", int(err[0]))
    if rc == lib.PAK_EINDEX:
        raise KernelArgumentError(
            f"gumbel_sample: the kept tokens of row {int(err[0])} name a token outside the vocabulary; "
            "pass the KeptTokens that the mask call on these logits filled"
        )
    _extension.check_status(rc, "gumbel_sample")
    return tokens


def gumbel_sample(
    logits: torch.Tensor,
    seeds: torch.Tensor,
    steps: torch.Tensor,
    *,
    kept: KeptTokens | None = None,
    backend: Backend = "auto",
) -> torch.Tensor:
    """Choose one token per row: ``argmax_j logits[r, j] + g(seeds[r], steps[r], j)``.

    ``g`` is Gumbel(0, 1) noise from the counter-based stream of ``pyagent/gumbel.h`` (scores in
    double precision, the lowest id among equal scores, ``-inf`` logits never chosen).

    Args:
        logits: float32 ``[rows, vocab]`` CPU tensor (not modified).
        seeds, steps: int64 ``[rows]``, read as unsigned 64-bit (see :func:`to_signed64`).
        kept: the tokens a mask call recorded for ``logits`` (used while ``kept.matches(logits)``;
            otherwise every row is scanned). The choice is the same either way.
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
    return _sample_c(ffi, lib, logits, ffi.cast("uint64_t *", seeds.data_ptr()),
                     ffi.cast("uint64_t *", steps.data_ptr()), kept, advance=False)
