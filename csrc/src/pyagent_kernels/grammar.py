"""Token-bitmask kernel for structured output: disallowed tokens' logits become -inf, in place.

The bitmask is the one grammar backends fill (``Grammar.matcher().fill_bitmask``): int32
``[num_rows, ceil(vocab / 32)]``, bit ``j % 32`` of word ``j // 32`` set means token ``j`` is allowed.
"""

from __future__ import annotations

import torch

from pyagent_kernels import _extension
from pyagent_kernels._checks import check_tensor, index_error
from pyagent_kernels._extension import Backend
from pyagent_kernels._grammar_torch import apply_token_bitmask_torch

__all__ = ["apply_token_bitmask"]

_NEG_INF_BITS_16 = {torch.bfloat16: 0xFF80, torch.float16: 0xFC00}
_LOGIT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def apply_token_bitmask(
    logits: torch.Tensor,
    bitmask: torch.Tensor,
    indices: torch.Tensor | None = None,
    *,
    backend: Backend = "auto",
) -> None:
    """Set the logits of tokens the bitmask disallows to -inf, in place.

    Args:
        logits: float32, bfloat16 or float16 ``[num_rows, vocab]``, contiguous, on CPU.
        bitmask: int32 ``[num_rows, ceil(vocab / 32)]``, contiguous, on CPU; bits past ``vocab``
            in the last word are ignored.
        indices: optional int32 / int64 1-D tensor of rows to mask (row ``r`` of logits with row
            ``r`` of bitmask); other rows are left untouched. Each must lie in ``[0, num_rows)``.
        backend: "auto" (C if built, else torch with a one-time warning), "c" or "torch".

    Raises:
        KernelArgumentError: a tensor has the wrong type, dtype, shape, layout or device, or an
            index is out of range (checked before anything is written).
        KernelUnavailableError: backend="c" but the extension is not built.
    """
    check_tensor(logits, "logits", dtypes=_LOGIT_DTYPES, shape=(None, None), writable=True)
    rows, vocab = logits.shape
    check_tensor(bitmask, "bitmask", dtypes=(torch.int32,), shape=(rows, (vocab + 31) // 32))
    if indices is not None:
        check_tensor(indices, "indices", dtypes=(torch.int32, torch.int64), shape=(None,))
    if _extension.resolve(backend, "apply_token_bitmask") == "torch":
        apply_token_bitmask_torch(logits, bitmask, indices)
        return
    if indices is not None and len(indices) == 0:
        return  # an empty tensor may have a NULL data pointer, which the C kernel reads as "all rows"
    ffi, lib = _extension.require()
    err = ffi.new("int64_t *")
    index_ptr = ffi.NULL if indices is None else ffi.cast("void *", indices.data_ptr())
    num_indices = 0 if indices is None else len(indices)
    index_bytes = 8 if indices is None else indices.itemsize
    words = ffi.cast("int32_t *", bitmask.data_ptr())
    if logits.dtype == torch.float32:
        rc = lib.pak_token_bitmask_f32(
            ffi.cast("float *", logits.data_ptr()),
            words,
            rows,
            vocab,
            index_ptr,
            num_indices,
            index_bytes,
            err,
        )
    else:
        rc = lib.pak_token_bitmask_16(
            ffi.cast("uint16_t *", logits.data_ptr()),
            words,
            rows,
            vocab,
            index_ptr,
            num_indices,
            index_bytes,
            _NEG_INF_BITS_16[logits.dtype],
            err,
        )
    if rc == lib.PAK_EINDEX and indices is not None:
        raise index_error(indices, err[0], rows)
    _extension.check_status(rc, "apply_token_bitmask")
