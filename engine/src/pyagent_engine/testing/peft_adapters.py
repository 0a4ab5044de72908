"""Test helpers: Hugging Face peft adapters with random non-zero weights for a checkpoint the engine reads.

Issue 31's three adapters (:data:`ADAPTERS`: rank 8 on q/v; rank 16 on every linear layer with
rsLoRA; rank 4 on o/down with alpha != rank) are made by peft on transformers' Llama of the
checkpoint's weights (dequantized) and saved by ``save_pretrained``, so they are PEFT folders as
peft writes them. Needs ``transformers`` and ``peft`` (development dependencies); imported only by tests.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

import torch

from pyagent_kernels.quantized import QuantizedWeight

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # transformers and peft must never reach for the hub

LINEAR = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
#: name -> peft LoraConfig arguments, and the std of B's entries times sqrt(rank).
ADAPTERS: dict[str, tuple[dict[str, Any], float]] = {
    "qv": ({"r": 8, "lora_alpha": 16, "target_modules": ["q_proj", "v_proj"]}, 0.2),
    "all-rs": ({"r": 16, "lora_alpha": 8, "target_modules": LINEAR, "use_rslora": True}, 0.1),
    "od": ({"r": 4, "lora_alpha": 12, "target_modules": ["o_proj", "down_proj"]}, 0.3),
}


def dense_weights(checkpoint: Any) -> dict[str, torch.Tensor]:
    """The checkpoint's weights dequantized to float32."""
    return {name: w.dequantize() if isinstance(w, QuantizedWeight) else w for name, w in checkpoint.weights.items()}


def transformers_model(checkpoint: Any, dense: dict[str, torch.Tensor], dtype: torch.dtype) -> Any:
    """transformers' model of the checkpoint's config on its ``dense`` weights, in ``dtype``."""
    import transformers

    cls = checkpoint.architecture.model_class
    data = cls.hf_config(checkpoint.config)
    hf_config = transformers.AutoConfig.for_model(
        data.pop("model_type"), **{k: v for k, v in data.items() if k not in ("architectures", "_name_or_path")})
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(hf_config)
    model.load_state_dict({name: w.to(dtype, copy=True) for name, w in dense.items()}, strict=False, assign=True)
    model.tie_weights()
    model.model.rotary_emb = type(model.model.rotary_emb)(config=hf_config)  # its buffers were made on meta
    return model.to(dtype).eval()


def save_peft_adapters(checkpoint: Any, dense: dict[str, torch.Tensor], folder: Path,
                       adapters: dict[str, tuple[dict[str, Any], float]] = ADAPTERS, seed: int = 0,
                       ) -> tuple[Any, dict[str, Path]]:
    """peft's float32 model with ``adapters`` (random weights, seeded) on transformers' model of the same
    weights, saved by peft into ``folder``; returns the model and each adapter's folder."""
    import peft

    generator = torch.Generator().manual_seed(seed)
    model = None
    for name, (arguments, b_std) in adapters.items():
        lora = peft.LoraConfig(**arguments)
        if model is None:
            model = peft.get_peft_model(transformers_model(checkpoint, dense, torch.float32), lora, adapter_name=name)
        else:
            model.add_adapter(name, lora)
        with torch.no_grad():
            for parameter_name, parameter in model.named_parameters():
                if f".lora_A.{name}." in parameter_name:
                    parameter.copy_(torch.randn(parameter.shape, generator=generator) / parameter.shape[1] ** 0.5)
                elif f".lora_B.{name}." in parameter_name:
                    values = torch.randn(parameter.shape, generator=generator)
                    parameter.copy_(values * b_std / parameter.shape[1] ** 0.5)
    assert model is not None
    model.save_pretrained(str(folder))
    return model.eval(), {name: folder / name for name in adapters}


def load_peft_adapters(checkpoint: Any, dense: dict[str, torch.Tensor], folders: dict[str, Path],
                       dtype: torch.dtype) -> Any:
    """peft's model in ``dtype``: transformers' model of the same weights with the adapters saved in
    ``folders`` loaded by ``PeftModel.from_pretrained`` / ``load_adapter`` (switch with ``set_adapter``)."""
    import peft

    names = list(folders)
    model = peft.PeftModel.from_pretrained(transformers_model(checkpoint, dense, dtype), folders[names[0]],
                                           adapter_name=names[0])
    for name in names[1:]:
        model.load_adapter(folders[name], adapter_name=name)
    return model.to(dtype).eval()


def peft_greedy_check(model: Any, name: str | None, prompt: list[int], tokens: list[int]) -> list[int]:
    """peft's argmax after each prefix of ``prompt + tokens`` (from the prompt's last token on) with adapter
    ``name`` (``None``: the base model, adapters disabled): equal to ``tokens`` when they are peft's greedy tokens."""
    if name is not None:
        model.set_adapter(name)
    with torch.no_grad(), model.disable_adapter() if name is None else contextlib.nullcontext():
        logits = model(torch.tensor([[*prompt, *tokens[:-1]]])).logits[0]
    return [int(t) for t in logits[len(prompt) - 1:].argmax(-1)]
