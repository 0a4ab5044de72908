"""Registers the Mamba2 architecture. pyagent imports this module on every listing: keep it light."""

from pyagent_core import ModelSpec, hookimpl
from pyagent_core.install import checkout_install_hint

MAMBA2 = ModelSpec(
    name="mamba2",
    impl="pyagent_model_mamba2.model:Mamba2",
    summary="Mamba2: every layer a selective state-space mixer (convolution, SSD scan, gated norm), no attention.",
    architectures=("Mamba2ForCausalLM",),
    gguf_architectures=("mamba2",),
    recurrent_state=True,
    requires=("torch",),
    install_hint=checkout_install_hint("pyagent-model-mamba2", "plugins/models/pyagent-model-mamba2"),
)


@hookimpl
def pyagent_register_models(register):
    """Register the Mamba2 architecture."""
    register(MAMBA2)
