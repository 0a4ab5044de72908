"""llama.cpp's LoRA adapters: a GGUF file with ``general.type = adapter``, read and written.

The layout llama.cpp's ``convert_lora_to_gguf.py`` writes and ``llama-adapter.cpp`` reads: metadata
``general.architecture`` (the base model's), ``general.type = "adapter"``, ``adapter.type = "lora"``
and ``adapter.lora.alpha`` (float32); per adapted base tensor ``<name>.lora_a`` (``[rank, in]``,
GGUF dims ``in x rank``) and ``<name>.lora_b`` (``[out, rank]``), the base tensor named as in the
model's GGUF (``blk.0.attn_q.weight``). The converter reorders the rows of ``lora_b`` as it reorders
the base weight's (Llama's query and key heads, for interleaved RoPE); reading restores Hugging
Face's order. llama.cpp scales each pair by ``alpha / rank`` (by 1 when alpha is 0 or absent), which
is what this reader does.

The converter writes PEFT's ``lora_alpha`` as it is, so an rsLoRA adapter (scale
``alpha / sqrt(rank)``) converted by it runs with another scale in llama.cpp; :func:`write_gguf_adapter`
writes the alpha that gives each pair its own scale (``scale * rank``), which needs one such alpha
for the whole adapter.

Refused: another ``general.type`` or ``adapter.type``, another architecture, activated LoRA
(``adapter.alora.invocation_tokens``), norm tensors (llama.cpp skips them; pyagent does not drop
part of an adapter silently), and any tensor that is not half of a pair.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import torch
from gguf.quants import dequantize

from pyagent_core.errors import LoRAAdapterError
from pyagent_core.interfaces.lora import LoRAAdapter, LoRAWeight
from pyagent_core.interfaces.model import ModelConfig
from pyagent_model_base.lora.checks import beyond_last_layer, lora_weight

_BLOCK = re.compile(r"^blk\.(\d+)\.")


def rope_rows(matrix: np.ndarray, heads: int, *, to_gguf: bool) -> np.ndarray:
    """``matrix``'s rows reordered per head as llama.cpp's converter does (``to_gguf``: Hugging Face's
    ``[first half, second half]`` of each head to interleaved pairs) or back."""
    rows = matrix.shape[0]
    split = (heads, 2, rows // heads // 2) if to_gguf else (heads, rows // heads // 2, 2)
    return matrix.reshape(*split, *matrix.shape[1:]).swapaxes(1, 2).reshape(matrix.shape)


def _metadata(path: Path) -> tuple[gguf.GGUFReader, dict[str, Any]]:
    try:
        reader = gguf.GGUFReader(path)
    except (ValueError, IndexError, KeyError, UnicodeDecodeError) as error:
        raise LoRAAdapterError(f"{path} is a truncated or corrupt GGUF file (reading it failed with: {error}); "
                               "convert the adapter again") from None
    end = max((t.data_offset + t.n_bytes for t in reader.tensors), default=reader.data_offset)
    if end > path.stat().st_size:
        raise LoRAAdapterError(f"{path} is a truncated GGUF file: its tensors need {end} bytes, it has "
                               f"{path.stat().st_size}; convert the adapter again")
    return reader, {name: field.contents() for name, field in reader.fields.items()}


def _check_metadata(path: Path, metadata: Mapping[str, Any], gguf_arch: str) -> float:
    """The file's alpha, after checking it is a LoRA adapter for ``gguf_arch``."""
    kind = metadata.get(gguf.Keys.General.TYPE)
    if kind != gguf.GGUFType.ADAPTER:
        what = "a model, not an adapter: load it as the model" if kind == gguf.GGUFType.MODEL else \
            f"general.type {kind!r}, not 'adapter'"
        raise LoRAAdapterError(f"{path} is {what}; a LoRA GGUF comes from llama.cpp's convert_lora_to_gguf.py")
    adapter_type = metadata.get(gguf.Keys.Adapter.TYPE)
    if adapter_type != "lora":
        raise LoRAAdapterError(f"{path}: {gguf.Keys.Adapter.TYPE} is {adapter_type!r}; pyagent serves 'lora' adapters")
    arch = metadata.get(gguf.Keys.General.ARCHITECTURE)
    if arch != gguf_arch:
        raise LoRAAdapterError(f"{path} is an adapter for {arch!r} models, but the model is {gguf_arch!r}: use it "
                               "with the model it was made for")
    if metadata.get(gguf.Keys.Adapter.ALORA_INVOCATION_TOKENS):
        raise LoRAAdapterError(f"{path} is an activated LoRA ({gguf.Keys.Adapter.ALORA_INVOCATION_TOKENS}), which "
                               "pyagent does not serve")
    alpha = metadata.get(gguf.Keys.Adapter.LORA_ALPHA, 0.0)
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not math.isfinite(alpha):
        raise LoRAAdapterError(f"{path}: {gguf.Keys.Adapter.LORA_ALPHA} must be a number, got {alpha!r}")
    return float(alpha)


def _values(tensor: gguf.ReaderTensor, path: Path) -> torch.Tensor:
    """float32 values of a float or block tensor, in its numpy (row-major) shape."""
    try:
        values = dequantize(tensor.data, tensor.tensor_type)
    except NotImplementedError:
        raise LoRAAdapterError(f"{path}: tensor {tensor.name!r} is stored as {tensor.tensor_type.name}, which the "
                               "gguf package cannot decode; convert the adapter to f32, f16, bf16 or q8_0") from None
    shape = tuple(reversed(tensor.shape.tolist()))
    return torch.from_numpy(np.require(values.reshape(shape), np.float32, ["C", "W"]))


def read_gguf_weights(path: Path, targets: Mapping[str, tuple[int, int]], config: ModelConfig, *, gguf_arch: str,
                      gguf_names: Mapping[str, str], permuted_heads: Mapping[str, int]) -> dict[str, LoRAWeight]:
    """Hugging Face base weight name -> :class:`LoRAWeight` of the llama.cpp LoRA GGUF at ``path``."""
    reader, metadata = _metadata(path)
    alpha = _check_metadata(path, metadata, gguf_arch)
    pairs: dict[str, dict[str, gguf.ReaderTensor]] = {}
    for tensor in reader.tensors:
        base, _, which = tensor.name.rpartition(".")
        if which not in ("lora_a", "lora_b"):
            what = "a norm weight (llama.cpp skips these; pyagent does not drop part of an adapter)" \
                if tensor.name.endswith("norm.weight") else "not a .lora_a / .lora_b tensor"
            raise LoRAAdapterError(f"{path}: tensor {tensor.name!r} is {what}; convert the adapter from a plain "
                                   "PEFT LoRA")
        pairs.setdefault(base, {})[which] = tensor
    weights = {}
    for base, pair in sorted(pairs.items()):
        missing = {"lora_a", "lora_b"} - set(pair)
        if missing:
            raise LoRAAdapterError(f"{path}: tensor {base}.{missing.pop()} is missing (its pair's other half is "
                                   "there); convert the adapter again")
        label = f"{base}.lora_a"
        hf_name = gguf_names.get(base)
        if hf_name is None:
            block = _BLOCK.match(base)
            if block is not None and int(block.group(1)) >= config.num_layers:
                raise beyond_last_layer(str(path), label, int(block.group(1)), config)
            raise LoRAAdapterError(f"{path}: tensor {label!r} adapts {base!r}, which a {gguf_arch} model does not "
                                   "have: the adapter was made for another base model")
        a, b = _values(pair["lora_a"], path), _values(pair["lora_b"], path)
        if hf_name in permuted_heads and b.dim() == 2:
            b = torch.from_numpy(np.ascontiguousarray(rope_rows(b.numpy(), permuted_heads[hf_name], to_gguf=False)))
        rank = a.shape[0] if a.dim() == 2 else 1
        weights[hf_name] = lora_weight(hf_name, a, b, alpha / rank if alpha else 1.0, targets, config, str(path),
                                       label)
    if not weights:
        raise LoRAAdapterError(f"{path} holds no LoRA tensors; convert the adapter again")
    return weights


def write_gguf_adapter(adapter: LoRAAdapter, path: str | Path, *, gguf_arch: str, gguf_names: Mapping[str, str],
                       permuted_heads: Mapping[str, int]) -> float:
    """Write ``adapter`` as a llama.cpp LoRA GGUF at ``path`` (float32 tensors, the converter's names and
    row order) and return the alpha written: ``scale * rank``, which must be one value for every weight.

    Raises :class:`LoRAAdapterError` when the weights' ``scale * rank`` differ (no single alpha gives
    llama.cpp every weight's scale).
    """
    alphas = {weight.scale * weight.rank for weight in adapter.weights.values()}
    alpha = next(iter(alphas), 0.0)
    if not all(math.isclose(value, alpha, rel_tol=1e-6) for value in alphas):
        raise LoRAAdapterError(f"{adapter.name}: its weights' scale * rank differ ({sorted(alphas)}); a llama.cpp "
                               "LoRA GGUF has one alpha (scale = alpha / rank)")
    gguf_of = {hf_name: gguf_name for gguf_name, hf_name in gguf_names.items()}
    writer = gguf.GGUFWriter(str(path), gguf_arch)
    writer.add_type(gguf.GGUFType.ADAPTER)
    writer.add_string(gguf.Keys.Adapter.TYPE, "lora")
    writer.add_float32(gguf.Keys.Adapter.LORA_ALPHA, alpha)
    for hf_name, weight in sorted(adapter.weights.items()):
        b = weight.b.float().numpy()
        if hf_name in permuted_heads:
            b = rope_rows(b, permuted_heads[hf_name], to_gguf=True)
        writer.add_tensor(f"{gguf_of[hf_name]}.lora_a", np.ascontiguousarray(weight.a.float().numpy()))
        writer.add_tensor(f"{gguf_of[hf_name]}.lora_b", np.ascontiguousarray(b))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return alpha
