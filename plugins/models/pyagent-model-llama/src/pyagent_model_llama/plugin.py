"""Registers the Llama architecture. pyagent imports this module on every listing: keep it light."""

from pyagent_core import ModelSpec, hookimpl

SPEC = ModelSpec(
    name="llama",
    impl="pyagent_model_llama.model:Llama",
    summary="Llama, SmolLM2.",
    architectures=("LlamaForCausalLM",),
    gguf_architectures=("llama",),
    requires=("torch",),
    install_hint="pip install pyagent-model-llama",
)


@hookimpl
def pyagent_register_models(register):
    """Register the Llama architecture."""
    register(SPEC)
