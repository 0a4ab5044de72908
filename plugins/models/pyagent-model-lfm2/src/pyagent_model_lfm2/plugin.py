"""Registers the LFM2 architecture. pyagent imports this module on every listing: keep it light."""

from pyagent_core import ModelSpec, hookimpl
from pyagent_core.install import checkout_install_hint

LFM2 = ModelSpec(
    name="lfm2",
    impl="pyagent_model_lfm2.model:Lfm2",
    summary="LiquidAI LFM2: gated short-convolution layers among grouped-query attention layers (q/k norms), "
            "SwiGLU feed-forward.",
    architectures=("Lfm2ForCausalLM",),
    gguf_architectures=("lfm2",),
    recurrent_state=True,
    requires=("torch",),
    install_hint=checkout_install_hint("pyagent-model-lfm2", "plugins/models/pyagent-model-lfm2"),
)


@hookimpl
def pyagent_register_models(register):
    """Register the LFM2 architecture."""
    register(LFM2)
