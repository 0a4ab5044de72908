"""Pure-torch fallback of the fused sampling mask, bit-identical to the C kernel.

It follows kernels/sampling/mask_impl.h step by step: the same IEEE float division for the
temperature, the same thresholds, exp computed in float32 by :func:`exp_nonpos` with exactly the
operations of ``pak_expf_nonpos16`` (kernels/sampling/vecmath.h), and every sum taken in float64 in
the C kernel's order (sequentially over sorted values, or :func:`lane_sum`'s 16-lane layout).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from pyagent_kernels._checks import first_bad_param_row, nonfinite_logits_error, param_error

_NEG_INF = float("-inf")
# The constants of vecmath.h; each is a float32 value, so torch's float32 arithmetic uses it exactly.
_EXP_MIN = -87.0
_LOG2E = float.fromhex("0x1.715476p+0")
_SHIFTER = float.fromhex("0x1.8p+23")
_SHIFTER_BITS = 0x4B400000
_LN2_HI = float.fromhex("0x1.62e4p-1")
_LN2_LO = float.fromhex("0x1.7f7d1cp-20")
# 1/7!, 1/6!, ..., 1/3! rounded to float32 as in vecmath.h, then 1/2!, 1/1!, 1/0!.
_TAYLOR = (
    *(float.fromhex(h) for h in ("0x1.a01a02p-13", "0x1.6c16c2p-10", "0x1.111112p-7", "0x1.555556p-5")),
    float.fromhex("0x1.555556p-3"),
    0.5,
    1.0,
    1.0,
)
_LANES = 16


def exp_nonpos(x: torch.Tensor) -> torch.Tensor:
    """exp of a float32 tensor of values <= 0, rounding exactly like the C kernel's pak_expf_nonpos16."""
    ok = x >= _EXP_MIN
    xc = torch.where(ok, x, _EXP_MIN)
    t = xc * _LOG2E + _SHIFTER
    n = t - _SHIFTER
    r = (xc - n * _LN2_HI) - n * _LN2_LO
    q = (r * _TAYLOR[0]).add_(_TAYLOR[1])
    for coefficient in _TAYLOR[2:]:
        q.mul_(r).add_(coefficient)
    scale = ((t.view(torch.int32) - _SHIFTER_BITS + 127) << 23).view(torch.float32)
    return torch.where(ok, q * scale, 0.0)


def lane_sum(w: torch.Tensor) -> torch.Tensor:
    """Row sums of ``w`` in float64, in the C kernel's order: 16 lanes over consecutive chunks of 16
    (the last chunk padded with zeros), then lanes 0..15 in order."""
    rows, n = w.shape
    chunks = F.pad(w.double(), (0, -n % _LANES)).view(rows, -1, _LANES)
    return chunks.cumsum(dim=1)[:, -1].cumsum(dim=1)[:, -1]


def _first_crossing(values: torch.Tensor, cum: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Per row, the value at the first column where the running sum ``cum`` reaches ``target``
    (``values`` sorted descending), or -inf where it never does."""
    reached = cum >= target.unsqueeze(1)
    first = reached.to(torch.int8).argmax(dim=1, keepdim=True)
    level = values.gather(1, first).squeeze(1)
    return torch.where(reached.any(dim=1), level, _NEG_INF)


def _top_k_top_p(srt: torch.Tensor, m: torch.Tensor, k: torch.Tensor, p: torch.Tensor | None) -> torch.Tensor:
    """Threshold of rows with 0 < k < vocab: top-k, then top-p over the tokens top-k kept."""
    theta_k = srt.gather(1, (k.long() - 1).unsqueeze(1)).squeeze(1)
    if p is None or not bool((p < 1).any()):
        return theta_k
    in_k = srt >= theta_k.unsqueeze(1)
    cols = int(in_k.sum(dim=1).max())
    values = srt[:, :cols]
    w = torch.where(in_k[:, :cols], exp_nonpos(values - m.unsqueeze(1)).double(), 0.0)
    cum = w.cumsum(dim=1)
    theta_p = _first_crossing(values, cum, p.double() * cum[:, -1])
    return torch.where(p < 1, torch.maximum(theta_k, theta_p), theta_k)


def _top_p(chosen: torch.Tensor, m: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """Threshold of rows with top-p only (p < 1); the total mass is summed over the whole row."""
    w = exp_nonpos(chosen - m.unsqueeze(1))
    srt, order = chosen.sort(dim=1, descending=True)
    return _first_crossing(srt, w.gather(1, order).double().cumsum(dim=1), p.double() * lane_sum(w))


def _thresholds(
    logits: torch.Tensor, m: torch.Tensor, top_k: torch.Tensor | None, top_p: torch.Tensor | None
) -> torch.Tensor:
    """Per-row value threshold of temperature-scaled logits after top-k and top-p (-inf: keep all)."""
    rows, vocab = logits.shape
    theta = torch.full((rows,), _NEG_INF)
    live = m > _NEG_INF
    use_k = torch.zeros(rows, dtype=torch.bool)
    if top_k is not None:
        use_k = (top_k > 0) & (top_k < vocab) & live
        sel = use_k.nonzero().squeeze(1)
        if len(sel):
            srt = logits.index_select(0, sel).sort(dim=1, descending=True).values
            p = top_p.index_select(0, sel) if top_p is not None else None
            theta[sel] = _top_k_top_p(srt, m[sel], top_k.index_select(0, sel), p)
    if top_p is not None:
        sel = ((top_p < 1) & live & ~use_k).nonzero().squeeze(1)
        if len(sel):
            theta[sel] = _top_p(logits.index_select(0, sel), m[sel], top_p.index_select(0, sel))
    return theta


def sampling_mask_torch(
    logits: torch.Tensor,
    temperature: torch.Tensor | None,
    top_k: torch.Tensor | None,
    top_p: torch.Tensor | None,
    min_p: torch.Tensor | None,
    temperature_last: bool = False,
    kept: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None,
) -> None:
    """The fused temperature / top-k / top-p / min-p mask, in place (arguments already validated;
    semantics in pyagent_kernels.sampling.apply_sampling_mask). ``kept``: the ``(index, values,
    count)`` buffers of a ``KeptTokens``, filled for every row."""
    bad_row = first_bad_param_row(temperature, top_p, min_p)
    if bad_row is not None:
        raise param_error(bad_row, temperature, top_p, min_p)
    if logits.numel() == 0:
        if kept is not None:
            kept[2][: logits.shape[0]] = 0
        return
    if temperature is not None and not temperature_last:
        _scale(logits, temperature)
    _check_finite(logits)
    m = logits.amax(dim=1)
    keep = logits >= _thresholds(logits, m, top_k, top_p).unsqueeze(1)
    if min_p is not None:
        # math.log is the C library's log, as in the C kernel
        logs = [math.log(q) if q > 0 else -math.inf for q in min_p.tolist()]
        log_min_p = torch.tensor(logs, dtype=torch.float64)
        keep &= (logits.double() - m.double().unsqueeze(1)) >= log_min_p.unsqueeze(1)
    logits.masked_fill_(~keep, _NEG_INF)
    if temperature is not None and temperature_last:
        _scale(logits, temperature)
        _check_finite(logits)
    if kept is not None:
        record_kept(logits, *kept)


def record_kept(logits: torch.Tensor, index: torch.Tensor, values: torch.Tensor, count: torch.Tensor) -> None:
    """Per row, the ids of the logits that are not -inf into ``index[r, :c]`` (increasing), those
    logits into ``values[r, :c]`` and ``c`` into ``count[r]``; -1 for rows holding more than
    ``index.shape[1]``."""
    finite = logits > _NEG_INF
    counts = finite.sum(dim=1)
    rows, cols = finite.nonzero(as_tuple=True)
    position = torch.arange(len(rows)) - (counts.cumsum(0) - counts)[rows]
    fits = counts[rows] <= index.shape[1]
    index[rows[fits], position[fits]] = cols[fits].to(torch.int32)
    values[rows[fits], position[fits]] = logits[rows[fits], cols[fits]]
    count[: logits.shape[0]] = torch.where(counts <= index.shape[1], counts, -1).to(torch.int32)


def _scale(logits: torch.Tensor, temperature: torch.Tensor) -> None:
    """Divide the rows with a temperature ``t > 0, t != 1`` by it, in place."""
    scaled = (temperature > 0) & (temperature != 1)
    logits.div_(torch.where(scaled, temperature, 1.0).unsqueeze(1))


def _check_finite(logits: torch.Tensor) -> None:
    """Raise for the first row holding NaN or +inf."""
    bad = ~(logits < math.inf).all(dim=1)
    if bool(bad.any()):
        raise nonfinite_logits_error(int(bad.nonzero()[0, 0]))
