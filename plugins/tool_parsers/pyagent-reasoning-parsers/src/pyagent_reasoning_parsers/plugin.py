"""Registers the reasoning parsers. Imported while listing plugins: no parser code."""

from __future__ import annotations

from collections.abc import Callable

from pyagent_core import OptionSpec, ReasoningParserSpec, hookimpl
from pyagent_core.install import checkout_install_hint

PACKAGE = "pyagent_reasoning_parsers.parser"
INSTALL_HINT = checkout_install_hint("pyagent-reasoning-parsers", "plugins/tool_parsers/pyagent-reasoning-parsers")

# name: (class, summary, model families, chat-template substrings that identify the format)
FAMILIES: dict[str, tuple[str, str, tuple[str, ...], tuple[str, ...]]] = {
    "deepseek_r1": ("DeepSeekR1ReasoningParser", "Reasoning until </think>; the prompt opened <think> (DeepSeek-R1).",
                    ("deepseek-r1",), ("<think>", "<｜Assistant｜>")),
    "glm45": ("Glm45ReasoningParser", "<think>...</think> opening the reply (GLM-4.5).",
              ("glm-4.5",), ("<think>", "<|assistant|>")),
    "kimi_k2": ("KimiK2ReasoningParser", "Reasoning until </think> or the tool-call section (Kimi-K2 Thinking).",
                ("kimi-k2",), ("<think>", "<|tool_calls_section_begin|>")),
    "minimax_m2": ("MinimaxM2ReasoningParser", "Reasoning until </think>; the prompt opened <think> (MiniMax-M2).",
                   ("minimax-m2",), ("<think>", "<minimax:tool_call>")),
    "mistral": ("MistralReasoningParser", "[THINK]...[/THINK] opening the reply (Magistral).",
                ("magistral",), ("[THINK]",)),
    "granite": ("GraniteReasoningParser", "'Here is my thought process:' ... 'Here is my response:' (Granite 3.2).",
                ("granite-3.2",), ("thought process",)),
    "gpt-oss": ("GptOssReasoningParser", "Harmony analysis channel is reasoning, final is content (gpt-oss).",
                ("gpt-oss",), ("<|channel|>",)),
}


@hookimpl
def pyagent_register_reasoning_parsers(register: Callable[[ReasoningParserSpec], None]) -> None:
    """Register one parser per model family, plus ``qwen3`` (with an option) and ``generic``."""
    for name, (cls, summary, families, markers) in FAMILIES.items():
        register(ReasoningParserSpec(name=name, impl=f"{PACKAGE}:{cls}", summary=summary, model_families=families,
                                     template_markers=markers, install_hint=INSTALL_HINT))
    register(ReasoningParserSpec(
        name="qwen3",
        impl=f"{PACKAGE}:Qwen3ReasoningParser",
        summary="<think>...</think> opening the reply, ended by a <tool_call> too (Qwen3); forced_open when the "
                "template opened it.",
        options={"forced_open": OptionSpec(
            type=bool, default=False, help="the chat template ends with <think> (Qwen3 thinking-2507 models)")},
        model_families=("qwen3",),
        template_markers=("<think>", "<|im_start|>"),
        install_hint=INSTALL_HINT,
    ))
    register(ReasoningParserSpec(
        name="generic",
        impl=f"{PACKAGE}:GenericReasoningParser",
        summary="Reasoning between configurable open/close markers.",
        options={
            "open": OptionSpec(type=str, default="<think>", help="marker opening reasoning at the reply's start"),
            "close": OptionSpec(type=str, default="</think>", help="marker ending reasoning"),
            "forced_open": OptionSpec(type=bool, default=False, help="the prompt already opened reasoning"),
        },
        install_hint=INSTALL_HINT,
    ))
