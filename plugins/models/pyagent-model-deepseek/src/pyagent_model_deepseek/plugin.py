"""Registers the DeepSeek-V3 architecture. pyagent imports this module on every listing: keep it light."""

from pyagent_core import ModelSpec, hookimpl
from pyagent_core.install import checkout_install_hint

DEEPSEEK_V3 = ModelSpec(
    name="deepseek3",
    impl="pyagent_model_deepseek.model:DeepseekV3",
    summary="DeepSeek-V3: multi-head latent attention over a compressed latent cache, sigmoid-routed mixture of "
            "experts with bias correction, expert groups and a shared expert, dense first layers.",
    architectures=("DeepseekV3ForCausalLM",),
    gguf_architectures=("deepseek2",),
    requires=("torch",),
    install_hint=checkout_install_hint("pyagent-model-deepseek", "plugins/models/pyagent-model-deepseek"),
)


@hookimpl
def pyagent_register_models(register):
    """Register the DeepSeek-V3 architecture."""
    register(DEEPSEEK_V3)
