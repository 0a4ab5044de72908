"""Registers the Granite 4 hybrid architecture. pyagent imports this module on every listing: keep it light."""

from pyagent_core import ModelSpec, hookimpl
from pyagent_core.install import checkout_install_hint

GRANITE_HYBRID = ModelSpec(
    name="granitehybrid",
    impl="pyagent_model_granite.model:GraniteHybrid",
    summary="IBM Granite 4 hybrid: Mamba2 layers among attention layers (no positions), mixture of experts beside "
            "a shared MLP, Granite's embedding, attention, residual and logit multipliers.",
    architectures=("GraniteMoeHybridForCausalLM",),
    gguf_architectures=("granitehybrid",),
    recurrent_state=True,
    requires=("torch",),
    install_hint=checkout_install_hint("pyagent-model-granite", "plugins/models/pyagent-model-granite"),
)


@hookimpl
def pyagent_register_models(register):
    """Register the Granite 4 hybrid architecture."""
    register(GRANITE_HYBRID)
