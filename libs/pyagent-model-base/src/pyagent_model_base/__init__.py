"""The shared decoder of pyagent's model plugins (a library: it registers no architecture).

- :mod:`~pyagent_model_base.layout`: :class:`DecoderLayout`, what sets one family's decoder layer
  apart (fused projections, q/k/v bias, per-head q/k norms);
- :mod:`~pyagent_model_base.decoder`: :class:`DecoderLM`, the
  :class:`~pyagent_core.interfaces.model.CausalLM` every declared family is: config from
  ``config.json`` or GGUF metadata, weight names in both formats, and the forward over the paged KV cache;
- :mod:`~pyagent_model_base.step_plan`: a step's activation buffers and every layer's kernel calls,
  checked once;
- :mod:`~pyagent_model_base.hybrid`: :class:`~pyagent_model_base.hybrid.HybridLM`, the decoder of hybrid
  families (layers mixing with attention, a recurrent mixer or latent attention), built of
  :mod:`~pyagent_model_base.layers`, :mod:`~pyagent_model_base.mamba` and :mod:`~pyagent_model_base.moe`;
- :mod:`~pyagent_model_base.checkpoint_kit`: a test kit running an architecture from a tiny transformers
  checkpoint (safetensors and GGUF) through its declared caches.

Import the modules themselves; this package imports nothing (and no torch) on its own.
"""
