"""Registers the Phi-3 architecture. pyagent imports this module on every listing: keep it light."""

from pyagent_core import ModelSpec, hookimpl
from pyagent_core.install import checkout_install_hint

SPEC = ModelSpec(
    name="phi3",
    impl="pyagent_model_phi3.model:Phi3",
    summary="Phi-3 (mini/medium, 4k context): the Llama layers with fused qkv and gate/up projections.",
    architectures=("Phi3ForCausalLM",),
    gguf_architectures=("phi3",),
    requires=("torch",),
    install_hint=checkout_install_hint("pyagent-model-phi3", "plugins/models/pyagent-model-phi3"),
)


@hookimpl
def pyagent_register_models(register):
    """Register the Phi-3 architecture."""
    register(SPEC)
