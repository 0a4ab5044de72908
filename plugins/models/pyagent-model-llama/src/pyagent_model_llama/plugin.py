"""Registers the Llama architecture. pyagent imports this module on every listing: keep it light."""

from pyagent_core import ModelSpec, hookimpl

SPEC = ModelSpec(
    name="llama",
    impl="pyagent_model_llama.model:Llama",
    summary="Llama: RMSNorm, RoPE, grouped-query attention, SwiGLU (SmolLM2, Llama 2/3, TinyLlama).",
    architectures=("LlamaForCausalLM",),
    gguf_architectures=("llama",),
    requires=("torch",),
    install_hint="pip install pyagent-model-llama",
)


@hookimpl
def pyagent_register_models(register):
    """Register the Llama architecture."""
    register(SPEC)
