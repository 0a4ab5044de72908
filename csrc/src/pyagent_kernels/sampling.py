"""Fused per-row temperature / top-k / top-p / min-p mask over float32 logits, in place.

The C kernel never sorts the whole vocabulary: per-block maxima bound the k-th largest logit, and
for top-p alone the probability mass above a few levels below the maximum bounds the kept set, so
only the candidates above the bound are sorted (radix sort). The pure-torch fallback sorts each row
and gives bit-identical results.
"""

from __future__ import annotations

import torch

from pyagent_kernels import _extension
from pyagent_kernels._checks import check_tensor, nonfinite_logits_error, param_error
from pyagent_kernels._extension import Backend
from pyagent_kernels._sampling_torch import sampling_mask_torch
from pyagent_kernels.errors import KernelArgumentError

__all__ = ["apply_sampling_mask"]


def apply_sampling_mask(
    logits: torch.Tensor,
    *,
    temperature: torch.Tensor | None = None,
    top_k: torch.Tensor | None = None,
    top_p: torch.Tensor | None = None,
    min_p: torch.Tensor | None = None,
    temperature_last: bool = False,
    backend: Backend = "auto",
    threads: int = 1,
) -> None:
    """Scale logits by temperature and mask (-inf) every token outside the top-k / top-p / min-p set.

    Every parameter is a 1-D CPU tensor with one entry per row, or None to disable that step for
    all rows. Per row, in this order, each step on what the previous ones kept:

    1. ``temperature`` (float32): when ``t > 0`` and ``t != 1`` logits become ``logits / t``;
       ``t <= 0`` (greedy) or ``t == 1`` leaves them unscaled. Must be finite.
    2. ``top_k`` (int32): keep tokens whose logit is >= the k-th largest (all tokens tied with it
       are kept); ``k <= 0`` or ``k >= vocab`` disables it.
    3. ``top_p`` (float32, in [0, 1]): over the softmax of the kept logits, keep tokens in
       descending order down to the first one at which the cumulative probability reaches ``p``,
       plus all tokens tied with it (at least the top token: ``p = 0`` keeps only the top token(s));
       ``p = 1`` disables it.
    4. ``min_p`` (float32, in [0, 1]): keep tokens with ``prob >= min_p * max_prob``, evaluated as
       ``logit - max_logit >= log(min_p)`` in double precision; ``0`` disables it, ``1`` keeps the
       tokens tied with the maximum.

    With ``temperature_last=True`` step 1 moves to the end: top-p and min-p see the unscaled
    logits and the kept ones are divided by ``t`` last (a chain "top_k, top_p, min_p, temperature").

    These match the transformers TopK / TopP / MinP warpers in that order, except that ties at a
    cut-off are always kept whole. Top-p probabilities are ``exp(logit - max)`` computed in float32
    (about 1e-7 relative error, like a float32 softmax) and summed in float64 in a fixed order, so
    the C kernel on every instruction set and the torch fallback agree bit for bit. Rows whose
    logits are all -inf are left unchanged.

    Args:
        logits: float32 ``[num_rows, vocab]``, contiguous, on CPU; -inf marks banned tokens.
        temperature, top_k, top_p, min_p: ``[num_rows]`` tensors as above, or None.
        backend: "auto" (C if built, else torch with a one-time warning), "c" or "torch".
        threads: most threads the C kernel splits the rows among (fewer when there is little
            work: about 2^17 logits per thread at least). The default, 1, runs on the calling
            thread. More pay off for large batches while torch's own workers are idle (e.g. with
            ``OMP_WAIT_POLICY=PASSIVE``); right after a torch op its spinning workers compete for
            the same cores. The torch fallback ignores it.

    Raises:
        KernelArgumentError: wrong type, dtype, shape, layout or device; a parameter or
            ``threads`` out of range (checked before anything is written); a NaN or +inf logit
            (rows before it may have been modified).
        KernelUnavailableError: backend="c" but the extension is not built.
    """
    check_tensor(logits, "logits", dtypes=(torch.float32,), shape=(None, None), writable=True)
    rows, vocab = logits.shape
    for name, value, dtype in (
        ("temperature", temperature, torch.float32),
        ("top_k", top_k, torch.int32),
        ("top_p", top_p, torch.float32),
        ("min_p", min_p, torch.float32),
    ):
        if value is not None:
            check_tensor(value, name, dtypes=(dtype,), shape=(rows,))
    if not isinstance(threads, int) or threads < 1:
        raise KernelArgumentError(f"threads={threads!r} must be a positive int (1: the calling thread only)")
    if _extension.resolve(backend, "apply_sampling_mask") == "torch":
        sampling_mask_torch(logits, temperature, top_k, top_p, min_p, temperature_last)
        return
    ffi, lib = _extension.require()

    def pointer(kind: str, tensor: torch.Tensor | None) -> object:
        """``tensor``'s data as a C pointer of ``kind``, or NULL for None."""
        return ffi.NULL if tensor is None else ffi.cast(kind, tensor.data_ptr())

    err_row = ffi.new("int64_t *")
    rc = lib.pak_sampling_mask_ex_f32(
        pointer("float *", logits),
        rows,
        vocab,
        pointer("float *", temperature),
        pointer("int32_t *", top_k),
        pointer("float *", top_p),
        pointer("float *", min_p),
        lib.PAK_MASK_TEMPERATURE_LAST if temperature_last else 0,
        threads,
        err_row,
    )
    if rc == lib.PAK_EPARAM:
        raise param_error(err_row[0], temperature, top_p, min_p)
    if rc == lib.PAK_EVALUE:
        raise nonfinite_logits_error(err_row[0])
    _extension.check_status(rc, "apply_sampling_mask")
