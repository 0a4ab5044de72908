"""LoRA adapters on the shared decoder (:class:`~pyagent_model_base.decoder.DecoderLM`).

- :mod:`~pyagent_model_base.lora.targets`: which weights of a decoder layer an adapter may adapt,
  and where each lands among the layer's fused projections;
- :mod:`~pyagent_model_base.lora.peft_folder` and :mod:`~pyagent_model_base.lora.gguf_adapter`: the
  two formats adapters come in (a PEFT folder, a llama.cpp LoRA GGUF), read and checked against the
  model (:mod:`~pyagent_model_base.lora.reading` picks the format); the GGUF module also writes one;
- :mod:`~pyagent_model_base.lora.slots`: the adapters loaded in a model's fixed slots, and the step
  plan's batched LoRA calls (:mod:`pyagent_kernels.lora`) after the projections they adapt.

Import the modules themselves; this package imports nothing on its own.
"""
