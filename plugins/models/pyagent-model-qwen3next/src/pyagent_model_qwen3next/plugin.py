"""Registers the Qwen3-Next architecture. pyagent imports this module on every listing: keep it light."""

from pyagent_core import ModelSpec, hookimpl
from pyagent_core.install import checkout_install_hint

QWEN3NEXT = ModelSpec(
    name="qwen3next",
    impl="pyagent_model_qwen3next.model:Qwen3Next",
    summary="Qwen3-Next: Gated DeltaNet layers among gated attention layers (partial RoPE), mixture of experts "
            "with a gated shared expert, 1 + w norms.",
    architectures=("Qwen3NextForCausalLM",),
    gguf_architectures=("qwen3next",),
    recurrent_state=True,
    requires=("torch",),
    install_hint=checkout_install_hint("pyagent-model-qwen3next", "plugins/models/pyagent-model-qwen3next"),
)


@hookimpl
def pyagent_register_models(register):
    """Register the Qwen3-Next architecture."""
    register(QWEN3NEXT)
