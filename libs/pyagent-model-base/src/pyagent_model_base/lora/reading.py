"""Read a LoRA adapter for a model, whatever its format, and check it fits the model.

:func:`read_adapter` takes a PEFT folder (``adapter_config.json`` + ``adapter_model.safetensors``) or
a llama.cpp LoRA GGUF file and returns a :class:`~pyagent_core.interfaces.lora.LoRAAdapter` whose
weights are keyed by the base model's Hugging Face names. Both formats check every adapted weight with
:func:`pyagent_model_base.lora.checks.lora_weight`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from pyagent_core.errors import LoRAAdapterError
from pyagent_core.interfaces.lora import LoRAAdapter
from pyagent_core.interfaces.model import ModelConfig
from pyagent_model_base.lora import gguf_adapter, peft_folder

GGUF_MAGIC = b"GGUF"


def read_adapter(path: str | Path, targets: Mapping[str, tuple[int, int]], config: ModelConfig, *,
                 gguf_arch: str, gguf_names: Mapping[str, str], permuted_heads: Mapping[str, int],
                 name: str | None = None) -> LoRAAdapter:
    """The adapter at ``path`` for a model of ``config`` whose adaptable weights are ``targets``.

    A folder is read as a PEFT adapter, a file starting with the GGUF magic as a llama.cpp LoRA GGUF
    of architecture ``gguf_arch`` (its tensors named as ``gguf_names`` maps them to Hugging Face names,
    the rows of ``permuted_heads``' matrices restored to Hugging Face's order). :class:`LoRAAdapterError`
    for anything else, and for what the format readers refuse.
    """
    source = Path(path).expanduser()
    label = name or source.name
    if source.is_dir():
        weights = peft_folder.read_peft_weights(source, targets, config)
        return LoRAAdapter(name=label, source=str(source), format="peft", weights=weights)
    if not source.exists():
        raise LoRAAdapterError(f"LoRA adapter {str(path)!r} does not exist; pass a PEFT adapter folder "
                               "(adapter_config.json, adapter_model.safetensors) or a llama.cpp LoRA .gguf file")
    with source.open("rb") as file:
        magic = file.read(4)
    if magic != GGUF_MAGIC:
        raise LoRAAdapterError(
            f"{source} is neither a folder nor a GGUF file (it starts with {magic!r}); pass a PEFT adapter folder "
            "(adapter_config.json, adapter_model.safetensors) or a llama.cpp LoRA .gguf file"
        )
    weights = gguf_adapter.read_gguf_weights(source, targets, config, gguf_arch=gguf_arch, gguf_names=gguf_names,
                                             permuted_heads=permuted_heads)
    return LoRAAdapter(name=label, source=str(source), format="gguf", weights=weights)
