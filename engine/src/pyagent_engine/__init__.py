"""pyagent-engine: the reference host for pyagent plugins.

Continuous batching over a paged KV cache, one step a pipeline of stages (schedule, inputs, forward,
masks, select, logprobs, commit, append) over the KV manager, the sampler chain, structured output
and speculative decoding, every plugin reached through the registry. The
user-facing entry points are :class:`LLM` and :class:`SamplingParams`::

    from pyagent_engine import LLM, SamplingParams

Importing this package is cheap: ``LLM`` and ``SamplingParams`` (and torch with them) load on first
use, so the engine's plugin module can add its commands to ``pyagent`` without loading torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyagent_engine.api.llm import LLM
    from pyagent_engine.requests.params import SamplingParams

__version__ = "0.2.0"
__all__ = ["LLM", "SamplingParams", "__version__"]


def __getattr__(name: str) -> Any:
    if name == "LLM":
        from pyagent_engine.api.llm import LLM

        return LLM
    if name == "SamplingParams":
        from pyagent_engine.requests.params import SamplingParams

        return SamplingParams
    raise AttributeError(f"module 'pyagent_engine' has no attribute {name!r}")
