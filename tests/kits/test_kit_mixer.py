"""Meta-tests of the mixer kit: its brute-force reference follows transformers' own recurrences;
the scaffold's short convolution passes it; broken variants fail it (a state dropped, not stored, or
not carried from one chunk to the next, other slots overwritten, an off-by-one window, a missing skip
connection, latent attention blind to its context, outputs depending on the batch, inputs unchecked)."""

from __future__ import annotations

import math
from typing import Any

import attrs
import pytest
import torch

from pyagent_core.interfaces.attention import AttentionMetadata
from pyagent_core.interfaces.mixer import MixerContext
from pyagent_core.testing.mixer import (
    MixerConformance,
    ReferenceMixer,
    Shape,
    batch_metadata,
    family_inputs,
    reference_gated_delta,
    reference_short_conv,
    reference_ssd,
)
from pyagent_core.testing.scaffolded import import_template
from pyagent_core.types import MixerSpec

REFERENCE_SPEC = MixerSpec(name="reference", impl="pyagent_core.testing.mixer:ReferenceMixer",
                           families=("short_conv", "ssd", "gated_delta", "mla"), dtypes=("float32",))

scaffold = import_template("mixer")
# The scaffold's own conformance test, run here on the short convolution it scaffolds.
TestScaffoldedMixer = scaffold.tests.TestKitReference


class _ReferenceKit(MixerConformance):
    """The kit on its own oracle (every family): the baseline the broken variants below break."""

    impl = ReferenceMixer
    spec = REFERENCE_SPEC


def _chunks(metadata: AttentionMetadata, size: int) -> list[tuple[list[int], AttentionMetadata]]:
    """The batch cut into rounds: round ``i`` holds tokens ``size * i ...`` of every sequence still going,
    as a batch of its own (token indices into the call's inputs, its metadata)."""
    starts, lens = metadata.query_start_loc.tolist(), metadata.seq_lens.tolist()
    rounds = []
    for i in range(-(-max(starts[s + 1] - starts[s] for s in range(metadata.num_seqs)) // size)):
        tokens, seqs, counts, seq_lens = [], [], [], []
        for s in range(metadata.num_seqs):
            lo, hi = starts[s] + size * i, min(starts[s + 1], starts[s] + size * (i + 1))
            if lo < hi:
                tokens += range(lo, hi)
                seqs.append(s)
                counts.append(hi - lo)
                seq_lens.append(lens[s] - (starts[s + 1] - hi))
        rounds.append((tokens, attrs.evolve(
            metadata, block_tables=metadata.block_tables[seqs], slot_mapping=metadata.slot_mapping[tokens],
            seq_lens=torch.tensor(seq_lens, dtype=torch.int32),
            query_start_loc=torch.tensor([0, *torch.tensor(counts).cumsum(0).tolist()], dtype=torch.int32),
            max_query_len=max(counts), max_seq_len=max(seq_lens), state_slots=metadata.state_slots[seqs])))
    return rounds


class ChunksWithoutCarry(ReferenceMixer):
    """Broken: runs a call in chunks of 16 tokens per sequence, every chunk from the state the call began
    with instead of the state the previous chunk left."""

    def ssd(self, x, dt, A, B, C, D, dt_bias, state, metadata, layer, dt_limit=(0.0, math.inf)):
        initial, y = state.clone(), torch.empty_like(x)
        for tokens, md in _chunks(metadata, 16):
            kept = state.clone()
            state.copy_(initial)
            y[tokens] = reference_ssd(x[tokens], dt[tokens], A, B[tokens], C[tokens], D, dt_bias, state, md, dt_limit)
            moved = md.state_slots
            kept[moved] = state[moved]
            state.copy_(kept)
        return y


class ForgetsItsState(ReferenceMixer):
    """Broken: every sequence starts from the zero state, as if it had no context."""

    def gated_delta(self, q, k, v, g, beta, state, metadata, layer, scale):
        state[metadata.state_slots] = 0
        return reference_gated_delta(q, k, v, g, beta, state, metadata, scale)


class ForgetsToStore(ReferenceMixer):
    """Broken: computes the right outputs but leaves the state as it found it."""

    def ssd(self, x, dt, A, B, C, D, dt_bias, state, metadata, layer, dt_limit=(0.0, math.inf)):
        before = state.clone()
        y = super().ssd(x, dt, A, B, C, D, dt_bias, state, metadata, layer, dt_limit)
        state.copy_(before)
        return y


class TouchesOtherSlots(ReferenceMixer):
    """Broken: zeroes every slot outside its batch."""

    def short_conv(self, x, weight, bias, state, metadata, layer, activation=None):
        out = super().short_conv(x, weight, bias, state, metadata, layer, activation)
        others = [slot for slot in range(state.shape[0]) if slot not in set(metadata.state_slots.tolist())]
        state[others] = 0
        return out


class ShiftedWindow(ReferenceMixer):
    """Broken: convolves the ``width`` inputs before each token instead of the window ending at it."""

    def short_conv(self, x, weight, bias, state, metadata, layer, activation=None):
        shifted = torch.cat((torch.zeros_like(weight[:, :1]), weight[:, :-1]), dim=1)
        return reference_short_conv(x, shifted, bias, state, metadata, activation)


class NoSkip(ReferenceMixer):
    """Broken: drops the ``D * x`` skip connection."""

    def ssd(self, x, dt, A, B, C, D, dt_bias, state, metadata, layer, dt_limit=(0.0, math.inf)):
        return reference_ssd(x, dt, A, B, C, torch.zeros_like(D), dt_bias, state, metadata, dt_limit)


class LatentBlindToContext(ReferenceMixer):
    """Broken: latent attention over the new tokens only (the cached rows zeroed first)."""

    def mla(self, q_nope, q_pe, latent, k_pe, w_uk, w_uv, cache, metadata, layer, scale):
        cache.zero_()
        return super().mla(q_nope, q_pe, latent, k_pe, w_uk, w_uv, cache, metadata, layer, scale)


class BatchDependent(ReferenceMixer):
    """Broken: its outputs move with the size of the batch."""

    def short_conv(self, x, weight, bias, state, metadata, layer, activation=None):
        return super().short_conv(x, weight, bias, state, metadata, layer, activation) * (1 + 1e-6 * metadata.num_seqs)


class Unchecked(ReferenceMixer):
    """Broken: runs whatever it is given (a draft tree, a short input...)."""

    def short_conv(self, x, weight, bias, state, metadata, layer, activation=None):
        starts = metadata.query_start_loc.tolist()
        md = attrs.evolve(metadata, query_start_loc=torch.tensor([min(v, x.shape[0]) for v in starts],
                                                                 dtype=torch.int32))
        return reference_short_conv(x, weight.to(x.dtype), bias, state, md, activation)


def _kit(impl: type[ReferenceMixer], families: tuple[str, ...]) -> MixerConformance:
    spec = attrs.evolve(REFERENCE_SPEC, families=families)
    return type(f"{impl.__name__}Kit", (_ReferenceKit,), {"impl": impl, "spec": spec})()


@pytest.mark.parametrize(("impl", "families", "check"), [
    (ChunksWithoutCarry, ("ssd",), "test_prefills_around_chunk_sizes"),
    (ChunksWithoutCarry, ("ssd",), "test_a_sequence_in_pieces_carries_its_state"),
    (ForgetsItsState, ("gated_delta",), "test_decode_steps_continue_their_state"),
    (ForgetsItsState, ("gated_delta",), "test_a_sequence_in_pieces_carries_its_state"),
    (ForgetsToStore, ("ssd",), "test_decode_steps_continue_their_state"),
    (TouchesOtherSlots, ("short_conv",), "test_mixed_batch"),
    (ShiftedWindow, ("short_conv",), "test_prefills_around_chunk_sizes"),
    (NoSkip, ("ssd",), "test_decode_steps_continue_their_state"),
    (LatentBlindToContext, ("mla",), "test_decode_steps_continue_their_state"),
    (BatchDependent, ("short_conv",), "test_a_sequence_gives_the_same_bits_alone_and_batched"),
    (Unchecked, ("short_conv",), "test_rejects_mismatched_inputs"),
], ids=["chunk-carry-prefill", "chunk-carry-pieces", "forgets-state-decode", "forgets-state-pieces",
        "forgets-to-store", "touches-other-slots", "shifted-window", "no-skip", "latent-blind", "batch-dependent",
        "unchecked"])
def test_kit_catches_broken_backend(impl: type[ReferenceMixer], families: tuple[str, ...], check: str) -> None:
    with pytest.raises(AssertionError):
        getattr(_kit(impl, families), check)()


def test_kit_failure_is_specific() -> None:
    """A backend that forgets its state is right where there is none to forget: prefills from scratch;
    one that restarts every chunk is right for decode steps."""
    _kit(ForgetsItsState, ("gated_delta",)).test_prefills_around_chunk_sizes()
    _kit(ChunksWithoutCarry, ("ssd",)).test_decode_steps_continue_their_state()


# --- the reference follows transformers' own recurrences -----------------------------------------------

transformers_mamba2 = pytest.importorskip("transformers.models.mamba2.modeling_mamba2")
transformers_qwen3_next = pytest.importorskip("transformers.models.qwen3_next.modeling_qwen3_next")


def _one_sequence(length: int, generator: torch.Generator) -> AttentionMetadata:
    return batch_metadata(Shape((0,), (length,)), generator, num_slots=1)


def test_reference_ssd_is_transformers_chunked_scan() -> None:
    """transformers' Mamba2 chunked scan (chunk size 8, 21 tokens: three chunks) gives the reference's
    outputs and final state."""
    generator = torch.Generator().manual_seed(0)
    metadata = _one_sequence(21, generator)
    (x, dt, A, B, C, D, dt_bias, state), kwargs, _ = family_inputs("ssd", metadata, torch.float32, generator)
    ours = reference_ssd(x, dt, A, B, C, D, dt_bias, state, metadata, kwargs["dt_limit"])
    theirs, final = transformers_mamba2.mamba2_chunk_scan(
        x[None], dt[None], A, B[None], C[None], chunk_size=8, D=D, dt_bias=dt_bias, dt_softplus=True,
        return_final_states=True)
    torch.testing.assert_close(ours, theirs[0], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(state[int(metadata.state_slots[0])], final[0], atol=1e-4, rtol=1e-4)


def test_reference_gated_delta_is_transformers_chunked_rule() -> None:
    """transformers' Qwen3-Next chunked gated delta rule (chunk 8, 19 tokens, 2 key heads for 4 value
    heads) gives the reference's outputs and final state."""
    generator = torch.Generator().manual_seed(1)
    metadata = _one_sequence(19, generator)
    (q, k, v, g, beta, state), kwargs, _ = family_inputs("gated_delta", metadata, torch.float32, generator)
    ours = reference_gated_delta(q, k, v, g, beta, state, metadata, kwargs["scale"])
    theirs, final = transformers_qwen3_next.torch_chunk_gated_delta_rule(
        q[None], k[None], v[None], g=g[None], beta=beta[None], chunk_size=8, output_final_state=True)
    torch.testing.assert_close(ours, theirs[0], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(state[int(metadata.state_slots[0])], final[0], atol=1e-4, rtol=1e-4)


def test_reference_short_conv_is_transformers_causal_conv() -> None:
    generator = torch.Generator().manual_seed(2)
    metadata = _one_sequence(11, generator)
    (x, weight, bias, state), _, _ = family_inputs("short_conv", metadata, torch.float32, generator)
    ours = reference_short_conv(x, weight, bias, state, metadata, "silu")
    theirs = transformers_mamba2.causal_conv1d_fn(x.T[None], weight, bias, activation="silu")
    torch.testing.assert_close(ours, theirs[0].T, atol=1e-5, rtol=1e-5)


def test_context_refuses_a_non_positive_block_size() -> None:
    with pytest.raises(ValueError, match="block_size must be positive, got 0"):
        MixerContext(dtype="float32", block_size=0)


def test_a_backend_refuses_families_it_lacks() -> None:
    backend: Any = scaffold.impl.KitReference({}, MixerContext(dtype="float32", block_size=4))
    with pytest.raises(NotImplementedError, match="does not implement the 'ssd' family"):
        backend.ssd(*(None,) * 10)
