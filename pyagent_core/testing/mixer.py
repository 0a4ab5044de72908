"""Conformance kit for mixer backends: random batches against a brute-force reference, family by family.

:class:`ReferenceMixer` is the oracle: every family computed token after token in float64 straight
from the recurrences of :mod:`pyagent_core.interfaces.mixer` (and latent attention by expanding each
cached latent into every head's key and value, the form the absorbed one must equal). The model kit
uses it as the mixer of hybrid models too.

:class:`MixerConformance` runs, for each family the spec declares and each dtype it computes in:
decode steps of continuing sequences, prefills from an empty context whose lengths sit on and around
the chunk sizes a chunked algorithm picks (1, 15, 16, 17, 63, 64, 65, 129), prefills that continue
a cached context (chunked prefill), mixed batches, one long sequence fed in uneven pieces (each
piece must carry the state the previous one left), a sequence alone and inside a batch (the same
bits), and bad inputs. Every check compares the outputs and every slot of the state (or every row of
the latent cache) after the call: the slots of the batch against the reference, the others against
what they held. Fresh sequences get slots full of garbage, which a backend must not read.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from typing import Any, ClassVar

import attrs
import pytest
import torch
import torch.nn.functional as F

from pyagent_core.interfaces.attention import AttentionMetadata
from pyagent_core.interfaces.mixer import MixerBackend, MixerContext
from pyagent_core.testing.base import BackendConformance
from pyagent_core.testing.support import expect_raises
from pyagent_core.types import MixerSpec

TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float32: (2e-4, 1e-3),
    torch.bfloat16: (1e-1, 5e-2),
}
"""(atol, rtol) per dtype for outputs compared with the float64 reference; states (float32) use the
float32 pair."""

#: Prompt lengths on and around the chunk sizes chunked scans use (16, 64), and past two chunks.
PREFILL_LENGTHS = (1, 15, 16, 17, 63, 64, 65, 129)


def _fresh(metadata: AttentionMetadata, s: int) -> bool:
    starts = metadata.query_start_loc
    return int(metadata.seq_lens[s]) == int(starts[s + 1] - starts[s])


def _sequences(metadata: AttentionMetadata) -> Iterator[tuple[int, int, int, bool]]:
    """``(s, lo, hi, fresh)`` for every sequence of the batch."""
    starts = metadata.query_start_loc.tolist()
    for s in range(metadata.num_seqs):
        yield s, starts[s], starts[s + 1], _fresh(metadata, s)


def _slots(metadata: AttentionMetadata) -> list[int]:
    assert metadata.state_slots is not None
    return [int(slot) for slot in metadata.state_slots.tolist()]


# --- the brute-force references ---------------------------------------------------------------------


def reference_short_conv(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, state: torch.Tensor,
                         metadata: AttentionMetadata, activation: str | None) -> torch.Tensor:
    """``short_conv`` in float64, token by token; updates ``state`` at the batch's slots."""
    out = torch.empty(x.shape, dtype=torch.float64)
    w = weight.double()
    for (_, lo, hi, fresh), slot in zip(_sequences(metadata), _slots(metadata), strict=True):
        window = torch.zeros_like(state[slot], dtype=torch.float64) if fresh else state[slot].double()
        for t in range(lo, hi):  # the window holds the width - 1 latest inputs, oldest first
            inputs = torch.cat((window, x[t].double()[:, None]), dim=1)  # [channels, width], oldest first
            value = (w * inputs).sum(dim=1) + (0 if bias is None else bias.double())
            out[t] = value * torch.sigmoid(value) if activation == "silu" else value
            window = inputs[:, 1:]
        state[slot] = window.float()
    return out.to(x.dtype)


def reference_ssd(x: torch.Tensor, dt: torch.Tensor, A: torch.Tensor, B: torch.Tensor, C: torch.Tensor,
                  D: torch.Tensor, dt_bias: torch.Tensor, state: torch.Tensor, metadata: AttentionMetadata,
                  dt_limit: tuple[float, float]) -> torch.Tensor:
    """``ssd`` in float64, token by token (heads side by side); updates ``state`` at the batch's slots."""
    repeat = x.shape[1] // B.shape[1]
    y = torch.empty(x.shape, dtype=torch.float64)
    for (_, lo, hi, fresh), slot in zip(_sequences(metadata), _slots(metadata), strict=True):
        S = torch.zeros_like(state[slot], dtype=torch.float64) if fresh else state[slot].double()  # [H, P, N]
        for t in range(lo, hi):
            delta = F.softplus(dt[t].double() + dt_bias.double()).clamp(*dt_limit)  # [H]
            Bt, Ct = (v[t].double().repeat_interleave(repeat, dim=0) for v in (B, C))  # [H, N]
            S = torch.exp(delta * A.double())[:, None, None] * S \
                + delta[:, None, None] * x[t].double()[:, :, None] * Bt[:, None, :]
            y[t] = torch.einsum("hpn,hn->hp", S, Ct) + D.double()[:, None] * x[t].double()
        state[slot] = S.float()
    return y.to(x.dtype)


def reference_gated_delta(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
                          state: torch.Tensor, metadata: AttentionMetadata, scale: float) -> torch.Tensor:
    """``gated_delta`` in float64, token by token (heads side by side); updates ``state`` at the batch's slots."""
    repeat = v.shape[1] // q.shape[1]
    o = torch.empty(v.shape, dtype=torch.float64)
    for (_, lo, hi, fresh), slot in zip(_sequences(metadata), _slots(metadata), strict=True):
        S = torch.zeros_like(state[slot], dtype=torch.float64) if fresh else state[slot].double()  # [Hv, K, V]
        for t in range(lo, hi):
            qt, kt = (a[t].double().repeat_interleave(repeat, dim=0) for a in (q, k))  # [Hv, K]
            S = torch.exp(g[t].double())[:, None, None] * S
            written = beta[t].double()[:, None] * (v[t].double() - torch.einsum("hkv,hk->hv", S, kt))
            S = S + kt[:, :, None] * written[:, None, :]
            o[t] = scale * torch.einsum("hkv,hk->hv", S, qt)
        state[slot] = S.float()
    return o.to(v.dtype)


def reference_mla(q_nope: torch.Tensor, q_pe: torch.Tensor, latent: torch.Tensor, k_pe: torch.Tensor,
                  w_uk: torch.Tensor, w_uv: torch.Tensor, cache: torch.Tensor, metadata: AttentionMetadata,
                  scale: float) -> torch.Tensor:
    """``mla`` in float64 without absorption: writes the new rows, expands every cached latent into each
    head's key and value, and attends causally."""
    size = latent.shape[1]
    block_size = cache.shape[1]
    rows = cache.view(-1, cache.shape[2])
    rows[metadata.slot_mapping] = torch.cat((latent, k_pe), dim=1)
    out = torch.empty((*q_nope.shape[:2], w_uv.shape[1]), dtype=torch.float64)
    for s, lo, hi, _ in _sequences(metadata):
        length = int(metadata.seq_lens[s])
        positions = torch.arange(length)
        cached = rows[metadata.block_tables[s].long()[positions // block_size] * block_size
                      + positions % block_size].double()
        keys_nope = torch.einsum("hnl,jl->hjn", w_uk.double(), cached[:, :size])  # [heads, positions, nope]
        values = torch.einsum("hvl,jl->hjv", w_uv.double(), cached[:, :size])
        for t in range(lo, hi):
            position = length - (hi - t)
            scores = (torch.einsum("hn,hjn->hj", q_nope[t].double(), keys_nope)
                      + q_pe[t].double() @ cached[:, size:].T) * scale
            weights = scores[:, : position + 1].softmax(dim=-1)
            out[t] = torch.einsum("hj,hjv->hv", weights, values[:, : position + 1])
    return out.to(q_nope.dtype)


class ReferenceMixer(MixerBackend):
    """Every family by its brute-force reference (float64, token by token): the kit's oracle, and the
    mixer the model kit runs hybrid models with."""

    def short_conv(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, state: torch.Tensor,
                   metadata: AttentionMetadata, layer: int, activation: str | None = None) -> torch.Tensor:
        """:func:`reference_short_conv` after the standard checks."""
        self.check_short_conv(x, weight, bias, state, metadata, activation)
        return reference_short_conv(x, weight, bias, state, metadata, activation)

    def ssd(self, x: torch.Tensor, dt: torch.Tensor, A: torch.Tensor, B: torch.Tensor, C: torch.Tensor,
            D: torch.Tensor, dt_bias: torch.Tensor, state: torch.Tensor, metadata: AttentionMetadata, layer: int,
            dt_limit: tuple[float, float] = (0.0, math.inf)) -> torch.Tensor:
        """:func:`reference_ssd` after the standard checks."""
        self.check_ssd(x, dt, A, B, C, D, dt_bias, state, metadata)
        return reference_ssd(x, dt, A, B, C, D, dt_bias, state, metadata, dt_limit)

    def gated_delta(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
                    state: torch.Tensor, metadata: AttentionMetadata, layer: int, scale: float) -> torch.Tensor:
        """:func:`reference_gated_delta` after the standard checks."""
        self.check_gated_delta(q, k, v, g, beta, state, metadata)
        return reference_gated_delta(q, k, v, g, beta, state, metadata, scale)

    def mla(self, q_nope: torch.Tensor, q_pe: torch.Tensor, latent: torch.Tensor, k_pe: torch.Tensor,
            w_uk: torch.Tensor, w_uv: torch.Tensor, cache: torch.Tensor, metadata: AttentionMetadata, layer: int,
            scale: float) -> torch.Tensor:
        """:func:`reference_mla` after the standard checks."""
        self.check_mla(q_nope, q_pe, latent, k_pe, w_uk, w_uv, cache, metadata)
        return reference_mla(q_nope, q_pe, latent, k_pe, w_uk, w_uv, cache, metadata, scale)


# --- batches ------------------------------------------------------------------------------------------


@attrs.frozen
class Shape:
    """A batch shape: cached tokens and new tokens of each sequence."""

    context_lens: tuple[int, ...]
    query_lens: tuple[int, ...]


BLOCK_SIZE = 4
"""Tokens per block of the kit's latent caches (small: sequences span many blocks)."""


def batch_metadata(shape: Shape, generator: torch.Generator, num_slots: int | None = None) -> AttentionMetadata:
    """Metadata for ``shape``: scattered blocks (:data:`BLOCK_SIZE`) and scattered state slots out of
    ``num_slots`` (default: twice the sequences, plus one)."""
    seq_lens = [c + q for c, q in zip(shape.context_lens, shape.query_lens, strict=True)]
    needed = [max(1, -(-n // BLOCK_SIZE)) for n in seq_lens]
    order = torch.randperm(sum(needed) + 2, generator=generator).tolist()
    tables, slots, start = [], [], 0
    for need, ctx, n in zip(needed, shape.context_lens, seq_lens, strict=True):
        own = order[start:start + need]
        start += need
        tables.append(own + [own[0]] * (max(needed) - need))
        slots += [own[p // BLOCK_SIZE] * BLOCK_SIZE + p % BLOCK_SIZE for p in range(ctx, n)]
    num_slots = num_slots or 2 * len(seq_lens) + 1
    return AttentionMetadata(
        block_tables=torch.tensor(tables, dtype=torch.int32),
        slot_mapping=torch.tensor(slots, dtype=torch.int64),
        seq_lens=torch.tensor(seq_lens, dtype=torch.int32),
        query_start_loc=torch.tensor([0, *itertools.accumulate(shape.query_lens)], dtype=torch.int32),
        max_query_len=max(shape.query_lens),
        max_seq_len=max(seq_lens),
        state_slots=torch.randperm(num_slots, generator=generator)[: len(seq_lens)],
    )


#: A family's call: ``(arguments before metadata and layer, keyword arguments, index of the cache
#: argument)``; the cache (a state or the latent cache) is changed in place.
Call = tuple[tuple[Any, ...], dict[str, Any], int]


def family_inputs(family: str, metadata: AttentionMetadata, dtype: torch.dtype, generator: torch.Generator,
                  num_blocks: int | None = None) -> Call:
    """Random inputs of ``family`` for a batch laid out by ``metadata`` (the cache holds random values)."""
    tokens = metadata.num_tokens
    slots = 2 * metadata.num_seqs + 1 if metadata.state_slots is None else int(metadata.state_slots.max()) + 1

    def randn(*size: int, scale: float = 1.0) -> torch.Tensor:
        return (scale * torch.randn(*size, generator=generator)).to(dtype)

    def state(*size: int) -> torch.Tensor:
        return torch.randn(slots, *size, generator=generator)

    if family == "short_conv":
        return (randn(tokens, 24), randn(24, 4, scale=0.5), randn(24, scale=0.1), state(24, 3)), \
            {"activation": "silu"}, 3
    if family == "ssd":
        heads, dim, groups, size = 4, 8, 2, 16
        A = -torch.rand(heads, generator=generator) * 2 - 0.1
        return (randn(tokens, heads, dim), randn(tokens, heads), A, randn(tokens, groups, size, scale=0.3),
                randn(tokens, groups, size, scale=0.3), randn(heads), randn(heads, scale=0.5),
                state(heads, dim, size)), {"dt_limit": (0.0, math.inf)}, 7
    if family == "gated_delta":
        key_heads, key_dim, value_heads, value_dim = 2, 16, 4, 8
        q = F.normalize(torch.randn(tokens, key_heads, key_dim, generator=generator), dim=-1).to(dtype)
        k = F.normalize(torch.randn(tokens, key_heads, key_dim, generator=generator), dim=-1).to(dtype)
        g = -F.softplus(torch.randn(tokens, value_heads, generator=generator))
        beta = torch.rand(tokens, value_heads, generator=generator).to(dtype)
        return (q, k, randn(tokens, value_heads, value_dim), g, beta, state(value_heads, key_dim, value_dim)), \
            {"scale": key_dim**-0.5}, 5
    if family == "mla":
        heads, nope, rope, size, v_dim = 4, 8, 4, 16, 8
        blocks = num_blocks or int(metadata.block_tables.max()) + 3
        return (randn(tokens, heads, nope), randn(tokens, heads, rope), randn(tokens, size), randn(tokens, rope),
                randn(heads, nope, size, scale=0.3), randn(heads, v_dim, size, scale=0.3),
                randn(blocks, BLOCK_SIZE, size + rope)), {"scale": (nope + rope) ** -0.5}, 6
    raise ValueError(f"unknown mixer family {family!r}")


def run_family(backend: MixerBackend, family: str, call: Call, metadata: AttentionMetadata,
               layer: int = 0) -> torch.Tensor:
    """``backend``'s ``family`` on ``call``'s arguments (its cache changed in place)."""
    args, kwargs, _ = call
    result: torch.Tensor = getattr(backend, family)(*args, metadata, layer, **kwargs)
    return result


def _with_cache(call: Call, cache: torch.Tensor) -> Call:
    args, kwargs, index = call
    return (*args[:index], cache, *args[index + 1:]), kwargs, index


def _assert_close(actual: torch.Tensor, expected: torch.Tensor, label: str) -> None:
    atol, rtol = TOLERANCES.get(expected.dtype, TOLERANCES[torch.float32])
    assert actual.shape == expected.shape, f"{label}: shape {list(actual.shape)}, want {list(expected.shape)}"
    assert actual.dtype == expected.dtype, f"{label}: dtype {actual.dtype}, want {expected.dtype}"
    torch.testing.assert_close(actual.float(), expected.float(), atol=atol, rtol=rtol,
                               msg=lambda message: f"{label}: {message}")


class MixerConformance(BackendConformance):
    """Kit for :class:`MixerBackend` s. Set ``impl`` and ``spec``; checks run for the spec's families and dtypes."""

    kind = "mixer"
    spec: ClassVar[MixerSpec]

    def make_backend(self, dtype: torch.dtype = torch.float32) -> MixerBackend:
        """The backend under test, for ``dtype`` and the kit's block size."""
        context = MixerContext(dtype=str(dtype).removeprefix("torch."), block_size=BLOCK_SIZE)
        backend: MixerBackend = self.impl(self.make_options(), context)
        return backend

    def configurations(self) -> Iterator[tuple[str, torch.dtype]]:
        """Every (family, dtype) the spec declares."""
        for family in self.spec.families:
            for dtype_name in self.spec.dtypes:
                yield family, getattr(torch, dtype_name)

    def check_call(self, family: str, call: Call, metadata: AttentionMetadata, label: str,
                   backend: MixerBackend | None = None) -> torch.Tensor:
        """Run ``call`` on the backend and on the reference from the same cache; compare the outputs
        and the whole cache (slots outside the batch must keep their values). Returns the output."""
        dtype = call[0][0].dtype
        backend = backend or self.make_backend(dtype)
        cache = call[0][call[2]]
        ours, theirs = _with_cache(call, cache.clone()), _with_cache(call, cache.clone())
        out = run_family(backend, family, ours, metadata)
        expected = run_family(ReferenceMixer({}, MixerContext(dtype="float32", block_size=BLOCK_SIZE)), family,
                              theirs, metadata)
        _assert_close(out, expected, f"{label}: output")
        after, want = ours[0][ours[2]], theirs[0][theirs[2]]
        if metadata.state_slots is not None and family != "mla":
            used = set(metadata.state_slots.tolist())
            untouched = [slot for slot in range(cache.shape[0]) if slot not in used]
            assert torch.equal(after[untouched], cache[untouched]), (
                f"{label}: the call changed state slots outside its batch ({untouched})")
            torch.testing.assert_close(after, want, atol=TOLERANCES[torch.float32][0],
                                       rtol=TOLERANCES[torch.float32][1],
                                       msg=lambda message: f"{label}: state after the call: {message}")
        else:
            _assert_close(after, want, f"{label}: latent cache after the call")
        return out

    def run_shapes(self, shapes: list[Shape], what: str) -> None:
        """Every shape, in every configuration, against the reference."""
        for seed, (family, dtype) in enumerate(self.configurations()):
            for shape in shapes:
                generator = torch.Generator().manual_seed(seed)
                metadata = batch_metadata(shape, generator)
                call = family_inputs(family, metadata, dtype, generator)
                self.check_call(family, call, metadata, f"{what} {family} {dtype} {shape}")

    def test_decode_steps_continue_their_state(self) -> None:
        self.run_shapes([Shape((5, 1, 17, 40), (1, 1, 1, 1)), Shape((9,), (1,))], "decode")

    def test_prefills_around_chunk_sizes(self) -> None:
        self.run_shapes([Shape((0,) * len(PREFILL_LENGTHS), PREFILL_LENGTHS)], "prefill")

    def test_chunked_prefill_continues_a_context(self) -> None:
        self.run_shapes([Shape((3, 16, 64, 1), (13, 17, 40, 64))], "continued prefill")

    def test_mixed_batch(self) -> None:
        self.run_shapes([Shape((0, 9, 0, 30, 12), (20, 1, 1, 7, 1))], "mixed")

    def test_a_sequence_in_pieces_carries_its_state(self) -> None:
        """One 150-token sequence fed in pieces of 37, 1, 64 and 48 tokens gives what one call gives,
        and the reference's outputs: each piece starts from the state the previous one left."""
        pieces = (37, 1, 64, 48)
        for seed, (family, dtype) in enumerate(self.configurations()):
            generator = torch.Generator().manual_seed(100 + seed)
            whole_md = batch_metadata(Shape((0,), (sum(pieces),)), generator)
            call = family_inputs(family, whole_md, dtype, generator)
            whole = self.check_call(family, call, whole_md, f"one call {family} {dtype}")
            args, kwargs, index = call
            cache = args[index].clone()
            backend = self.make_backend(dtype)
            outputs, done = [], 0
            for count in pieces:
                tokens = slice(done, done + count)
                md = attrs.evolve(whole_md, slot_mapping=whole_md.slot_mapping[tokens],
                                  seq_lens=torch.tensor([done + count], dtype=torch.int32),
                                  query_start_loc=torch.tensor([0, count], dtype=torch.int32), max_query_len=count,
                                  max_seq_len=done + count)
                piece = tuple(a if i == index or a.dim() == 0 or a.shape[0] != sum(pieces) else a[tokens]
                              for i, a in enumerate(args))
                piece_call: Call = (tuple(cache if i == index else a for i, a in enumerate(piece)), kwargs, index)
                outputs.append(run_family(backend, family, piece_call, md))
                done += count
            _assert_close(torch.cat(outputs), whole, f"{family} {dtype} in pieces {pieces}")

    def test_a_sequence_gives_the_same_bits_alone_and_batched(self) -> None:
        shape = Shape((0, 9, 0, 30, 12), (20, 1, 1, 7, 1))
        for seed, (family, dtype) in enumerate(self.configurations()):
            generator = torch.Generator().manual_seed(200 + seed)
            metadata = batch_metadata(shape, generator)
            args, kwargs, index = call = family_inputs(family, metadata, dtype, generator)
            backend = self.make_backend(dtype)
            batched = run_family(backend, family, _with_cache(call, args[index].clone()), metadata)
            starts = metadata.query_start_loc.tolist()
            for s in range(metadata.num_seqs):
                lo, hi = starts[s], starts[s + 1]
                alone_md = attrs.evolve(
                    metadata, block_tables=metadata.block_tables[s:s + 1], slot_mapping=metadata.slot_mapping[lo:hi],
                    seq_lens=metadata.seq_lens[s:s + 1], query_start_loc=torch.tensor([0, hi - lo], dtype=torch.int32),
                    max_query_len=hi - lo, max_seq_len=int(metadata.seq_lens[s]),
                    state_slots=metadata.state_slots[s:s + 1] if metadata.state_slots is not None else None)
                alone_args = tuple(args[index].clone() if i == index else a[lo:hi]
                                   if a.dim() and a.shape[0] == metadata.num_tokens and i != index else a
                                   for i, a in enumerate(args))
                alone = run_family(backend, family, (alone_args, kwargs, index), alone_md)
                assert torch.equal(alone, batched[lo:hi]), (
                    f"{family} {dtype}: sequence {s} gives other bits alone than in its batch of {metadata.num_seqs}")

    def test_rejects_mismatched_inputs(self) -> None:
        for family, dtype in self.configurations():
            generator = torch.Generator().manual_seed(7)
            metadata = batch_metadata(Shape((3, 0), (2, 5)), generator)
            args, kwargs, index = family_inputs(family, metadata, dtype, generator)
            backend = self.make_backend(dtype)
            cases: dict[str, tuple[tuple[Any, ...], AttentionMetadata]] = {
                "its first input one token short": ((args[0][:-1], *args[1:]), metadata),
                "its first input in another dtype": ((args[0].double(), *args[1:]), metadata),
                "a draft-tree mask": (args, attrs.evolve(metadata, tree_mask=torch.ones(
                    metadata.num_tokens, metadata.max_query_len, dtype=torch.bool))),
            }
            if family != "mla":
                cases["no state_slots"] = (args, attrs.evolve(metadata, state_slots=None))
                cases["a state slot past the state"] = (args, attrs.evolve(
                    metadata, state_slots=torch.tensor([0, args[index].shape[0]])))
                cases["a state of the wrong shape"] = ((*args[:index], args[index][..., :-1], *args[index + 1:]),
                                                       metadata)
            for what, (bad_args, bad_md) in cases.items():
                before = bad_args[index].clone()
                expect_raises(ValueError, run_family, backend, family, (bad_args, kwargs, index), bad_md,
                              what=f"{family} with {what}")
                assert torch.equal(bad_args[index], before), f"{family} with {what} raised but changed its cache"

    def test_spec_declares_known_families_and_dtypes(self) -> None:
        assert self.spec.families, "a mixer spec names the families it implements"
        for dtype in self.spec.dtypes:
            assert isinstance(getattr(torch, dtype, None), torch.dtype), f"unknown dtype {dtype!r}"

    def test_undeclared_families_are_refused(self) -> None:
        backend = self.make_backend()
        for family in sorted({"short_conv", "ssd", "gated_delta", "mla"} - set(self.spec.families)):
            generator = torch.Generator().manual_seed(0)
            metadata = batch_metadata(Shape((0,), (3,)), generator)
            call = family_inputs(family, metadata, torch.float32, generator)
            with pytest.raises(NotImplementedError, match=family):
                run_family(backend, family, call, metadata)
