"""Read a GGUF file (llama.cpp's format) into a :class:`Checkpoint`.

The model plugin serving the file's ``general.architecture`` (found through the registry) reads the
metadata keys (``llama.block_count``, ...) into the config and names the tensors; the tokenizer comes
from the ``tokenizer.ggml.*`` keys. Matrices stored in a block type of :func:`supported_block_types`
stay in their blocks (:class:`~pyagent_kernels.quantized.QuantizedWeight`, which the linear kernel
decodes); float tensors are read as float32, and any other block type is an
:class:`UnsupportedModelError`. All are renamed to Hugging Face names, and the matrices the plugin
names in ``gguf_permuted_heads`` are un-permuted: llama.cpp's converter reorders the rows of each head
of Llama's ``attn_q`` and ``attn_k`` from Hugging Face's ``[first half, second half]`` (the pairs
rotate-half RoPE rotates) to interleaved pairs ``(2i, 2i+1)``; reading it back restores Hugging
Face's order. Last, the plugin's ``gguf_restore`` turns the tensors the converter transformed,
reshaped, split or stacked (Mamba's ``A``, squeezed convolutions, stacked experts) back into its
Hugging Face weights.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from gguf import GGMLQuantizationType, GGUFReader, ReaderTensor
from gguf.quants import dequantize

from pyagent_core.errors import ModelFormatError, UnsupportedModelError
from pyagent_core.interfaces.model import ModelConfig
from pyagent_core.registry import Registry
from pyagent_engine.models.architectures import Architecture, find_architecture
from pyagent_engine.models.chat_template import ChatTemplate
from pyagent_engine.models.checkpoint import Checkpoint, Weight
from pyagent_engine.models.gguf_tokenizer import build_gguf_tokenizer
from pyagent_engine.models.tokenizer import Tokenizer
from pyagent_kernels.quantized import FORMATS, QuantizedWeight

GGUF_MAGIC = b"GGUF"

#: ``progress(done, total, what)``: called as the tensors of a model are converted.
ProgressCallback = Callable[[int, int, str], None]

#: GGUF block types kept in their blocks, by the name the linear kernel knows them by.
KEPT_QUANTIZED = {GGMLQuantizationType(spec.ggml_type): name for name, spec in FORMATS.items()}
_FLOAT_TYPES = (GGMLQuantizationType.F32, GGMLQuantizationType.F16, GGMLQuantizationType.BF16)


def supported_block_types() -> tuple[str, ...]:
    """The GGUF tensor types pyagent reads, by their GGML names: the float types, then the block
    types the linear kernel decodes (``F32``, ``F16``, ``BF16``, ``Q4_0``, ...)."""
    return tuple(t.name for t in (*_FLOAT_TYPES, *KEPT_QUANTIZED))


def open_gguf(path: Path) -> GGUFReader:
    """Open ``path`` as a GGUF file; :class:`ModelFormatError` if it is not one or is cut short."""
    with path.open("rb") as file:
        magic = file.read(4)
    if magic != GGUF_MAGIC:
        raise ModelFormatError(
            f"{path} is not a GGUF file (it starts with {magic!r}, a GGUF file with {GGUF_MAGIC!r}); "
            "pass a .gguf file or a checkpoint folder with config.json, *.safetensors and tokenizer.json"
        )
    size = path.stat().st_size
    try:
        reader = GGUFReader(path)
    except (ValueError, IndexError, KeyError, UnicodeDecodeError) as error:
        raise ModelFormatError(
            f"{path} is a truncated or corrupt GGUF file ({size} bytes; reading it failed with: {error}); "
            "copy or download it again"
        ) from None
    end = max((t.data_offset + t.n_bytes for t in reader.tensors), default=reader.data_offset)
    if end > size:
        raise ModelFormatError(f"{path} is a truncated GGUF file: its tensors need {end} bytes, it has {size}")
    return reader


def read_metadata(reader: GGUFReader) -> dict[str, Any]:
    """Every metadata key of the file with its value (strings, numbers, lists)."""
    return {name: field.contents() for name, field in reader.fields.items()}


def gguf_config(metadata: Mapping[str, Any], tensor_names: Collection[str], where: str,
                registry: Registry | None = None) -> tuple[Architecture, ModelConfig]:
    """The model plugin serving a GGUF file (``where``) and the config it reads from the file's metadata.

    Raises :class:`UnsupportedModelError` for an architecture no installed plugin serves, and
    :class:`ModelFormatError` for a file without a vocabulary or missing a key the architecture needs.
    """
    architecture = find_architecture(gguf=str(metadata.get("general.architecture")), where=where, registry=registry)
    if not metadata.get("tokenizer.ggml.tokens"):
        raise ModelFormatError(f"{where} has no tokenizer: its metadata lacks tokenizer.ggml.tokens (pyagent reads "
                               "the vocabulary from the GGUF; convert the model with llama.cpp's "
                               "convert_hf_to_gguf.py, which embeds it)")
    config = architecture.model_class.config_from_gguf(metadata, tensor_names, architecture.spec.name, where)
    return architecture, config


def unpermute_rope_rows(weight: np.ndarray, num_heads: int) -> np.ndarray:
    """Undo llama.cpp's reordering of query/key rows: interleaved pairs back to halves, per head."""
    rows = weight.shape[0]
    per_head = weight.reshape(num_heads, rows // num_heads // 2, 2, *weight.shape[1:])
    return per_head.swapaxes(1, 2).reshape(weight.shape)


def _dequantize(tensor: ReaderTensor) -> np.ndarray:
    """float32 values of a float tensor or of a supported block type, in the tensor's shape."""
    return dequantize(tensor.data, tensor.tensor_type).reshape(tuple(reversed(tensor.shape.tolist())))


def _read_weight(tensor: ReaderTensor, rope_heads: int | None, where: str) -> Weight:
    """One tensor in Hugging Face layout: kept quantized (a matrix of a supported block type) or as
    float32; :class:`UnsupportedModelError` for another block type."""
    fmt = KEPT_QUANTIZED.get(tensor.tensor_type)
    if fmt is None and tensor.tensor_type not in _FLOAT_TYPES:
        raise UnsupportedModelError(
            f"{where}: tensor {tensor.name} is stored as {tensor.tensor_type.name}, a block type pyagent's "
            f"linear kernel lacks; supported: {', '.join(supported_block_types())}. Requantize the file to one "
            "of them (llama.cpp's llama-quantize --allow-requantize, e.g. to Q4_K_M)"
        )
    if fmt is not None and len(tensor.shape) == 2:
        blocks = tensor.data  # uint8 [rows, bytes per row]
        if rope_heads is not None:
            blocks = unpermute_rope_rows(blocks, rope_heads)
        return QuantizedWeight.from_gguf(torch.from_numpy(np.array(blocks, copy=True)), fmt, int(tensor.shape[0]))
    values = _dequantize(tensor)
    if rope_heads is not None:
        values = unpermute_rope_rows(values, rope_heads)
    # a float32 tensor is a read-only view of the mapped file: copy it out
    return torch.from_numpy(np.require(values, np.float32, ["C", "W"]))


def read_gguf(path: Path, progress: ProgressCallback | None = None, registry: Registry | None = None) -> Checkpoint:
    """Read the GGUF file at ``path``: config, weights (Hugging Face names and layout; quantized or
    float32), tokenizer and chat template.

    ``progress(done, total, tensor_name)`` is called after each tensor is read. Raises
    :class:`ModelFormatError` for a file that is not GGUF or is truncated, and
    :class:`UnsupportedModelError` for an architecture no installed plugin serves, or a tokenizer or
    quantization pyagent lacks (``registry``: where to look for the architecture; default: the
    installed plugins).
    """
    where = str(path)
    reader = open_gguf(path)
    metadata = read_metadata(reader)
    architecture, config = gguf_config(metadata, {t.name for t in reader.tensors}, where, registry)
    model_class = architecture.model_class
    tokenizer = Tokenizer(build_gguf_tokenizer(metadata, where))
    weights: dict[str, Weight] = {}
    names, permuted = model_class.gguf_tensor_names(config), model_class.gguf_permuted_heads(config)
    offsets = model_class.gguf_weight_offsets(config)
    for done, tensor in enumerate(reader.tensors, start=1):
        name = names.get(tensor.name)
        if name is not None:
            weight = _read_weight(tensor, permuted.get(name), where)
            if name in offsets:  # stored as the Hugging Face value plus a constant
                weight = (weight.dequantize() if isinstance(weight, QuantizedWeight) else weight) - offsets[name]
            weights[name] = weight
        if progress is not None:
            progress(done, len(reader.tensors), tensor.name)
    weights = model_class.gguf_restore(config, weights)  # tensors the converter transformed, split or stacked
    template = None
    if isinstance(metadata.get("tokenizer.chat_template"), str):
        tokens = metadata["tokenizer.ggml.tokens"]
        bos, eos = config.bos_token_id, config.eos_token_ids
        template = ChatTemplate(metadata["tokenizer.chat_template"],
                                bos_token=tokens[bos] if bos is not None else "",
                                eos_token=tokens[eos[0]] if eos else "")
    return Checkpoint(architecture=architecture, config=config, weights=weights, tokenizer=tokenizer,
                      chat_template=template)
