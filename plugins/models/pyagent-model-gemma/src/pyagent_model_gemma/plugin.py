"""Registers the Gemma 2 and Gemma 3 architectures. pyagent imports this module on every listing: keep it light."""

from pyagent_core import ModelSpec, hookimpl
from pyagent_core.install import checkout_install_hint

INSTALL_HINT = checkout_install_hint("pyagent-model-gemma", "plugins/models/pyagent-model-gemma")

GEMMA2 = ModelSpec(
    name="gemma2",
    impl="pyagent_model_gemma.model:Gemma2",
    summary="Gemma 2: GeGLU, scaled embeddings, 1 + w norms around attention and MLP, soft-capped scores "
            "and logits, alternating sliding-window and global layers.",
    architectures=("Gemma2ForCausalLM",),
    gguf_architectures=("gemma2",),
    requires=("torch",),
    install_hint=INSTALL_HINT,
)
GEMMA3 = ModelSpec(
    name="gemma3",
    impl="pyagent_model_gemma.model:Gemma3",
    summary="Gemma 3 (text): Gemma 2's layers with q/k norms, five sliding-window layers to one global, "
            "local and global RoPE bases.",
    architectures=("Gemma3ForCausalLM",),
    gguf_architectures=("gemma3",),
    requires=("torch",),
    install_hint=INSTALL_HINT,
)


@hookimpl
def pyagent_register_models(register):
    """Register the Gemma 2 and Gemma 3 architectures."""
    register(GEMMA2)
    register(GEMMA3)
