"""Conformance kit for model architectures (:class:`~pyagent_core.interfaces.model.CausalLM`).

A plugin's test sets ``impl``, ``spec`` and ``config_json`` (a tiny ``config.json`` of its
architecture: a few layers, a small hidden size). The kit builds the model on random weights of the
shapes the class declares and checks the files' side (config round trip, missing keys named,
GGUF names for every weight, missing weights named) and the forward's: float32 logits of the rows
asked for, one attention call per attention layer in order, decode steps that give the prefill's
logits, a prompt prefilled in several chunks then decoded, sequences batched in scattered blocks and
state slots that give their own logits, and bfloat16 close to float32. The caches are those the
class's :meth:`~pyagent_core.interfaces.model.CausalLM.cache_layout` declares (paged keys and values,
latents, recurrent states); a model that names mixer families runs with the mixer kit's float64
reference (:class:`~pyagent_core.testing.mixer.ReferenceMixer`). A test that overrides
:meth:`ModelConformance.reference_logits` (with transformers' model of the same config and weights,
say) is also compared against it.

An architecture that serves LoRA adapters (non-empty ``lora_targets``) is also checked against the
merged-weights oracle: rows of a slot holding an adapter give the logits of the model whose weights
are ``W + scale * B A``, rows of other adapters and of the base model in the same batch give their
own, and misuse (an empty slot, a rank above ``max_lora_rank``, LoRA not enabled) raises
:class:`~pyagent_core.errors.LoRAAdapterError`. One that serves none (empty ``lora_targets``: those
checks skip, saying so) must run ``lora_slots`` of all -1 as its base model and refuse rows naming a
slot, and ``enable_lora``, with :class:`~pyagent_core.errors.LoRAAdapterError`.
"""

from __future__ import annotations

import copy
import json
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import pytest
import torch

from pyagent_core.errors import LoRAAdapterError, ModelFormatError
from pyagent_core.interfaces.attention import AttentionBackend, AttentionMetadata
from pyagent_core.interfaces.cache import PagedKV
from pyagent_core.interfaces.lora import LoRAAdapter, LoRASettings, LoRAWeight
from pyagent_core.interfaces.mixer import MixerBackend, MixerContext
from pyagent_core.interfaces.model import COMMON_CONFIG_KEYS, REQUIRED, CausalLM, ModelConfig, ModelContext
from pyagent_core.testing.base import BackendConformance
from pyagent_core.testing.mixer import ReferenceMixer
from pyagent_core.testing.scaffolded import import_template
from pyagent_core.types import ModelSpec

#: The file name the kit's configs are read from, as messages show it.
KIT_CONFIG = "kit/config.json"

#: The checks a config variant of an architecture the kit already passes needs (its reading, its GGUF
#: names, its decode steps and its agreement with the reference): run them on a subclass that sets the
#: variant's ``config_json``, e.g. ``getattr(Variant(), check)()`` for each.
VARIANT_CHECKS = ("test_hf_config_round_trips", "test_gguf_names_cover_every_weight_once",
                  "test_decode_steps_give_the_prefill_logits", "test_matches_the_reference_implementation")


def random_weights(shapes: Mapping[str, tuple[int, ...]], seed: int = 0) -> dict[str, torch.Tensor]:
    """float32 weights of ``shapes``: matrices ``N(0, 1 / in_features)`` (embeddings ``N(0, 1)``),
    vectors (norms, biases) ``1 + N(0, 0.1)`` for ``*norm*`` names and ``N(0, 0.1)`` otherwise; so
    activations keep their scale through the layers and logits are spread out."""
    generator = torch.Generator().manual_seed(seed)
    weights = {}
    for name, shape in sorted(shapes.items()):
        values = torch.randn(shape, generator=generator)
        if len(shape) == 2:
            values = values if "embed" in name else values / shape[1] ** 0.5
        else:
            values = (1 + 0.1 * values) if "norm" in name else 0.1 * values
        weights[name] = values
    return weights


def random_adapter(targets: Mapping[str, tuple[int, int]], rank: int, seed: int, *,
                   only: Sequence[str] | None = None) -> LoRAAdapter:
    """A LoRA adapter of ``rank`` with random, non-zero matrices on every target (or the targets whose
    name contains one of ``only``): ``A ~ N(0, 1 / in)``, ``B ~ N(0, 0.1 / rank)``, scale 2 / rank."""
    generator = torch.Generator().manual_seed(seed)
    weights = {}
    for name, (out_features, in_features) in sorted(targets.items()):
        if only is None or any(part in name for part in only):
            a = torch.randn(rank, in_features, generator=generator) / in_features**0.5
            b = torch.randn(out_features, rank, generator=generator) * 0.1 / rank**0.5
            weights[name] = LoRAWeight(a=a, b=b, scale=2.0 / rank)
    return LoRAAdapter(name=f"kit-{seed}", source="kit", format="kit", weights=weights)


def merged_weights(weights: Mapping[str, torch.Tensor], adapter: LoRAAdapter) -> dict[str, torch.Tensor]:
    """``weights`` with every adapted one replaced by ``W + scale * B @ A`` (in float64, rounded once)."""
    merged = dict(weights)
    for name, weight in adapter.weights.items():
        delta = weight.scale * (weight.b.double() @ weight.a.double())
        merged[name] = (weights[name].double() + delta).to(weights[name].dtype)
    return merged


def metadata(tables: Sequence[Sequence[int]], starts: Sequence[int], counts: Sequence[int],
             block_size: int, slots: Sequence[int] | None = None) -> AttentionMetadata:
    """Metadata for sequences with block tables ``tables`` getting ``counts`` new tokens after ``starts``
    (``slots``: their state slots, for models with recurrent layers)."""
    slot_mapping = [tables[s][p // block_size] * block_size + p % block_size
                    for s in range(len(tables)) for p in range(starts[s], starts[s] + counts[s])]
    seq_lens = [start + count for start, count in zip(starts, counts, strict=True)]
    width = max(len(table) for table in tables)
    return AttentionMetadata(
        block_tables=torch.tensor([[*t, *[0] * (width - len(t))] for t in tables], dtype=torch.int32),
        slot_mapping=torch.tensor(slot_mapping, dtype=torch.int64),
        seq_lens=torch.tensor(seq_lens, dtype=torch.int32),
        query_start_loc=torch.tensor([0, *torch.tensor(list(counts)).cumsum(0).tolist()], dtype=torch.int32),
        max_query_len=max(counts),
        max_seq_len=max(seq_lens),
        state_slots=None if slots is None else torch.tensor(list(slots), dtype=torch.int64),
    )


class _Recording(AttentionBackend):
    """Wraps a backend and records the layer index of every call."""

    def __init__(self, inner: AttentionBackend) -> None:
        super().__init__(inner.options, inner.context)
        self.inner = inner
        self.layers: list[int] = []

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, kv_cache: torch.Tensor,
                metadata: AttentionMetadata, layer: int) -> torch.Tensor:
        self.layers.append(layer)
        return self.inner.forward(q, k, v, kv_cache, metadata, layer)


class ModelConformance(BackendConformance):
    """Base class for model architecture tests; subclasses set ``impl``, ``spec`` and ``config_json``.

    Attributes:
        config_json: a tiny ``config.json`` object of the architecture (with ``architectures``).
        block_size: tokens per KV block of the kit's caches (small, so sequences span blocks).
        reference_atol: the largest difference allowed between the model's float32 logits and
            :meth:`reference_logits`.
        prompt_length: tokens of the kit's prompts.
        bfloat16_overrides: ``config.json`` values the bfloat16 check runs with (a mixture of experts
            choosing all its experts, so that rounding cannot flip a routing decision).
        required_keys: the ``config.json`` keys whose absence must be named.
    """

    kind = "model"
    impl: ClassVar[type[CausalLM]]
    spec: ClassVar[ModelSpec]
    config_json: ClassVar[Mapping[str, Any]]
    block_size: ClassVar[int] = 4
    reference_atol: ClassVar[float] = 1e-4
    prompt_length: ClassVar[int] = 11
    bfloat16_overrides: ClassVar[Mapping[str, Any]] = {}
    required_keys: ClassVar[tuple[str, ...]] = tuple(key.hf_key for key in COMMON_CONFIG_KEYS
                                                     if key.default is REQUIRED)

    # --- helpers ---------------------------------------------------------------------------------

    def make_config(self, data: Mapping[str, Any] | None = None) -> ModelConfig:
        """The config the class reads from ``data`` (default: :attr:`config_json`)."""
        return self.impl.config_from_hf(dict(self.config_json if data is None else data), self.spec.name, KIT_CONFIG)

    def make_weights(self, config: ModelConfig, seed: int = 0) -> dict[str, torch.Tensor]:
        """Random float32 weights of the shapes the class declares (:func:`random_weights`)."""
        return random_weights(self.impl.weight_shapes(config), seed)

    def make_model(self, dtype: str = "float32", weights: Mapping[str, Any] | None = None,
                   data: Mapping[str, Any] | None = None) -> CausalLM:
        """The model of ``data`` (default: :attr:`config_json`) on :meth:`make_weights` (or ``weights``), in
        ``dtype``."""
        config = self.make_config(data)
        weights = self.make_weights(config) if weights is None else weights
        model = self.impl(self.make_options(), ModelContext(config=config, weights=weights, dtype=dtype))
        assert isinstance(model, CausalLM)
        return model

    def make_attention(self, model: CausalLM, dtype: str = "float32") -> AttentionBackend:
        """The scaffold's reference attention (SDPA over the paged cache), built with the class's context."""
        backend: AttentionBackend = import_template("attention").impl.KitReference(
            {}, self.impl.attention_context(model.config, self.block_size, dtype))
        return backend

    def make_mixer(self, model: CausalLM) -> MixerBackend | None:
        """The mixer kit's reference backend when the class names mixer families, else ``None``."""
        if not self.impl.mixer_families(model.config):
            return None
        return ReferenceMixer({}, MixerContext(dtype=model.context.dtype, block_size=self.block_size))

    def make_caches(self, config: ModelConfig, num_blocks: int, dtype: str = "float32",
                    num_slots: int = 4) -> list[Any]:
        """Every layer's zeroed cache as the class's :meth:`~CausalLM.cache_layout` declares it."""
        return self.impl.cache_layout(config).allocate(num_blocks, self.block_size, num_slots, getattr(torch, dtype))

    def prompt(self, config: ModelConfig, seed: int = 0, length: int | None = None) -> list[int]:
        """Random token ids."""
        generator = torch.Generator().manual_seed(seed)
        return torch.randint(config.vocab_size, (length or self.prompt_length,), generator=generator).tolist()

    def run(self, model: CausalLM, ids: Sequence[int], positions: torch.Tensor, caches: Sequence[Any],
            md: AttentionMetadata, rows: torch.Tensor, attention: AttentionBackend | None = None,
            mixer: MixerBackend | None = None, lora_slots: torch.Tensor | None = None) -> torch.Tensor:
        """``model.forward`` on the kit's backends (the mixer passed only to a model that names families,
        ``lora_slots`` only when given)."""
        attention = attention or self.make_attention(model, model.context.dtype)
        extra: dict[str, Any] = {} if lora_slots is None else {"lora_slots": lora_slots}
        if self.impl.mixer_families(model.config):
            extra["mixer"] = mixer or self.make_mixer(model)
        return model.forward(torch.tensor(list(ids)), positions, caches, md, attention, rows, **extra)

    def prefill(self, model: CausalLM, ids: Sequence[int], attention: AttentionBackend | None = None,
                dtype: str = "float32") -> torch.Tensor:
        """Logits of every position of ``ids``, prefilled as one sequence in blocks ``0, 1, ...``, slot 1."""
        blocks = -(-len(ids) // self.block_size)
        return self.run(model, ids, torch.arange(len(ids)), self.make_caches(model.config, blocks, dtype),
                        metadata([list(range(blocks))], [0], [len(ids)], self.block_size, [1]),
                        torch.arange(len(ids)), attention)

    def reference_logits(self, config_json: Mapping[str, Any], weights: Mapping[str, torch.Tensor],
                         ids: Sequence[int]) -> torch.Tensor | None:
        """float32 ``[len(ids), vocab]`` logits of an independent implementation of the same model
        (transformers', say), or ``None`` (the default) to skip that comparison."""
        return None

    # --- the files' side ---------------------------------------------------------------------------

    def test_spec_serves_the_architecture_the_class_writes(self) -> None:
        written = self.impl.hf_config(self.make_config())
        assert self.spec.serves(hf=written["architectures"]), (
            f"hf_config writes architectures {written['architectures']}, which the spec "
            f"({self.spec.architectures}) does not serve")
        assert self.spec.serves(hf=self.config_json["architectures"])

    def test_hf_config_round_trips(self) -> None:
        config = self.make_config()
        assert self.make_config(self.impl.hf_config(config)) == config

    def test_missing_required_keys_are_named(self) -> None:
        for key in self.required_keys:
            data = {k: v for k, v in self.config_json.items() if k != key}
            with pytest.raises(ModelFormatError, match=f"{KIT_CONFIG} lacks the required key '{key}'"):
                self.make_config(data)

    def test_gguf_names_cover_every_weight_once(self) -> None:
        """Every weight has one GGUF name; or, for a class that restores converted tensors in
        :meth:`~CausalLM.gguf_restore`, the tensors it stages stay under their GGUF names (mapped to
        themselves) and the others map to distinct weights."""
        config = self.make_config()
        shapes, names = self.impl.weight_shapes(config), self.impl.gguf_tensor_names(config)
        assert set(self.impl.gguf_permuted_heads(config)) <= set(shapes)
        if self.impl.gguf_restore.__func__ is CausalLM.gguf_restore.__func__:  # type: ignore[attr-defined]
            assert sorted(names.values()) == sorted(shapes), "every weight needs exactly one GGUF tensor name"
            return
        renamed = [hf for gguf_name, hf in names.items() if hf != gguf_name]
        assert len(renamed) == len(set(renamed)) and set(renamed) <= set(shapes), (
            "GGUF names map to distinct weights of weight_shapes, or to themselves (staged for gguf_restore)")

    def test_missing_and_misshapen_weights_are_named(self) -> None:
        config = self.make_config()
        weights = self.make_weights(config)
        name = sorted(weights)[-1]
        missing = {k: v for k, v in weights.items() if k != name}
        with pytest.raises(ModelFormatError, match=f"lacks 1 weights: {name}"):
            self.make_model(weights=missing)
        with pytest.raises(ModelFormatError, match=f"weight {name} has shape \\[3, 3\\]"):
            self.make_model(weights=missing | {name: torch.zeros(3, 3)})

    # --- the forward -------------------------------------------------------------------------------

    def test_forward_gives_float32_logits_of_the_asked_rows_and_attends_once_per_layer(self) -> None:
        model = self.make_model()
        ids = self.prompt(model.config)
        recording = _Recording(self.make_attention(model))
        all_rows = self.prefill(model, ids, recording)
        assert all_rows.dtype == torch.float32 and all_rows.shape == (len(ids), model.config.vocab_size)
        assert torch.isfinite(all_rows).all()
        layout = self.impl.cache_layout(model.config)
        assert len(layout.layers) == model.config.num_layers, "cache_layout declares one record per layer"
        assert recording.layers == [i for i, cache in enumerate(layout.layers) if isinstance(cache, PagedKV)], (
            "attention is called once per layer that keeps paged keys and values, in order")
        blocks = -(-len(ids) // self.block_size)
        some = self.run(model, ids, torch.arange(len(ids)), self.make_caches(model.config, blocks),
                        metadata([list(range(blocks))], [0], [len(ids)], self.block_size, [2]),
                        torch.tensor([len(ids) - 1, 2]))
        torch.testing.assert_close(some, all_rows[[len(ids) - 1, 2]], atol=1e-5, rtol=0)

    def test_decode_steps_give_the_prefill_logits(self) -> None:
        model = self.make_model()
        ids = self.prompt(model.config)
        whole = self.prefill(model, ids)
        attention, mixer = self.make_attention(model), self.make_mixer(model)
        blocks = -(-len(ids) // self.block_size)
        caches = self.make_caches(model.config, blocks)
        table = [list(range(blocks))]
        start = 3
        rows = [self.run(model, ids[:start], torch.arange(start), caches,
                         metadata(table, [0], [start], self.block_size, [3]), torch.arange(start), attention, mixer)]
        for position in range(start, len(ids)):
            rows.append(self.run(model, ids[position:position + 1], torch.tensor([position]), caches,
                                 metadata(table, [position], [1], self.block_size, [3]), torch.tensor([0]),
                                 attention, mixer))
        torch.testing.assert_close(torch.cat(rows), whole, atol=1e-4, rtol=0)

    def test_a_prompt_in_chunks_then_decode_steps_gives_one_prefills_logits(self) -> None:
        """A prompt of three times the kit's length, prefilled in chunks of 5, 1, 9 and the rest, then
        four decode steps: every row equals the one-call prefill's."""
        model = self.make_model()
        ids = self.prompt(model.config, 4, 3 * self.prompt_length + 4)
        whole = self.prefill(model, ids)
        attention, mixer = self.make_attention(model), self.make_mixer(model)
        blocks = -(-len(ids) // self.block_size)
        caches = self.make_caches(model.config, blocks + 3)
        table = [list(range(blocks + 2, 1, -1))]  # blocks in reverse order
        done, rows = 0, []
        for count in (5, 1, 9, len(ids) - 4 - 15, 1, 1, 1, 1):
            rows.append(self.run(model, ids[done:done + count], torch.arange(done, done + count), caches,
                                 metadata(table, [done], [count], self.block_size, [0]), torch.arange(count),
                                 attention, mixer))
            done += count
        torch.testing.assert_close(torch.cat(rows), whole, atol=1e-4, rtol=0)

    def test_batched_and_chunked_sequences_give_their_own_logits(self) -> None:
        model = self.make_model()
        a, b = self.prompt(model.config, 1), self.prompt(model.config, 2, self.prompt_length + 3)
        bs, cut = self.block_size, len(a) // 2
        count = -(-max(len(a), len(b)) // bs)
        tables = [list(range(2 * count - 1, -1, -2)), list(range(0, 2 * count, 2))]  # interleaved, one reversed
        attention, mixer = self.make_attention(model), self.make_mixer(model)
        caches = self.make_caches(model.config, 2 * count)
        self.run(model, a[:cut], torch.arange(cut), caches, metadata(tables[:1], [0], [cut], bs, [2]),
                 torch.tensor([cut - 1]), attention, mixer)
        rest = len(a) - cut
        logits = self.run(model, a[cut:] + b, torch.cat([torch.arange(cut, len(a)), torch.arange(len(b))]), caches,
                          metadata(tables, [cut, 0], [rest, len(b)], bs, [2, 0]),
                          torch.tensor([rest - 1, rest + len(b) - 1]), attention, mixer)
        for row, ids in enumerate((a, b)):
            torch.testing.assert_close(logits[row], self.prefill(model, ids)[-1], atol=1e-4, rtol=0)

    def test_a_sequence_gives_its_logits_in_any_batch(self) -> None:
        """A decode step gives the same logits alone and batched between another sequence's prefill and a
        third one's decode step, in other slots (within 1e-5)."""
        model = self.make_model()
        a, b, c = (self.prompt(model.config, seed) for seed in (5, 6, 7))
        bs = self.block_size
        per = -(-len(a) // bs)
        tables = [list(range(i * per, (i + 1) * per)) for i in range(3)]
        attention, mixer = self.make_attention(model), self.make_mixer(model)
        rows: dict[bool, torch.Tensor] = {}
        for batched in (False, True):
            caches = self.make_caches(model.config, 3 * per)
            for s, ids in ((0, a), (2, c)):
                self.run(model, ids[:-1], torch.arange(len(ids) - 1), caches,
                         metadata([tables[s]], [0], [len(ids) - 1], bs, [s]), torch.tensor([0]), attention, mixer)
            if batched:
                rows[batched] = self.run(
                    model, b + a[-1:] + c[-1:],
                    torch.cat([torch.arange(len(b)), torch.tensor([len(a) - 1, len(c) - 1])]),
                    caches, metadata([tables[1], tables[0], tables[2]], [0, len(a) - 1, len(c) - 1], [len(b), 1, 1], bs,
                                     [1, 0, 2]), torch.tensor([len(b)]), attention, mixer)
            else:
                rows[batched] = self.run(model, a[-1:], torch.tensor([len(a) - 1]), caches,
                                         metadata([tables[0]], [len(a) - 1], [1], bs, [0]), torch.tensor([0]),
                                         attention, mixer)
        torch.testing.assert_close(rows[True], rows[False], atol=1e-5, rtol=0)

    def test_bfloat16_runs_close_to_float32(self) -> None:
        data = {**self.config_json, **self.bfloat16_overrides}
        weights = self.make_weights(self.make_config(data))
        full, half = self.make_model("float32", weights, data), self.make_model("bfloat16", weights, data)
        ids = self.prompt(full.config)
        ours, theirs = self.prefill(half, ids, dtype="bfloat16"), self.prefill(full, ids)
        assert ours.dtype == torch.float32
        scale = theirs.abs().max().item()
        assert (ours - theirs).abs().max().item() <= 0.1 * scale + 0.1

    # --- LoRA adapters -----------------------------------------------------------------------------

    def lora_model(self, weights: Mapping[str, torch.Tensor]) -> tuple[CausalLM, list[LoRAAdapter]]:
        """The model on ``weights`` with LoRA enabled (3 slots of rank up to 8) and two adapters loaded:
        rank 8 on every target in slot 0, rank 3 on the attention's targets in slot 2; skips the test
        when the architecture serves no adapters."""
        config = self.make_config()
        targets = self.impl.lora_targets(config)
        if not targets:
            pytest.skip(f"{self.impl.__name__} serves no LoRA adapters (lora_targets is empty)")
        model = self.make_model(weights=weights)
        model.enable_lora(LoRASettings(max_loras=3, max_lora_rank=8))
        adapters = [random_adapter(targets, 8, 1), random_adapter(targets, 3, 2, only=("attn",))]
        assert adapters[1].weights, "the attention's targets are named *attn*"
        model.load_lora(0, adapters[0])
        model.load_lora(2, adapters[1])
        return model, adapters

    def test_lora_rows_give_the_merged_weights_logits(self) -> None:
        weights = self.make_weights(self.make_config())
        model, adapters = self.lora_model(weights)
        ids = self.prompt(model.config)
        blocks = -(-len(ids) // self.block_size)
        base = self.prefill(model, ids)
        for slot, adapter in ((0, adapters[0]), (2, adapters[1])):
            ours = self.run(model, ids, torch.arange(len(ids)), self.make_caches(model.config, blocks),
                            metadata([list(range(blocks))], [0], [len(ids)], self.block_size, [1]),
                            torch.arange(len(ids)), lora_slots=torch.full((len(ids),), slot))
            merged = self.prefill(self.make_model(weights=merged_weights(weights, adapter)), ids)
            assert (merged - base).abs().max().item() > 1e-2, "the adapter must change the logits"
            torch.testing.assert_close(ours, merged, atol=1e-4, rtol=0)

    def test_a_mixed_lora_batch_gives_each_row_its_own_logits(self) -> None:
        """Two adapters and the base model in one batch, then decode steps: each sequence's logits are
        those of its own single run; all -1 is the base model, bit for bit."""
        weights = self.make_weights(self.make_config())
        model, _ = self.lora_model(weights)
        bs, length = self.block_size, self.prompt_length
        prompts = [self.prompt(model.config, seed) for seed in (3, 4, 5)]
        slots = [0, -1, 2]
        count = -(-(length + 2) // bs)
        tables = [list(range(i * count, (i + 1) * count)) for i in range(3)]
        attention, mixer = self.make_attention(model), self.make_mixer(model)
        caches = self.make_caches(model.config, 3 * count)
        ids = [token for prompt in prompts for token in prompt]
        row_slots = torch.tensor([slot for slot in slots for _ in range(length)])
        last = torch.tensor([length - 1, 2 * length - 1, 3 * length - 1])
        batched = [self.run(model, ids, torch.arange(length).repeat(3), caches,
                            metadata(tables, [0, 0, 0], [length] * 3, bs, [0, 1, 2]), last, attention, mixer,
                            row_slots)]
        steps = [[prompt[0] for prompt in prompts], [prompt[1] for prompt in prompts]]
        for step, tokens in enumerate(steps):
            batched.append(self.run(model, tokens, torch.full((3,), length + step), caches,
                                    metadata(tables, [length + step] * 3, [1, 1, 1], bs, [0, 1, 2]), torch.arange(3),
                                    attention, mixer, torch.tensor(slots)))
        for row, (prompt, slot) in enumerate(zip(prompts, slots, strict=True)):
            single_caches = self.make_caches(model.config, count)
            table = [list(range(count))]
            single = [self.run(model, prompt, torch.arange(length), single_caches,
                               metadata(table, [0], [length], bs, [0]), torch.tensor([length - 1]), attention, mixer,
                               torch.full((length,), slot))]
            for step, tokens in enumerate(steps):
                single.append(self.run(model, tokens[row : row + 1], torch.tensor([length + step]), single_caches,
                                       metadata(table, [length + step], [1], bs, [0]), torch.tensor([0]),
                                       attention, mixer, torch.tensor([slot])))
            for got, alone in zip(batched, single, strict=True):
                torch.testing.assert_close(got[row : row + 1], alone, atol=1e-4, rtol=0)
        base = self.prefill(model, prompts[1])
        all_base = self.run(model, prompts[1], torch.arange(length), self.make_caches(model.config, count),
                            metadata([list(range(count))], [0], [length], bs, [1]), torch.arange(length),
                            lora_slots=torch.full((length,), -1))
        assert torch.equal(all_base, base)

    def test_lora_misuse_is_refused(self) -> None:
        weights = self.make_weights(self.make_config())
        model, adapters = self.lora_model(weights)
        ids = self.prompt(model.config)
        blocks = -(-len(ids) // self.block_size)

        def run(slot: int, target: CausalLM = model) -> torch.Tensor:
            return self.run(target, ids, torch.arange(len(ids)), self.make_caches(target.config, blocks),
                            metadata([list(range(blocks))], [0], [len(ids)], self.block_size, [1]),
                            torch.arange(len(ids)), lora_slots=torch.full((len(ids),), slot))

        with pytest.raises(LoRAAdapterError, match="slot 1, which holds no adapter"):
            run(1)
        model.unload_lora(2)
        with pytest.raises(LoRAAdapterError, match="slot 2, which holds no adapter"):
            run(2)
        with pytest.raises(LoRAAdapterError, match="outside -1"):
            run(3)
        with pytest.raises(LoRAAdapterError, match="above max_lora_rank = 8"):
            model.load_lora(1, random_adapter(self.impl.lora_targets(model.config), 9, 6))
        with pytest.raises(LoRAAdapterError, match="slot 3"):
            model.load_lora(3, adapters[0])
        with pytest.raises(LoRAAdapterError, match="not enabled"):
            run(0, self.make_model(weights=weights))

    def test_a_model_without_adapters_refuses_them(self) -> None:
        """An architecture with no ``lora_targets`` runs ``lora_slots`` of all -1 as the base model (bit for
        bit) and refuses rows naming a slot, and ``enable_lora``, with ``LoRAAdapterError``."""
        config = self.make_config()
        if self.impl.lora_targets(config):
            pytest.skip(f"{self.impl.__name__} serves LoRA adapters (the kit's other LoRA checks run)")
        model = self.make_model()
        ids = self.prompt(config)
        blocks = -(-len(ids) // self.block_size)

        def run(slot: int) -> torch.Tensor:
            return self.run(model, ids, torch.arange(len(ids)), self.make_caches(config, blocks),
                            metadata([list(range(blocks))], [0], [len(ids)], self.block_size, [1]),
                            torch.arange(len(ids)), lora_slots=torch.full((len(ids),), slot))

        assert torch.equal(run(-1), self.prefill(model, ids))
        with pytest.raises(LoRAAdapterError):
            run(0)
        with pytest.raises(LoRAAdapterError):
            model.enable_lora(LoRASettings(max_loras=1, max_lora_rank=8))

    def test_matches_the_reference_implementation(self) -> None:
        config = self.make_config()
        weights = self.make_weights(config)
        ids = self.prompt(config)
        reference = self.reference_logits(copy.deepcopy(dict(self.config_json)), weights, ids)
        if reference is None:
            pytest.skip("no reference_logits for this architecture")
        ours = self.prefill(self.make_model(weights=weights), ids)
        assert reference.shape == ours.shape
        assert (ours - reference.float()).abs().max().item() <= self.reference_atol


def transformers_logits(config_json: Mapping[str, Any], weights: Mapping[str, torch.Tensor],
                        ids: Sequence[int]) -> torch.Tensor:
    """float32 logits of transformers' model of ``config_json`` (its ``model_type`` picks the class;
    special token ids default to none, as the kit's vocabularies are small) on ``weights``, for
    :meth:`ModelConformance.reference_logits`; skips the test without transformers.

    Every weight must be a parameter of transformers' model and every parameter a weight, except an
    output head tied to the embedding.
    """
    transformers = pytest.importorskip("transformers")
    data = {"pad_token_id": None, "bos_token_id": None, "eos_token_id": None, **config_json}
    config = transformers.AutoConfig.for_model(data.pop("model_type"), **data)
    model = transformers.AutoModelForCausalLM.from_config(config).float().eval()
    missing, unexpected = model.load_state_dict(dict(weights), strict=False)
    assert not unexpected, f"transformers' model has no parameters {unexpected}"
    assert set(missing) <= {"lm_head.weight"} and (not missing or config.tie_word_embeddings), (
        f"the weights lack transformers' parameters {missing}")
    with torch.no_grad():
        logits: torch.Tensor = model(torch.tensor([list(ids)])).logits[0].float()
    return logits


def transformers_checkpoint_logits(config_json: Mapping[str, Any], weights: Mapping[str, torch.Tensor],
                                   ids: Sequence[int]) -> torch.Tensor:
    """:func:`transformers_logits` through a checkpoint folder: ``weights`` saved under their names
    with ``config_json`` and read back by ``from_pretrained``, which converts a checkpoint's layout to
    the model's (transformers 5 stacks per-expert matrices into 3-D parameters, for one). Every
    weight must be read and every parameter come from a weight, except a head tied to the embedding."""
    transformers = pytest.importorskip("transformers")
    from safetensors.torch import save_file

    with tempfile.TemporaryDirectory() as folder:
        data = {"pad_token_id": None, "bos_token_id": None, "eos_token_id": None, **config_json}
        (Path(folder) / "config.json").write_text(json.dumps(data))
        save_file({name: tensor.contiguous() for name, tensor in weights.items()},
                  str(Path(folder) / "model.safetensors"))
        model, info = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32,
                                                                        output_loading_info=True)
    assert not info["unexpected_keys"], f"transformers' model has no parameters {info['unexpected_keys']}"
    assert set(info["missing_keys"]) <= {"lm_head.weight"}, f"the weights lack {info['missing_keys']}"
    with torch.no_grad():
        logits: torch.Tensor = model.eval()(torch.tensor([list(ids)])).logits[0].float()
    return logits
