"""Checkpoints in memory and as Hugging Face folders (``config.json``, ``*.safetensors``, tokenizer files).

Weights are named as Hugging Face names them for the model's architecture (``model.embed_tokens.weight``,
``model.layers.0.self_attn.q_proj.weight``, ...), with the query/key rows in Hugging Face's order
(the halves that rotate-half RoPE pairs), whatever file they came from. The architecture's model
plugin (found through the registry, :mod:`pyagent_engine.models.architectures`) reads the config.
A GGUF's block-quantized matrices stay quantized (:class:`~pyagent_kernels.quantized.QuantizedWeight`);
a folder written with ``keep_quantized`` stores their GGUF blocks as ``uint8`` tensors, named in the
safetensors metadata (``quantized:<name>`` -> ``<format>/<in_features>/gguf``; ``<format>/<in_features>``
for rows in the exact product's layout).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from pyagent_core.errors import ModelFormatError
from pyagent_core.interfaces.model import ModelConfig, token_ids
from pyagent_core.registry import Registry
from pyagent_engine.models.architectures import Architecture, find_architecture
from pyagent_engine.models.chat_template import ChatTemplate
from pyagent_engine.models.tokenizer import Tokenizer
from pyagent_kernels.quantized import QuantizedWeight

CONFIG_FILE = "config.json"
GENERATION_CONFIG_FILE = "generation_config.json"
TOKENIZER_FILE = "tokenizer.json"
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"
WEIGHTS_FILE = "model.safetensors"
QUANTIZED_KEY = "quantized:"

#: A dense tensor, or a matrix kept in a GGUF block format.
Weight = torch.Tensor | QuantizedWeight


@attrs.frozen(eq=False)
class Checkpoint:
    """A model as read from disk, before it is laid out for the forward.

    Attributes:
        architecture: the model plugin that serves it.
        config: the model's hyper-parameters.
        weights: Hugging Face parameter name -> tensor (float32 for a GGUF, the stored dtype
            otherwise), or the :class:`QuantizedWeight` of a GGUF's block-quantized matrix.
        tokenizer: the model's tokenizer.
        chat_template: the model's chat template, or ``None`` if it has none.
    """

    architecture: Architecture
    config: ModelConfig
    weights: dict[str, Weight]
    tokenizer: Tokenizer
    chat_template: ChatTemplate | None


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise ModelFormatError(f"cannot read {path}: {error}") from None
    if not isinstance(data, dict):
        raise ModelFormatError(f"{path} must hold a JSON object, got {type(data).__name__}")
    return data


def _token_text(value: Any) -> str:
    """A special token of ``tokenizer_config.json``: a string or an ``AddedToken`` dict."""
    if isinstance(value, Mapping):
        return str(value.get("content", ""))
    return "" if value is None else str(value)


def _chat_template(tokenizer_config: Mapping[str, Any]) -> str | None:
    """The default template of ``tokenizer_config.json`` (a string or a list of named templates)."""
    template = tokenizer_config.get("chat_template")
    if isinstance(template, list):
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, Mapping)}
        template = named.get("default")
    return template if isinstance(template, str) else None


def _read_shard(shard: Path) -> dict[str, Weight]:
    """The tensors of one safetensors file, the quantized ones (named in its metadata) wrapped."""
    tensors = load_file(shard)
    with safe_open(str(shard), "pt") as file:
        metadata = file.metadata() or {}
    weights: dict[str, Weight] = dict(tensors)
    for key, value in metadata.items():
        if key.startswith(QUANTIZED_KEY):
            name = key.removeprefix(QUANTIZED_KEY)
            fmt, in_features, *stored = value.split("/")
            weights[name] = (QuantizedWeight.from_gguf(tensors[name], fmt, int(in_features)) if stored == ["gguf"]
                             else QuantizedWeight(tensors[name], fmt, int(in_features)))
    return weights


def read_checkpoint(folder: Path, registry: Registry | None = None) -> Checkpoint:
    """Read a checkpoint folder in Hugging Face layout, of an architecture a model plugin serves.

    Needs ``config.json``, one or more ``*.safetensors`` and ``tokenizer.json``; reads the chat
    template and special tokens from ``tokenizer_config.json`` and extra stop tokens from
    ``generation_config.json`` when present. Raises :class:`ModelFormatError` naming what is
    missing or unreadable, :class:`~pyagent_core.errors.UnsupportedModelError` for an architecture
    no installed plugin serves (``registry``: where to look; default: the installed plugins).
    """
    missing = [name for name in (CONFIG_FILE, TOKENIZER_FILE) if not (folder / name).is_file()]
    shards = sorted(folder.glob("*.safetensors"))
    if not shards:
        missing.append("*.safetensors")
    if missing:
        raise ModelFormatError(
            f"{folder} is not a model checkpoint: it lacks {', '.join(missing)} (a checkpoint folder holds "
            f"{CONFIG_FILE}, *.safetensors and {TOKENIZER_FILE}; or pass a .gguf file)"
        )
    where = str(folder / CONFIG_FILE)
    data = _read_json(folder / CONFIG_FILE)
    names = data.get("architectures") or []
    architecture = find_architecture(hf=[str(n) for n in names] if isinstance(names, list) else [str(names)],
                                     where=where, registry=registry)
    config = architecture.model_class.config_from_hf(data, architecture.spec.name, where)
    if config.name == where:
        config = attrs.evolve(config, name=folder.name)
    if (folder / GENERATION_CONFIG_FILE).is_file():
        eos = _read_json(folder / GENERATION_CONFIG_FILE).get("eos_token_id")
        extra = token_ids(eos, "eos_token_id", str(folder / GENERATION_CONFIG_FILE))
        config = attrs.evolve(config, eos_token_ids=tuple(dict.fromkeys([*config.eos_token_ids, *extra])))
    weights: dict[str, Weight] = {}
    for shard in shards:
        try:
            weights.update(_read_shard(shard))
        except Exception as error:  # safetensors raises its own error types for a damaged file
            raise ModelFormatError(f"cannot read weights from {shard}: {error}") from None
    try:
        tokenizer = Tokenizer.from_file(folder / TOKENIZER_FILE)
    except Exception as error:  # tokenizers raises a bare Exception for a malformed file
        raise ModelFormatError(f"cannot read {folder / TOKENIZER_FILE}: {error}") from None
    tokenizer_config = (
        _read_json(folder / TOKENIZER_CONFIG_FILE) if (folder / TOKENIZER_CONFIG_FILE).is_file() else {}
    )
    source = _chat_template(tokenizer_config)
    template = None
    if source is not None:
        template = ChatTemplate(source, bos_token=_token_text(tokenizer_config.get("bos_token")),
                                eos_token=_token_text(tokenizer_config.get("eos_token")))
    return Checkpoint(architecture=architecture, config=config, weights=weights, tokenizer=tokenizer,
                      chat_template=template)


def write_checkpoint(checkpoint: Checkpoint, folder: Path, *, keep_quantized: bool = False) -> None:
    """Write ``checkpoint`` as a Hugging Face folder that :func:`read_checkpoint` (and transformers) read.

    Files: ``config.json``, ``model.safetensors`` (one shard), ``tokenizer.json`` and
    ``tokenizer_config.json`` (chat template and special tokens). ``folder`` is created if needed.
    Quantized weights are written dequantized to float32, or with ``keep_quantized`` as their GGUF
    blocks (or, for rows of the exact layout alone, their packed bytes), which only
    :func:`read_checkpoint` understands.
    """
    folder.mkdir(parents=True, exist_ok=True)
    config = checkpoint.config
    hf_config = checkpoint.architecture.model_class.hf_config(config)
    (folder / CONFIG_FILE).write_text(json.dumps(hf_config, indent=2), encoding="utf-8")
    tensors, metadata = {}, {"format": "pt"}
    for name, weight in checkpoint.weights.items():
        if isinstance(weight, torch.Tensor):
            tensors[name] = weight.contiguous()
        elif keep_quantized and weight.gguf_parts is not None and len(weight.gguf_parts) == 1:
            fmt, blocks = weight.gguf_parts[0]  # the file's blocks, which both precisions read
            tensors[name] = blocks
            metadata[QUANTIZED_KEY + name] = f"{fmt}/{weight.in_features}/gguf"
        elif keep_quantized:
            tensors[name] = weight.packed
            metadata[QUANTIZED_KEY + name] = f"{weight.format}/{weight.in_features}"
        else:
            tensors[name] = weight.dequantize()
    save_file(tensors, str(folder / WEIGHTS_FILE), metadata=metadata)
    checkpoint.tokenizer.save(folder / TOKENIZER_FILE)
    template = checkpoint.chat_template
    tokenizer_config = {"tokenizer_class": "PreTrainedTokenizerFast", "clean_up_tokenization_spaces": False}
    if template is not None:
        tokenizer_config |= {"chat_template": template.source, "bos_token": template.bos_token,
                             "eos_token": template.eos_token}
    (folder / TOKENIZER_CONFIG_FILE).write_text(json.dumps(tokenizer_config, indent=2), encoding="utf-8")
