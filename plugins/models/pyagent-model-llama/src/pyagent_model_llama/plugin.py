"""Registers the Llama and Mistral architectures. pyagent imports this module on every listing: keep it light."""

from pyagent_core import ModelSpec, hookimpl
from pyagent_core.install import checkout_install_hint

INSTALL_HINT = checkout_install_hint("pyagent-model-llama", "plugins/models/pyagent-model-llama")

SPEC = ModelSpec(
    name="llama",
    impl="pyagent_model_llama.model:Llama",
    summary="Llama: RMSNorm, RoPE, grouped-query attention, SwiGLU (SmolLM2, Llama 2/3, TinyLlama).",
    architectures=("LlamaForCausalLM",),
    gguf_architectures=("llama",),
    requires=("torch",),
    install_hint=INSTALL_HINT,
)
MISTRAL = ModelSpec(
    name="mistral",
    impl="pyagent_model_llama.model:Mistral",
    summary="Mistral: the Llama layers, each attending within a sliding window (GGUF files are llama's).",
    architectures=("MistralForCausalLM",),
    requires=("torch",),
    install_hint=INSTALL_HINT,
)


@hookimpl
def pyagent_register_models(register):
    """Register the Llama and Mistral architectures."""
    register(SPEC)
    register(MISTRAL)
