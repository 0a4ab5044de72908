"""Pure-torch fallback of :func:`pyagent_kernels.linear.linear`: batch-invariant, other bits than C.

torch's CPU matrix products give a row different bits depending on how many rows share the product
and where the row sits, but a product of exactly :data:`ROW_TILE` rows gives each row the same bits
whatever its neighbours; so every row goes through such a product (the last one zero-padded), a
single row too (``torch.mv`` on a bfloat16 row can round differently from the same row in a tile).
The results are batch-invariant like the C kernel's, but not bit-identical to them: the summation
order differs.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

#: Rows per matrix product.
ROW_TILE = 32


def linear_torch(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """``x @ weight.T`` for ``x [rows, in]`` and ``weight [out, in]``, in tiles of :data:`ROW_TILE` rows."""
    rows = x.shape[0]
    padding = -rows % ROW_TILE
    if padding:
        x = torch.cat((x, x.new_zeros(padding, x.shape[1])))
    return torch.cat([F.linear(tile, weight) for tile in x.split(ROW_TILE)])[:rows]
