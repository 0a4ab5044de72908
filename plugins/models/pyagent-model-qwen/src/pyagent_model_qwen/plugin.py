"""Registers the Qwen2 and Qwen3 architectures. pyagent imports this module on every listing: keep it light."""

from pyagent_core import ModelSpec, hookimpl

QWEN2 = ModelSpec(
    name="qwen2",
    impl="pyagent_model_qwen.model:Qwen2",
    summary="Qwen2, Qwen2.5: q/k/v bias.",
    architectures=("Qwen2ForCausalLM",),
    gguf_architectures=("qwen2",),
    requires=("torch",),
    install_hint="pip install pyagent-model-qwen",
)
QWEN3 = ModelSpec(
    name="qwen3",
    impl="pyagent_model_qwen.model:Qwen3",
    summary="Qwen3: per-head q/k norm.",
    architectures=("Qwen3ForCausalLM",),
    gguf_architectures=("qwen3",),
    requires=("torch",),
    install_hint="pip install pyagent-model-qwen",
)


@hookimpl
def pyagent_register_models(register):
    """Register the Qwen2 and Qwen3 architectures."""
    register(QWEN2)
    register(QWEN3)
