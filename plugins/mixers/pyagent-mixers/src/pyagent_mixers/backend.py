"""The ``torch`` and ``kernels`` mixer backends: chunked scans for prefills, recurrent steps for the rest.

A sequence with at least ``recurrent_below`` new tokens (a prefill, or a chunk of one) runs the
chunked algorithms of :mod:`pyagent_mixers.chunked`, one sequence at a time; the others (decode
steps, short chunks, verified drafts) run together through :class:`pyagent_kernels.mixers.MixerBatch`,
token by token: its pure-torch fallback for ``torch``, its C kernels for ``kernels``. Which path a
sequence takes depends on its own query length only, so its results do not depend on its batch.
Inputs in bfloat16 are computed in float32 and rounded back; states are float32.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from itertools import accumulate
from typing import Any, ClassVar

import attrs
import torch
import torch.nn.functional as F

import pyagent_kernels
from pyagent_core.interfaces.attention import AttentionMetadata
from pyagent_core.interfaces.mixer import MixerBackend, MixerContext
from pyagent_kernels import Backend
from pyagent_kernels.mixers import MixerBatch
from pyagent_mixers.chunked import gated_delta_chunked, ssd_chunked


@attrs.frozen(eq=False)
class Sequence:
    """One sequence of the batch: its tokens ``lo:hi``, whether it starts from the zero state, its slot."""

    index: int
    lo: int
    hi: int
    fresh: bool
    slot: int


@attrs.frozen(eq=False)
class StepPlan:
    """How a step's batch is split: the sequences scanned in chunks, and the others as one sub-batch.

    Attributes:
        sequences: every sequence, in batch order.
        chunked: the sequences with at least ``recurrent_below`` new tokens.
        tokens: the new tokens of the other sequences, in batch order (``int64``).
        recurrent: their sub-batch for :class:`MixerBatch` (``None`` when there are none).
    """

    sequences: tuple[Sequence, ...]
    chunked: tuple[Sequence, ...]
    tokens: torch.Tensor
    recurrent: MixerBatch | None


def plan_step(metadata: AttentionMetadata, recurrent_below: int) -> StepPlan:
    """Split ``metadata``'s sequences into chunked ones and the recurrent sub-batch."""
    assert metadata.state_slots is not None
    starts, lens = metadata.query_start_loc.tolist(), metadata.seq_lens.tolist()
    slots = metadata.state_slots.tolist()
    sequences = tuple(Sequence(s, starts[s], starts[s + 1], lens[s] == starts[s + 1] - starts[s], slot)
                      for s, slot in enumerate(slots))
    chunked = tuple(seq for seq in sequences if seq.hi - seq.lo >= recurrent_below)
    short = [seq for seq in sequences if seq.hi - seq.lo < recurrent_below]
    tokens = torch.tensor([t for seq in short for t in range(seq.lo, seq.hi)], dtype=torch.int64)
    recurrent = None
    if short:
        counts = [seq.hi - seq.lo for seq in short]
        recurrent = MixerBatch(query_start_loc=torch.tensor([0, *accumulate(counts)], dtype=torch.int32),
                               seq_lens=torch.tensor([lens[seq.index] for seq in short], dtype=torch.int32),
                               state_slots=torch.tensor([seq.slot for seq in short], dtype=torch.int64))
    return StepPlan(sequences, chunked, tokens, recurrent)


class TorchMixer(MixerBackend):
    """Every family in torch: chunked scans for prefills, token-by-token steps (pyagent-kernels' torch
    fallbacks) for decode, per-sequence convolutions, latent attention expanded into every head.

    Options:
        chunk_size: tokens per chunk of the chunked scans.
        recurrent_below: sequences with fewer new tokens run token by token.
    """

    #: How :class:`MixerBatch` runs the recurrent steps.
    kernel_backend: ClassVar[Backend] = "torch"

    def __init__(self, options: Mapping[str, Any], context: MixerContext) -> None:
        super().__init__(options, context)
        self.chunk_size = int(self.options["chunk_size"])
        self.recurrent_below = int(self.options["recurrent_below"])
        self.threads = int(self.options.get("threads", 1))
        self._plan: tuple[AttentionMetadata, StepPlan] | None = None

    def plan(self, metadata: AttentionMetadata) -> StepPlan:
        """The step's split (:func:`plan_step`), made once for all the layers of a step."""
        if self._plan is None or self._plan[0] is not metadata:
            self._plan = metadata, plan_step(metadata, self.recurrent_below)
        return self._plan[1]

    def short_conv(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, state: torch.Tensor,
                   metadata: AttentionMetadata, layer: int, activation: str | None = None) -> torch.Tensor:
        """Each sequence's window and new inputs through ``conv1d``; the latest inputs kept in its slot."""
        self.check_short_conv(x, weight, bias, state, metadata, activation)
        plan = self.plan(metadata)
        keep = weight.shape[1] - 1
        out = torch.empty_like(x)
        kernel, shift = weight.float()[:, None, :], None if bias is None else bias.float()
        for seq in plan.sequences:
            window = torch.zeros_like(state[seq.slot]) if seq.fresh else state[seq.slot]
            inputs = torch.cat((window, x[seq.lo:seq.hi].float().T), dim=1)  # [channels, keep + n]
            conv = F.conv1d(inputs[None], kernel, shift, groups=weight.shape[0])[0].T
            out[seq.lo:seq.hi] = (F.silu(conv) if activation == "silu" else conv).to(x.dtype)
            state[seq.slot] = inputs[:, inputs.shape[1] - keep:]
        return out

    def ssd(self, x: torch.Tensor, dt: torch.Tensor, A: torch.Tensor, B: torch.Tensor, C: torch.Tensor,
            D: torch.Tensor, dt_bias: torch.Tensor, state: torch.Tensor, metadata: AttentionMetadata, layer: int,
            dt_limit: tuple[float, float] = (0.0, math.inf)) -> torch.Tensor:
        """Chunked SSD for long sequences, the one-step update for the others."""
        self.check_ssd(x, dt, A, B, C, D, dt_bias, state, metadata)
        plan = self.plan(metadata)
        repeat = x.shape[1] // B.shape[1]
        y = torch.empty_like(x)
        xf, dtf, Bf, Cf, Df, biasf = (t.float() for t in (x, dt, B, C, D, dt_bias))
        for seq in plan.chunked:
            tokens = slice(seq.lo, seq.hi)
            delta = F.softplus(dtf[tokens] + biasf).clamp(*dt_limit)
            start = torch.zeros_like(state[seq.slot]) if seq.fresh else state[seq.slot]
            out, state[seq.slot] = ssd_chunked(xf[tokens], delta, A, Bf[tokens].repeat_interleave(repeat, dim=1),
                                               Cf[tokens].repeat_interleave(repeat, dim=1), start, self.chunk_size)
            y[tokens] = (out + Df[:, None] * xf[tokens]).to(x.dtype)
        if plan.recurrent is not None:
            idx = plan.tokens
            y[idx] = plan.recurrent.ssd(xf[idx], dtf[idx], A, Bf[idx], Cf[idx], Df, biasf, state,
                                        dt_limit=dt_limit, backend=self.kernel_backend,
                                        threads=self.threads).to(x.dtype)
        return y

    def gated_delta(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
                    state: torch.Tensor, metadata: AttentionMetadata, layer: int, scale: float) -> torch.Tensor:
        """The chunked (WY) delta rule for long sequences, the recurrent one for the others."""
        self.check_gated_delta(q, k, v, g, beta, state, metadata)
        plan = self.plan(metadata)
        repeat = v.shape[1] // q.shape[1]
        o = torch.empty_like(v)
        qf, kf, vf, betaf = (t.float() for t in (q, k, v, beta))
        for seq in plan.chunked:
            tokens = slice(seq.lo, seq.hi)
            start = torch.zeros_like(state[seq.slot]) if seq.fresh else state[seq.slot]
            out, state[seq.slot] = gated_delta_chunked(
                qf[tokens].repeat_interleave(repeat, dim=1), kf[tokens].repeat_interleave(repeat, dim=1), vf[tokens],
                g[tokens], betaf[tokens], start, scale, self.chunk_size)
            o[tokens] = out.to(v.dtype)
        if plan.recurrent is not None:
            idx = plan.tokens
            o[idx] = plan.recurrent.gated_delta(qf[idx], kf[idx], vf[idx], g[idx], betaf[idx], state, scale=scale,
                                                backend=self.kernel_backend, threads=self.threads).to(v.dtype)
        return o

    def mla(self, q_nope: torch.Tensor, q_pe: torch.Tensor, latent: torch.Tensor, k_pe: torch.Tensor,
            w_uk: torch.Tensor, w_uv: torch.Tensor, cache: torch.Tensor, metadata: AttentionMetadata, layer: int,
            scale: float) -> torch.Tensor:
        """Writes the new latent rows; each sequence's cached latents expanded into every head's keys and
        values, then causal attention (float32 scores and softmax)."""
        self.check_mla(q_nope, q_pe, latent, k_pe, w_uk, w_uv, cache, metadata)
        size, block_size = latent.shape[1], cache.shape[1]
        rows = cache.view(-1, cache.shape[2])
        rows[metadata.slot_mapping] = torch.cat((latent, k_pe), dim=1)
        starts, lens = metadata.query_start_loc.tolist(), metadata.seq_lens.tolist()
        out = q_nope.new_empty((q_nope.shape[0], q_nope.shape[1], w_uv.shape[1]))
        for s, length in enumerate(lens):
            lo, hi = starts[s], starts[s + 1]
            positions = torch.arange(length)
            cached = rows[metadata.block_tables[s].long()[positions // block_size] * block_size
                          + positions % block_size].float()
            keys = torch.einsum("hnl,jl->hjn", w_uk.float(), cached[:, :size])
            values = torch.einsum("hvl,jl->hjv", w_uv.float(), cached[:, :size])
            scores = (torch.einsum("thn,hjn->htj", q_nope[lo:hi].float(), keys)
                      + torch.einsum("thr,jr->htj", q_pe[lo:hi].float(), cached[:, size:])) * scale
            visible = positions[None, :] <= torch.arange(length - (hi - lo), length)[:, None]
            weights = scores.masked_fill(~visible, float("-inf")).softmax(dim=-1)
            out[lo:hi] = torch.einsum("htj,hjv->thv", weights, values).to(out.dtype)
        return out


class KernelMixer(TorchMixer):
    """The ``torch`` backend with pyagent-kernels' C kernels for the convolution, the recurrent steps
    and latent attention (absorbed; float32 caches, bfloat16 ones go the ``torch`` way). Its default
    ``recurrent_below`` (65536) sends every step but a very long prefill to the C recurrence, which
    beat the chunked torch scans 2-3x on prefills of 64 to 4096 tokens here (``csrc/README.md``).

    Options:
        chunk_size, recurrent_below: as ``torch``.
        threads: most threads one kernel call uses (the caller and pyagent-kernels' helpers).
    """

    kernel_backend: ClassVar[Backend] = "c"

    @classmethod
    def check_available(cls) -> str | None:
        """A reason when pyagent-kernels' C extension is not built."""
        status = pyagent_kernels.status()
        if status["compiled"]:
            return None
        return (f"pyagent-kernels' C extension is not built ({status['reason']}); install a C compiler and "
                "reinstall pyagent-kernels, or select the `torch` mixer backend")

    def _whole(self, metadata: AttentionMetadata) -> MixerBatch:
        """The whole step as one :class:`MixerBatch`, made once per step."""
        cached = getattr(self, "_whole_batch", None)
        if cached is None or cached[0] is not metadata:
            cached = self._whole_batch = metadata, MixerBatch(
                query_start_loc=metadata.query_start_loc.contiguous(), seq_lens=metadata.seq_lens.contiguous(),
                state_slots=None if metadata.state_slots is None else metadata.state_slots.contiguous(),
                block_tables=metadata.block_tables.contiguous(), slot_mapping=metadata.slot_mapping.contiguous())
        batch: MixerBatch = cached[1]
        return batch

    def short_conv(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, state: torch.Tensor,
                   metadata: AttentionMetadata, layer: int, activation: str | None = None) -> torch.Tensor:
        """One C call for the whole batch."""
        self.check_short_conv(x, weight, bias, state, metadata, activation)
        out = self._whole(metadata).short_conv(x.float().contiguous(), weight.float().contiguous(),
                                               None if bias is None else bias.float().contiguous(), state,
                                               activation=activation, backend="c", threads=self.threads)
        return out.to(x.dtype)

    def mla(self, q_nope: torch.Tensor, q_pe: torch.Tensor, latent: torch.Tensor, k_pe: torch.Tensor,
            w_uk: torch.Tensor, w_uv: torch.Tensor, cache: torch.Tensor, metadata: AttentionMetadata, layer: int,
            scale: float) -> torch.Tensor:
        """One C call (absorbed weights) for a float32 cache; the ``torch`` way for another dtype."""
        if cache.dtype != torch.float32:
            return super().mla(q_nope, q_pe, latent, k_pe, w_uk, w_uv, cache, metadata, layer, scale)
        self.check_mla(q_nope, q_pe, latent, k_pe, w_uk, w_uv, cache, metadata)
        return self._whole(metadata).mla(*(t.contiguous() for t in (q_nope, q_pe, latent, k_pe, w_uk, w_uv)), cache,
                                         scale=scale, backend="c", threads=self.threads)
