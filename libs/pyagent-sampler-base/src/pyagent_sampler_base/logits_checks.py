"""Input checks shared by every sampler: the logits' shape and type, and that a token can be chosen."""

from __future__ import annotations

import torch


def check_logits(logits: torch.Tensor, vocab_size: int, owner: str, num_rows: int | None = None) -> None:
    """Raise ``ValueError`` unless ``logits`` is a floating ``[num_rows, vocab_size]`` tensor.

    Args:
        logits: the batch's logits.
        vocab_size: the vocabulary size the sampler was built for.
        owner: the sampler's name, for the message.
        num_rows: the number of requests the sampler's batch bookkeeping holds (``None``: any).
    """
    if not isinstance(logits, torch.Tensor):
        raise TypeError(f"{owner}: logits must be a torch.Tensor, got {type(logits).__name__}")
    if logits.ndim != 2:
        raise ValueError(
            f"{owner}: logits must be 2-D [num_requests, vocab_size={vocab_size}], "
            f"got shape {tuple(logits.shape)}"
        )
    if logits.shape[1] != vocab_size:
        raise ValueError(
            f"{owner}: logits have vocab size {logits.shape[1]} but the sampler was built for "
            f"vocab_size={vocab_size}; build it with the model's vocabulary size"
        )
    if not logits.is_floating_point():
        raise ValueError(f"{owner}: logits must be a floating-point tensor, got {logits.dtype}")
    if num_rows is not None and logits.shape[0] != num_rows:
        raise ValueError(
            f"{owner}: logits have {logits.shape[0]} rows but the batch holds {num_rows} requests; "
            "pass every BatchUpdate to update_state before sampling"
        )


def check_selectable(row_max: torch.Tensor, owner: str) -> None:
    """Raise ``ValueError`` for rows whose maximum logit is not finite (nothing can be chosen).

    A row's maximum is ``-inf`` when every token is masked, and ``nan``/``+inf`` when the logits hold
    such values; ``row_max`` is the ``[num_requests]`` maximum of each row.
    """
    bad = ~torch.isfinite(row_max)
    if bool(bad.any()):
        rows = bad.nonzero().flatten().tolist()
        raise ValueError(
            f"{owner}: cannot choose a token in rows {rows[:8]}: their maximum logit is "
            f"{row_max[rows[0]].item()} (every token masked, or nan/+inf logits); "
            "check the processors before the selector"
        )
