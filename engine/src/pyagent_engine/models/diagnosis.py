"""``pyagent doctor --model PATH``: whether a model file or folder can run here, and why not.

One :class:`~pyagent_core.records.DoctorCheck` row per question, each answered without reading a weight:
is the path a GGUF file or a checkpoint folder with its files; does an installed model plugin serve
its architecture (and read every config key it needs); can every tensor's block type be run (by the
linear kernel in its blocks, or dequantized at load); what its layers keep between steps (its cache
layout) and which engine features that rules out (prefix caching and speculative decoding for a model
with recurrent state, speculative decoding for one with other mixer layers); can its tokenizer be
built; does it carry a chat template. The architecture's plugin is imported (and with it torch) to
read the config.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from pyagent_core.errors import PyagentError
from pyagent_core.interfaces.cache import LatentKV, PagedKV, RecurrentState
from pyagent_core.interfaces.model import CausalLM, ModelConfig
from pyagent_core.records import DoctorCheck
from pyagent_engine.models.architectures import Architecture, find_architecture
from pyagent_engine.models.checkpoint import CONFIG_FILE, TOKENIZER_CONFIG_FILE, TOKENIZER_FILE
from pyagent_engine.models.gguf_file import gguf_config, open_gguf, read_metadata, supported_block_types
from pyagent_engine.models.gguf_tokenizer import build_gguf_tokenizer
from pyagent_engine.models.loader import resolve_model_path
from pyagent_engine.models.tokenizer import Tokenizer


def _guarded(name: str, check: Any) -> DoctorCheck:
    """``check()``'s row, or a failed row named ``name`` carrying the error it raised."""
    try:
        row: DoctorCheck = check()
    except PyagentError as exc:
        return DoctorCheck(name, False, str(exc))
    return row


def _caches(model_class: type[CausalLM], config: ModelConfig) -> DoctorCheck:
    """What the model's layers keep (its cache layout) and the engine features a recurrent state rules out."""
    layout = model_class.cache_layout(config)
    kinds = [(PagedKV, "paged KV"), (LatentKV, "latent KV (MLA)"), (RecurrentState, "recurrent state")]
    counts = [f"{what} on {n} layers" for kind, what in kinds
              if (n := sum(isinstance(layer, kind) for layer in layout.layers))]
    detail = ", ".join(counts) + f"; {layout.bytes_per_sequence()} bytes of state per sequence" * layout.stateful
    limits = layout.limits(model_class.mixer_families(config))
    if limits:
        detail += "; " + "; ".join(f"{feature}: off ({why})" for feature, why in limits.items())
    return DoctorCheck("model caches", True, detail)


def _block_types(counts: Counter[str]) -> DoctorCheck:
    """Whether every tensor type of a GGUF file can run (read dense or kept in the kernel's blocks)."""
    supported = supported_block_types()
    unsupported = sorted(t for t in counts if t not in supported)
    shown = ", ".join(f"{t} x{n}" for t, n in sorted(counts.items()))
    if unsupported:
        return DoctorCheck("model block types", False, f"{shown}; the linear kernel lacks {', '.join(unsupported)}",
                           f"supported: {', '.join(supported)}; requantize with llama.cpp's llama-quantize "
                           "--allow-requantize (e.g. to Q4_K_M)")
    return DoctorCheck("model block types", True, shown)


def _gguf_checks(path: Path) -> list[DoctorCheck]:
    reader = open_gguf(path)
    metadata = read_metadata(reader)
    where = str(path)

    found: list[tuple[Architecture, ModelConfig]] = []

    def config() -> DoctorCheck:
        architecture, cfg = gguf_config(metadata, {t.name for t in reader.tensors}, where)
        found.append((architecture, cfg))
        return DoctorCheck("model architecture", True, f"{architecture.spec.name} ({architecture.spec.impl}): "
                           f"{cfg.num_layers} layers, hidden {cfg.hidden_size}, {cfg.num_heads} heads")

    def tokenizer() -> DoctorCheck:
        backend = build_gguf_tokenizer(metadata, where)
        kind, pre = metadata.get("tokenizer.ggml.model"), metadata.get("tokenizer.ggml.pre")
        return DoctorCheck("model tokenizer", True, f"{kind}{f' (pre {pre})' if pre else ''}, "
                           f"{backend.get_vocab_size(with_added_tokens=True)} tokens")

    template = isinstance(metadata.get("tokenizer.chat_template"), str)
    return [
        DoctorCheck("model", True, f"{path} (GGUF, {len(reader.tensors)} tensors)"),
        _guarded("model architecture", config),
        *(_caches(architecture.model_class, cfg) for architecture, cfg in found),
        _block_types(Counter(t.tensor_type.name for t in reader.tensors)),
        _guarded("model tokenizer", tokenizer),
        DoctorCheck("model chat template", True, "yes" if template else "none (generate with --raw)"),
    ]


def _folder_checks(folder: Path) -> list[DoctorCheck]:
    files = {name: (folder / name).is_file() for name in (CONFIG_FILE, TOKENIZER_FILE)}
    shards = sorted(folder.glob("*.safetensors"))
    missing = [name for name, present in files.items() if not present] + ([] if shards else ["*.safetensors"])
    rows = [DoctorCheck("model", not missing, f"{folder} (checkpoint folder, {len(shards)} safetensors files)"
                        + (f"; it lacks {', '.join(missing)}" if missing else ""),
                        f"a checkpoint folder holds {CONFIG_FILE}, *.safetensors and {TOKENIZER_FILE}")]
    found: list[tuple[Architecture, ModelConfig]] = []

    def config() -> DoctorCheck:
        where = str(folder / CONFIG_FILE)
        try:
            data = json.loads((folder / CONFIG_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            return DoctorCheck("model architecture", False, f"cannot read {where}: {exc}")
        names = data.get("architectures") or []
        architecture = find_architecture(hf=[str(n) for n in names], where=where)
        cfg = architecture.model_class.config_from_hf(data, architecture.spec.name, where)
        found.append((architecture, cfg))
        return DoctorCheck("model architecture", True, f"{architecture.spec.name} ({', '.join(names)}): "
                           f"{cfg.num_layers} layers, hidden {cfg.hidden_size}, {cfg.num_heads} heads")

    def tokenizer() -> DoctorCheck:
        try:
            backend = Tokenizer.from_file(folder / TOKENIZER_FILE)
        except Exception as exc:  # tokenizers raises a bare Exception for a malformed file
            return DoctorCheck("model tokenizer", False, f"cannot read {folder / TOKENIZER_FILE}: {exc}")
        return DoctorCheck("model tokenizer", True, f"{TOKENIZER_FILE}, {backend.vocab_size} tokens")

    if files[CONFIG_FILE]:
        rows.append(_guarded("model architecture", config))
        rows.extend(_caches(architecture.model_class, cfg) for architecture, cfg in found)
    if files[TOKENIZER_FILE]:
        rows.append(_guarded("model tokenizer", tokenizer))
    template = (folder / TOKENIZER_CONFIG_FILE).is_file() and "chat_template" in (
        folder / TOKENIZER_CONFIG_FILE).read_text(encoding="utf-8")
    rows.append(DoctorCheck("model chat template", True, "yes" if template else "none (generate with --raw)"))
    return rows


def diagnose_model(path: str) -> list[DoctorCheck]:
    """The rows of ``pyagent doctor --model PATH``; a failed row says what cannot run and why."""
    try:
        source = resolve_model_path(path)
        return _folder_checks(source) if source.is_dir() else _gguf_checks(source)
    except PyagentError as exc:
        return [DoctorCheck("model", False, str(exc))]
