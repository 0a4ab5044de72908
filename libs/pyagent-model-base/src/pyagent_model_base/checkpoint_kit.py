"""Kit: an architecture from a tiny transformers checkpoint to greedy tokens, through its declared caches.

Subclass :class:`CheckpointKit` in a model plugin's tests: name the class (``impl``, ``spec``),
transformers' ``model_type``, a tiny ``config`` (a few layers, hidden 64) and how llama.cpp's
converter writes the architecture (:attr:`CheckpointKit.write_gguf`, with the ``gguf`` package's
writer). Once per test class the kit builds transformers' own model of that config on random
weights (every parameter and float buffer, seeded), saves it as a safetensors folder and as a float32
GGUF file, each with the same placeholder vocabulary (:func:`placeholder_vocabulary`: printable
characters, so a host can load either with its tokenizer), and loads both into the plugin's class:
the folder by ``config_from_hf`` and its safetensors, the GGUF file by ``config_from_gguf`` and the
class's GGUF hooks (tensor names, rows permuted by the converter, offsets,
:meth:`~pyagent_core.interfaces.model.CausalLM.gguf_restore`).

:class:`GreedyHost` runs them as an engine would, without one: it allocates the caches the class's
:meth:`~pyagent_core.interfaces.model.CausalLM.cache_layout` declares (blocks and state slots
scattered), prefills each prompt in chunks, decodes greedily on the mixer backend a host would pick
(:func:`default_mixer`), and can start other sequences in the same steps, so batches mix prefill
chunks and decode steps. The checks: float32 logits of the whole prompt within ``logits_atol`` of
transformers'; :attr:`CheckpointKit.greedy_tokens` greedy tokens equal to transformers' (one full
forward per token) from the folder and from the GGUF file, the prompt prefilled in chunks that cross
block boundaries; the GGUF file's config and weights equal to the folder's; a sequence's logits at
every step the same within 1e-5 alone and batched with others; the greedy tokens again with every
installed mixer backend of the model's families, scanning in chunks.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import attrs
import gguf
import numpy as np
import pytest
import torch
from gguf.quants import dequantize
from tokenizers import Tokenizer, decoders, models, pre_tokenizers

from pyagent_core.interfaces.attention import AttentionBackend
from pyagent_core.interfaces.mixer import MixerBackend, MixerContext
from pyagent_core.interfaces.model import CausalLM, ModelContext
from pyagent_core.lazy import import_impl
from pyagent_core.options import validate_options
from pyagent_core.registry import Backend, get_registry
from pyagent_core.testing.mixer import ReferenceMixer
from pyagent_core.testing.model import metadata, random_weights
from pyagent_core.testing.scaffolded import import_template
from pyagent_core.types import ModelSpec

#: The vocabulary of the kit's checkpoints (prompts are token ids; the tokenizer is a placeholder).
VOCAB_SIZE = 128


#: Printable ASCII characters, which GPT-2's byte alphabet spells as themselves.
PRINTABLE = [chr(c) for c in range(33, 127)]


def placeholder_vocabulary(vocab_size: int) -> tuple[list[str], list[str]]:
    """The kit's byte-level vocabulary of ``vocab_size`` (at most 188) tokens and its merges: the
    printable ASCII characters, then each doubled (``"!!"``, merged from ``"! !"``)."""
    doubles = PRINTABLE[:vocab_size - len(PRINTABLE)]
    return [*PRINTABLE, *(c + c for c in doubles)][:vocab_size], [f"{c} {c}" for c in doubles]


def placeholder_tokenizer(vocab_size: int) -> Tokenizer:
    """A byte-level BPE tokenizer of :func:`placeholder_vocabulary`, as a GGUF file's vocabulary written
    by :func:`gguf_writer` builds it (so text encodes and decodes alike from the folder and the file)."""
    tokens, merges = placeholder_vocabulary(vocab_size)
    tokenizer = Tokenizer(models.BPE(vocab={token: i for i, token in enumerate(tokens)},
                                     merges=[tuple(m.split(" ")) for m in merges]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tokenizer.decoder = decoders.ByteLevel()
    return tokenizer


def build_mixer(backend: Backend[Any], options: Mapping[str, Any], dtype: str, block_size: int) -> MixerBackend:
    """The installed mixer ``backend`` built with ``options`` (the rest defaults)."""
    mixer: MixerBackend = import_impl(backend.spec.impl)(
        validate_options(backend.spec.options, options, backend.name), MixerContext(dtype=dtype, block_size=block_size))
    return mixer


def default_mixer(model: CausalLM, block_size: int) -> MixerBackend | None:
    """The mixer a host would build for ``model``: the installed backend of highest priority that computes
    the model's families (found through the registry), else the mixer kit's float64 reference; ``None``
    for a model that names no family."""
    families = set(type(model).mixer_families(model.config))
    if not families:
        return None
    fitting = [b for b in get_registry().available("mixer") if families <= set(b.spec.families)]
    if fitting:
        return build_mixer(max(fitting, key=lambda b: b.spec.priority), {}, model.context.dtype, block_size)
    return ReferenceMixer({}, MixerContext(dtype=model.context.dtype, block_size=block_size))


class GreedyHost:
    """A minimal host for one model: declared caches, chunked prefill, greedy decoding, mixed batches.

    Sequence ``i`` gets the blocks ``i, i + n, i + 2n, ...`` (``n`` sequences: interleaved) and the
    state slot ``n - 1 - i``.

    Args:
        model: the model.
        num_seqs: most sequences at once.
        max_len: the longest sequence (prompt and generated tokens).
        block_size: tokens per cache block.
        mixer: the mixer backend (default: :func:`default_mixer`).
    """

    def __init__(self, model: CausalLM, num_seqs: int, max_len: int, block_size: int = 4,
                 mixer: MixerBackend | None = None) -> None:
        config = model.config
        self.model, self.block_size, self.num_seqs = model, block_size, num_seqs
        per = -(-max_len // block_size)
        self.tables = [[i + num_seqs * j for j in range(per)] for i in range(num_seqs)]
        self.caches = type(model).cache_layout(config).allocate(per * num_seqs, block_size, num_seqs,
                                                               getattr(torch, model.context.dtype))
        context = type(model).attention_context(config, block_size, model.context.dtype)
        self.attention: AttentionBackend = import_template("attention").impl.KitReference({}, context)
        self.mixer = mixer or default_mixer(model, block_size)

    def step(self, work: Sequence[tuple[int, Sequence[int], int]], every_row: bool = False) -> torch.Tensor:
        """One forward over ``work``: ``(sequence, new token ids, tokens it holds before them)`` each;
        returns the logits of each sequence's last new token (``every_row``: of every new token)."""
        ids = [t for _, tokens, _ in work for t in tokens]
        counts = [len(tokens) for _, tokens, _ in work]
        positions = torch.cat([torch.arange(done, done + len(tokens)) for _, tokens, done in work])
        md = metadata([self.tables[s] for s, _, _ in work], [done for _, _, done in work], counts, self.block_size,
                      [self.num_seqs - 1 - s for s, _, _ in work])
        rows = torch.arange(len(ids)) if every_row else torch.tensor(np.cumsum(counts) - 1)
        args = (torch.tensor(ids), positions, self.caches, md, self.attention, rows)
        if self.mixer is not None:
            return self.model.forward(*args, mixer=self.mixer)
        return self.model.forward(*args)

    def generate(self, prompts: Sequence[Sequence[int]], new_tokens: int, chunk: int,
                 starts: Sequence[int] | None = None) -> tuple[list[list[int]], list[torch.Tensor]]:
        """Greedy continuations of ``prompts`` (sequence ``i`` joins at step ``starts[i]``), each prompt
        prefilled ``chunk`` tokens per step: ``(new tokens, logits of each step)`` per sequence."""
        starts = starts or [0] * len(prompts)
        tokens: list[list[int]] = [[] for _ in prompts]
        logits: list[list[torch.Tensor]] = [[] for _ in prompts]
        done = [0] * len(prompts)
        step = 0
        while any(len(t) < new_tokens for t in tokens):
            work = []
            for s, prompt in enumerate(prompts):
                if step < starts[s] or len(tokens[s]) >= new_tokens:
                    continue
                pending = list(prompt[done[s]:done[s] + chunk]) if done[s] < len(prompt) else tokens[s][-1:]
                work.append((s, pending, done[s]))
            if work:
                out = self.step(work)
                for row, (s, pending, _) in enumerate(work):
                    done[s] += len(pending)
                    if done[s] >= len(prompts[s]):
                        logits[s].append(out[row])
                        tokens[s].append(int(out[row].argmax()))
            step += 1
        return tokens, [torch.stack(rows) for rows in logits]


def read_gguf_float(path: Path, model_class: type[CausalLM], architecture: str) -> tuple[Any, dict[str, Any]]:
    """``(config, weights)`` of a float GGUF file through ``model_class``'s GGUF hooks: its metadata
    read by ``config_from_gguf``; its tensors renamed by ``gguf_tensor_names``, rows the converter
    permuted restored, offsets subtracted, then ``gguf_restore`` (the steps a host's GGUF reader takes)."""
    reader = gguf.GGUFReader(path)
    fields = {name: field.contents() for name, field in reader.fields.items()}
    config = model_class.config_from_gguf(fields, {t.name for t in reader.tensors}, architecture, str(path))
    names = model_class.gguf_tensor_names(config)
    permuted, offsets = model_class.gguf_permuted_heads(config), model_class.gguf_weight_offsets(config)
    weights: dict[str, Any] = {}
    for tensor in reader.tensors:
        name = names.get(tensor.name)
        if name is None:
            continue
        shape = tuple(reversed(tensor.shape.tolist()))
        values = dequantize(tensor.data, tensor.tensor_type).reshape(shape)
        if name in permuted:  # interleaved pairs back to halves, per head
            heads = permuted[name]
            values = values.reshape(heads, shape[0] // heads // 2, 2, *shape[1:]).swapaxes(1, 2).reshape(shape)
        weights[name] = torch.from_numpy(np.array(values, dtype=np.float32)) - offsets.get(name, 0.0)
    return config, model_class.gguf_restore(config, weights)


def _float32_values(values: Any) -> Any:
    """``values`` with every float rounded to float32 (as GGUF metadata stores them)."""
    if isinstance(values, float):
        return float(np.float32(values))
    if isinstance(values, Mapping):
        return {k: _float32_values(v) for k, v in values.items()}
    if isinstance(values, tuple | list):
        return [_float32_values(v) for v in values]
    return values


def gguf_name_map(arch: str, num_layers: int) -> gguf.TensorNameMap:
    """The ``gguf`` package's tensor-name map of the GGUF architecture ``arch``."""
    return gguf.get_tensor_name_map(next(a for a, n in gguf.MODEL_ARCH_NAMES.items() if n == arch), num_layers)


def gguf_writer(path: Path, arch: str, config: Mapping[str, Any]) -> gguf.GGUFWriter:
    """A writer of ``arch`` with what every converted file holds: name, block count, the byte-level
    vocabulary of :func:`placeholder_vocabulary` (``config``'s ``vocab_size``) and the end-of-sequence token."""
    writer = gguf.GGUFWriter(path, arch=arch)
    writer.add_name("tiny " + arch)
    writer.add_block_count(config["num_hidden_layers"])
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("gpt-2")
    tokens, merges = placeholder_vocabulary(config["vocab_size"])
    writer.add_token_list(tokens)
    writer.add_token_types([gguf.TokenType.NORMAL] * len(tokens))
    writer.add_token_merges(merges)
    writer.add_eos_token_id(config["eos_token_id"])
    return writer


def stacked_experts(stored: Mapping[str, torch.Tensor], layer: int, experts: int) -> dict[str, np.ndarray]:
    """Layer ``layer``'s per-expert matrices (``model.layers.N.mlp.experts.E.*_proj.weight``) stacked
    into the GGUF tensors ``blk.N.ffn_{gate,up,down}_exps.weight``, as llama.cpp's converter merges them."""
    return {f"blk.{layer}.ffn_{short}_exps.weight": torch.stack(
        [stored[f"model.layers.{layer}.mlp.experts.{e}.{short}_proj.weight"] for e in range(experts)]).numpy()
        for short in ("gate", "up", "down")}


def mamba_gguf_tensor(name: str, values: np.ndarray, groups: int, norm: str) -> tuple[str, np.ndarray]:
    """A Mamba2 mixer tensor as llama.cpp's converter writes it: ``dt_bias`` named ``dt_proj.bias``, the
    convolution squeezed to ``[channels, width]``, ``A`` stored as ``-exp(A_log)`` and ``D`` as columns,
    the gated norm (the weight whose name ends with ``norm``) split into ``groups`` rows; returns the
    Hugging Face name the GGUF name map knows and the values (other tensors as they are)."""
    if name.endswith(".dt_bias"):
        name = name.removesuffix(".dt_bias") + ".dt_proj.bias"
    if name.endswith("conv1d.weight"):
        values = values.squeeze()
    elif name.endswith(".A_log"):
        values = -np.exp(values).reshape(-1, 1)
    elif name.endswith(".D"):
        values = values.reshape(-1, 1)
    elif name.endswith(norm):
        values = values.reshape(groups, -1)
    return name, values


def finish_gguf(writer: gguf.GGUFWriter, tensors: Mapping[str, np.ndarray]) -> None:
    """Add ``tensors`` (GGUF name -> float32 array) and write the file."""
    for name, values in tensors.items():
        writer.add_tensor(name, np.ascontiguousarray(values, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


class CheckpointKit:
    """An architecture end to end from a tiny transformers checkpoint (module docstring).

    Attributes:
        impl: the plugin's :class:`CausalLM` class. spec: its spec record.
        model_type: transformers' ``model_type``.
        config: the tiny model's hyper-parameters (the kit adds the vocabulary and special tokens).
        logits_atol: largest difference allowed between our float32 logits and transformers'.
        greedy_tokens: how many greedy tokens must equal transformers'.
        prompt_length: the prompt's tokens (random ids).
        chunk: prompt tokens per prefill step (the prompt crosses several chunks and blocks).
        write_gguf: ``write_gguf(folder, path)`` writes the checkpoint folder as a float32 GGUF file, as
            llama.cpp's converter writes the architecture (its metadata keys, tensor names and forms);
            set it with ``staticmethod``.
    """

    impl: ClassVar[type[CausalLM]]
    spec: ClassVar[ModelSpec]
    model_type: ClassVar[str]
    config: ClassVar[Mapping[str, Any]]
    logits_atol: ClassVar[float] = 1e-4
    greedy_tokens: ClassVar[int] = 32
    prompt_length: ClassVar[int] = 24
    chunk: ClassVar[int] = 7
    write_gguf: ClassVar[Callable[[Path, Path], None]]

    @classmethod
    def hf_settings(cls) -> dict[str, Any]:
        """The tiny config with the kit's vocabulary and tokens."""
        return {**cls.config, "vocab_size": VOCAB_SIZE, "eos_token_id": 1, "bos_token_id": None, "pad_token_id": None}

    @pytest.fixture(scope="class")
    @classmethod
    def checkpoint_dir(cls, tmp_path_factory: pytest.TempPathFactory) -> Path:
        """transformers' model on random weights (every parameter and float buffer), saved with the
        placeholder tokenizer."""
        transformers = pytest.importorskip("transformers")
        hf_config = transformers.AutoConfig.for_model(cls.model_type, **cls.hf_settings())
        torch.manual_seed(0)
        model = transformers.AutoModelForCausalLM.from_config(hf_config).float().eval()
        state = {name: tensor for name, tensor in model.state_dict().items() if tensor.is_floating_point()}
        model.load_state_dict(random_weights({name: tuple(t.shape) for name, t in state.items()}), strict=False)
        folder = tmp_path_factory.mktemp(cls.model_type)
        model.save_pretrained(folder, safe_serialization=True)
        cls.save_tokenizer(folder)
        return folder

    @classmethod
    def save_tokenizer(cls, folder: Path) -> None:
        """Write the checkpoint's tokenizer files into ``folder`` (the placeholder vocabulary's ``tokenizer.json``)."""
        placeholder_tokenizer(VOCAB_SIZE).save(str(folder / "tokenizer.json"))

    @pytest.fixture(scope="class")
    @classmethod
    def gguf_path(cls, checkpoint_dir: Path) -> Path:
        """The same weights as a float32 GGUF file."""
        path = checkpoint_dir.parent / f"{cls.model_type}-tiny.gguf"
        cls.write_gguf(checkpoint_dir, path)
        return path

    @pytest.fixture(scope="class")
    @classmethod
    def hf_model(cls, checkpoint_dir: Path) -> Any:
        """transformers' model of the folder, float32."""
        transformers = pytest.importorskip("transformers")
        return transformers.AutoModelForCausalLM.from_pretrained(checkpoint_dir, dtype=torch.float32).eval()

    @pytest.fixture(scope="class")
    @classmethod
    def prompt_ids(cls) -> list[int]:
        """Random token ids (not the end-of-sequence token)."""
        generator = torch.Generator().manual_seed(3)
        return torch.randint(2, VOCAB_SIZE, (cls.prompt_length,), generator=generator).tolist()

    @pytest.fixture(scope="class")
    @classmethod
    def hf_greedy(cls, hf_model: Any, prompt_ids: list[int]) -> list[int]:
        """transformers' greedy continuation, one full forward per token (no cache)."""
        ids = list(prompt_ids)
        with torch.no_grad():
            for _ in range(cls.greedy_tokens):
                ids.append(int(hf_model(torch.tensor([ids])).logits[0, -1].argmax()))
        return ids[len(prompt_ids):]

    @classmethod
    def folder_config(cls, folder: Path) -> Any:
        """The plugin's config of a checkpoint folder (its ``config.json`` read by ``config_from_hf``)."""
        return cls.impl.config_from_hf(json.loads((folder / "config.json").read_text()), cls.spec.name,
                                       str(folder / "config.json"))

    def load_folder(self, folder: Path, dtype: str = "float32") -> CausalLM:
        """The plugin's model of a checkpoint folder."""
        from safetensors.torch import load_file

        return self.impl({}, ModelContext(config=self.folder_config(folder), weights=load_file(
            folder / "model.safetensors"), dtype=dtype))

    def load_gguf(self, path: Path) -> CausalLM:
        """The plugin's model of a float GGUF file (:func:`read_gguf_float`)."""
        config, weights = read_gguf_float(path, self.impl, self.spec.name)
        return self.impl({}, ModelContext(config=config, weights=weights))

    def greedy(self, model: CausalLM, prompt_ids: list[int]) -> list[int]:
        """The model's greedy continuation, the prompt prefilled in chunks of :attr:`chunk`."""
        host = GreedyHost(model, 1, len(prompt_ids) + self.greedy_tokens)
        tokens, _ = host.generate([prompt_ids], self.greedy_tokens, self.chunk)
        return tokens[0]

    def test_the_spec_says_whether_the_layout_keeps_state(self, checkpoint_dir: Path) -> None:
        """``ModelSpec.recurrent_state`` (what listings show without importing the model) is the layout's."""
        assert self.spec.recurrent_state == self.impl.cache_layout(self.load_folder(checkpoint_dir).config).stateful

    def test_folder_logits_match_transformers(self, checkpoint_dir: Path, hf_model: Any,
                                              prompt_ids: list[int]) -> None:
        logits = GreedyHost(self.load_folder(checkpoint_dir), 1, len(prompt_ids)).step([(0, prompt_ids, 0)], True)
        with torch.no_grad():
            reference = hf_model(torch.tensor([prompt_ids])).logits[0].float()
        assert (logits - reference).abs().max().item() <= self.logits_atol

    def test_folder_greedy_tokens_match_transformers(self, checkpoint_dir: Path, prompt_ids: list[int],
                                                     hf_greedy: list[int]) -> None:
        assert self.greedy(self.load_folder(checkpoint_dir), prompt_ids) == hf_greedy

    def test_gguf_config_and_weights_are_the_folders(self, checkpoint_dir: Path, gguf_path: Path) -> None:
        from safetensors.torch import load_file

        config, weights = read_gguf_float(gguf_path, self.impl, self.spec.name)
        folder = self.load_folder(checkpoint_dir).config
        ours, theirs = (_float32_values(attrs.asdict(c)) for c in (attrs.evolve(config, name=folder.name), folder))
        assert ours == theirs, f"the GGUF file's config differs from the folder's: {ours} != {theirs}"
        stored = load_file(checkpoint_dir / "model.safetensors")
        shapes = self.impl.weight_shapes(folder)
        assert set(weights) == set(shapes)
        for name in shapes:
            torch.testing.assert_close(weights[name], stored[name].float(), atol=1e-6, rtol=1e-6,
                                       msg=lambda m, n=name: f"{n}: {m}")

    def test_gguf_greedy_tokens_match_transformers(self, gguf_path: Path, prompt_ids: list[int],
                                                   hf_greedy: list[int]) -> None:
        assert self.greedy(self.load_gguf(gguf_path), prompt_ids) == hf_greedy

    def test_a_sequence_gives_the_same_logits_alone_and_batched(self, checkpoint_dir: Path,
                                                                prompt_ids: list[int]) -> None:
        """The prompt alone, and started second among three sequences that join at steps 0, 2 and 3
        (so its prefill chunks share steps with another's decode steps): equal logits and tokens."""
        model = self.load_folder(checkpoint_dir)
        length = len(prompt_ids) + self.greedy_tokens
        alone = GreedyHost(model, 1, length).generate([prompt_ids], 8, self.chunk)
        others = [prompt_ids[5:] + prompt_ids[:5], prompt_ids[::-1]]
        batched = GreedyHost(model, 3, length).generate([others[0], prompt_ids, others[1]], 8, self.chunk,
                                                        [0, 2, 3])
        assert batched[0][1] == alone[0][0]
        torch.testing.assert_close(batched[1][1], alone[1][0], atol=1e-5, rtol=0)

    def test_every_installed_mixer_backend_gives_the_tokens(self, checkpoint_dir: Path, prompt_ids: list[int],
                                                            hf_greedy: list[int]) -> None:
        """Each installed mixer backend with the model's families (found through the registry, as a host
        finds it), its chunks 8 tokens, scanning every step of 4 tokens or more in chunks, and the prompt
        prefilled 20 tokens a step (so a step's scan spans chunks): transformers' greedy tokens."""
        model = self.load_folder(checkpoint_dir)
        families = set(self.impl.mixer_families(model.config))
        if not families:
            pytest.skip(f"{self.spec.name} calls no mixer")
        backends = [b for b in get_registry().available("mixer") if families <= set(b.spec.families)]
        if not backends:
            pytest.skip(f"no installed mixer backend computes {sorted(families)}")
        for backend in backends:
            chunking = {k: v for k, v in {"chunk_size": 8, "recurrent_below": 4}.items() if k in backend.spec.options}
            mixer = build_mixer(backend, chunking, "float32", 4)
            host = GreedyHost(model, 1, len(prompt_ids) + self.greedy_tokens, mixer=mixer)
            tokens = host.generate([prompt_ids], self.greedy_tokens, 20)[0][0]
            assert tokens == hf_greedy, f"mixer backend {backend.name}"
