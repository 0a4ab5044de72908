"""PEFT LoRA adapters: a folder with ``adapter_config.json`` and ``adapter_model.safetensors``.

What is read, as PEFT saves it (``PeftModel.save_pretrained``): the config's ``peft_type`` (``LORA``),
``r``, ``lora_alpha`` and ``use_rslora``, and the tensors
``base_model.model.<module>.lora_A.weight`` (``[rank, in]``) and ``.lora_B.weight`` (``[out, rank]``)
of each adapted module. Each weight's scale is ``lora_alpha / rank`` (``lora_alpha / sqrt(rank)``
with rsLoRA), its rank read from its tensors (so a ``rank_pattern`` is honoured).

Refused, each with a message saying which key or tensor and what to do: another PEFT type, DoRA
(``use_dora``), ``modules_to_save`` (whole trained copies of modules), trained biases (``bias``,
``lora_bias``), ``alpha_pattern``, ``fan_in_fan_out`` weights, ``layer_replication``,
``trainable_token_indices``, ``target_parameters``, the LoRA variants whose forward differs
(aLoRA's ``alora_invocation_tokens``, QALoRA, BD-LoRA, Arrow, VeLoRA, MonteCLoRA, KaSA, MiCA),
pickled ``adapter_model.bin`` weights, and any tensor other than a LoRA pair.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open

from pyagent_core.errors import LoRAAdapterError
from pyagent_core.interfaces.lora import LoRAWeight
from pyagent_core.interfaces.model import ModelConfig
from pyagent_model_base.lora.checks import lora_weight

CONFIG_FILE = "adapter_config.json"
WEIGHTS_FILE = "adapter_model.safetensors"
_TENSOR = re.compile(r"^base_model\.model\.(?P<module>.+)\.lora_(?P<which>[AB])\.weight$")

#: Config keys whose non-empty value asks for what pyagent does not run, with what to do instead.
_REFUSED: dict[str, str] = {
    "use_dora": "DoRA (weight-decomposed LoRA) is not supported; merge the adapter into the model or retrain "
                "it as plain LoRA",
    "modules_to_save": "modules_to_save holds whole trained copies of modules, which pyagent does not load; merge "
                       "the adapter into the model (PeftModel.merge_and_unload) and serve the merged model",
    "lora_bias": "trained LoRA biases are not supported; retrain with lora_bias=False",
    "alpha_pattern": "per-module alpha (alpha_pattern) is not supported; retrain with one lora_alpha",
    "fan_in_fan_out": "fan_in_fan_out weights (GPT-2's Conv1D) are not supported",
    "layer_replication": "layer_replication is not supported",
    "trainable_token_indices": "trainable_token_indices (trained embedding rows) is not supported",
    "target_parameters": "LoRA on parameters (target_parameters, MoE experts) is not supported",
    "alora_invocation_tokens": "activated LoRA (aLoRA) is not supported",
    "use_qalora": "QALoRA is not supported",
    "use_bdlora": "block-diagonal LoRA (BD-LoRA) is not supported",
    "arrow_config": "Arrow routing among adapters is not supported",
    "velora_config": "VeLoRA is not supported",
    "monteclora_config": "MonteCLoRA is not supported",
    "kasa_config": "KaSA is not supported",
}


def _config(folder: Path) -> dict[str, Any]:
    """``adapter_config.json``, checked for what pyagent runs."""
    path = folder / CONFIG_FILE
    if not path.is_file():
        inner = sorted(child.name for child in folder.iterdir() if (child / CONFIG_FILE).is_file())
        hint = f"it holds adapters in the subfolders {', '.join(inner)}: pass one of them" if inner else \
            f"a PEFT adapter folder holds {CONFIG_FILE} and {WEIGHTS_FILE} (PeftModel.save_pretrained writes both)"
        raise LoRAAdapterError(f"{folder} has no {CONFIG_FILE}; {hint}")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise LoRAAdapterError(f"{path} is not a readable JSON file ({error}); save the adapter again") from None
    if not isinstance(data, dict):
        raise LoRAAdapterError(f"{path} must hold a JSON object, got {type(data).__name__}")
    peft_type = data.get("peft_type", "LORA")
    if peft_type != "LORA":
        raise LoRAAdapterError(f"{path}: peft_type is {peft_type!r}; pyagent serves LoRA adapters (peft_type LORA) "
                               "only")
    for key, why in _REFUSED.items():
        if data.get(key):
            raise LoRAAdapterError(f"{path}: {key} = {json.dumps(data[key])}: {why}")
    init = data.get("init_lora_weights")
    if isinstance(init, str) and init.lower() == "mica":
        raise LoRAAdapterError(f"{path}: init_lora_weights = \"mica\" makes a MiCA adapter, which pyagent does not "
                               "serve")
    if data.get("bias", "none") != "none":
        raise LoRAAdapterError(f"{path}: bias = {json.dumps(data['bias'])}: trained biases are not supported; "
                               "retrain with bias='none'")
    for key in ("r", "lora_alpha"):
        value = data.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            raise LoRAAdapterError(f"{path}: {key} must be a positive number, got {json.dumps(value)}")
    if not isinstance(data.get("use_rslora", False), bool):
        raise LoRAAdapterError(f"{path}: use_rslora must be true or false, got {json.dumps(data['use_rslora'])}")
    return data


def _pairs(path: Path) -> dict[str, dict[str, torch.Tensor]]:
    """Module name -> {"A": tensor, "B": tensor} of ``adapter_model.safetensors``."""
    pairs: dict[str, dict[str, torch.Tensor]] = {}
    try:
        with safe_open(str(path), framework="pt") as file:
            for key in file.keys():
                found = _TENSOR.match(key)
                if found is None:
                    what = ("a DoRA magnitude vector (use_dora)" if "lora_magnitude_vector" in key
                            else "a LoRA embedding (embedding layers are not adapted)" if "lora_embedding" in key
                            else "not a LoRA A/B matrix")
                    raise LoRAAdapterError(f"{path}: tensor {key!r} is {what}; pyagent serves plain LoRA pairs "
                                           "base_model.model.<module>.lora_A.weight / .lora_B.weight only")
                pairs.setdefault(found["module"], {})[found["which"]] = file.get_tensor(key)
    except SafetensorError as error:
        raise LoRAAdapterError(f"{path} is not a readable safetensors file ({error}); save the adapter again") \
            from None
    return pairs


def read_peft_weights(folder: Path, targets: Mapping[str, tuple[int, int]],
                      config: ModelConfig) -> dict[str, LoRAWeight]:
    """Hugging Face base weight name -> :class:`LoRAWeight` of the PEFT adapter in ``folder``."""
    settings = _config(folder)
    path = folder / WEIGHTS_FILE
    if not path.is_file():
        pickled = folder / "adapter_model.bin"
        hint = (f"it has {pickled.name}, pickled weights pyagent does not unpickle; save the adapter with "
                "safe_serialization=True (the default)") if pickled.exists() else "save the adapter again"
        raise LoRAAdapterError(f"{folder} has no {WEIGHTS_FILE}: {hint}")
    r, alpha, rslora = settings["r"], float(settings["lora_alpha"]), settings.get("use_rslora", False)
    weights = {}
    for module, pair in sorted(_pairs(path).items()):
        missing = {"A", "B"} - set(pair)
        if missing:
            raise LoRAAdapterError(f"{path}: module {module!r} lacks its lora_{missing.pop()}.weight tensor; save the "
                                   "adapter again")
        tensor = f"base_model.model.{module}.lora_A.weight"
        rank = pair["A"].shape[0] if pair["A"].dim() == 2 else 0
        if rank != r and not settings.get("rank_pattern"):
            raise LoRAAdapterError(f"{path}: tensor {tensor!r} has rank {rank}, but {CONFIG_FILE} says r = {r} (and "
                                   "no rank_pattern); the files do not belong together")
        scale = alpha / math.sqrt(rank) if rslora else alpha / max(rank, 1)
        weights[f"{module}.weight"] = lora_weight(f"{module}.weight", pair["A"], pair["B"], scale, targets, config,
                                                  str(path), tensor)
    if not weights:
        raise LoRAAdapterError(f"{path} holds no LoRA tensors; save the adapter again")
    return weights
