"""Registers the Qwen2 and Qwen3 architectures. pyagent imports this module on every listing: keep it light."""

from pyagent_core import ModelSpec, hookimpl
from pyagent_core.install import checkout_install_hint

INSTALL_HINT = checkout_install_hint("pyagent-model-qwen", "plugins/models/pyagent-model-qwen")

QWEN2 = ModelSpec(
    name="qwen2",
    impl="pyagent_model_qwen.model:Qwen2",
    summary="Qwen2 and Qwen2.5: the Llama layers with biases on the q/k/v projections.",
    architectures=("Qwen2ForCausalLM",),
    gguf_architectures=("qwen2",),
    requires=("torch",),
    install_hint=INSTALL_HINT,
)
QWEN3 = ModelSpec(
    name="qwen3",
    impl="pyagent_model_qwen.model:Qwen3",
    summary="Qwen3 (dense): the Llama layers with an RMSNorm on each query and key head.",
    architectures=("Qwen3ForCausalLM",),
    gguf_architectures=("qwen3",),
    requires=("torch",),
    install_hint=INSTALL_HINT,
)


@hookimpl
def pyagent_register_models(register):
    """Register the Qwen2 and Qwen3 architectures."""
    register(QWEN2)
    register(QWEN3)
