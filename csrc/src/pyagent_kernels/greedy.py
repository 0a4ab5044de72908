"""Greedy token selection: each row's argmax, the lowest token id among equal maxima
(``include/pyagent/greedy.h``).

One pass for the row's largest value and one to find its first occurrence, in C; the pure-torch
fallback asks ``torch.max`` (which answers the first maximal index too). Comparisons only, so the C
variants and the fallback choose the same tokens. A batch-1 greedy decode step spends a few
microseconds here instead of the tens that ``torch.max`` with indices and the finiteness checks take.
"""

from __future__ import annotations

import torch

from pyagent_kernels import _extension
from pyagent_kernels._checks import check_selectable_rows, unselectable_row_error
from pyagent_kernels._extension import Backend
from pyagent_kernels._fast_checks import check_plain

__all__ = ["greedy_select"]


def _greedy_torch(logits: torch.Tensor) -> torch.Tensor:
    check_selectable_rows("greedy_select", logits)
    return logits.max(dim=1).indices


def greedy_select(logits: torch.Tensor, *, backend: Backend = "auto") -> torch.Tensor:
    """The lowest token id holding each row's largest logit.

    Args:
        logits: float32 ``[rows, vocab]`` contiguous CPU tensor (not modified).
        backend: "auto", "c" or "torch".

    Returns:
        int64 ``[rows]`` token ids.

    Raises:
        KernelArgumentError: a tensor of the wrong type, dtype, shape or layout, or a row holding NaN
            or +inf, or only -inf (nothing to choose).
    """
    check_plain(logits, "logits", torch.float32, (None, None))
    if _extension.resolve(backend, "greedy_select") == "torch":
        return _greedy_torch(logits)
    ffi, lib = _extension.require()
    rows, vocab = logits.shape
    tokens = torch.empty(rows, dtype=torch.int64)
    err = ffi.new("int64_t *")
    rc = lib.pak_greedy_f32(ffi.cast("float *", logits.data_ptr()), rows, vocab,
                            ffi.cast("int64_t *", tokens.data_ptr()), err)
    if rc == lib.PAK_EVALUE or (rc == lib.PAK_EINVAL and rows and vocab == 0):
        raise unselectable_row_error("greedy_select", max(int(err[0]), 0))
    _extension.check_status(rc, "greedy_select")
    return tokens
