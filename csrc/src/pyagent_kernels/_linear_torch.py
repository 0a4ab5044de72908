"""Pure-torch fallback of :func:`pyagent_kernels.linear.linear`: batch-invariant, other bits than C.

How torch's CPU matrix products round a row depends on the machine: how many rows share the product
and where a row sits in it changed a row's bits on an AVX2-only Zen 1 host even inside a fixed
32-row tile, which kept them on AVX-512 hosts. So every row goes through its own product, a
``[1, in]`` by ``weight.T`` call whose inputs and shapes are the row's alone: the same call whether
the row comes alone or in a batch, whatever torch does inside it. The results are batch-invariant
like the C kernel's, but not bit-identical to them (the summation order differs), and slower than
one batched product: this path runs only when the compiled extension is missing.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def linear_torch(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """``x @ weight.T`` for ``x [rows, in]`` and ``weight [out, in]``, one row per product."""
    out = x.new_empty((x.shape[0], weight.shape[0]))
    for row in range(x.shape[0]):
        out[row : row + 1] = F.linear(x[row : row + 1], weight)
    return out
