"""vLLM's ``vllm.general_plugins`` entry point: pyagent's parsers in vLLM's parser managers.

vLLM calls :func:`register` in each of its processes. Every installed pyagent tool-call parser and
reasoning parser is registered lazily as ``pyagent-<name>`` (``--tool-call-parser pyagent-hermes``,
``--reasoning-parser pyagent-qwen3``): the wrapper class is made only when vLLM asks for that name.
The ``pyagent-`` prefix keeps them apart from vLLM's own parsers of the same families.
"""

from __future__ import annotations

from pyagent_vllm.inventory import PREFIX, REASONING_PREFIX, TOOL_PREFIX, parser_names


def register() -> None:
    """Register every pyagent parser with vLLM's ``ToolParserManager`` and ``ReasoningParserManager``."""
    from vllm.reasoning import ReasoningParserManager
    from vllm.tool_parsers import ToolParserManager

    tools, reasoning = parser_names()
    for name in tools:
        ToolParserManager.register_lazy_module(PREFIX + name, "pyagent_vllm.parsers", TOOL_PREFIX + name)
    for name in reasoning:
        ReasoningParserManager.register_lazy_module(PREFIX + name, "pyagent_vllm.parsers", REASONING_PREFIX + name)
