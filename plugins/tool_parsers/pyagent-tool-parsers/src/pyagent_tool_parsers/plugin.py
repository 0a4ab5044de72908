"""Registers the tool-call parsers. Imported while listing plugins: no parser code, no jsonschema."""

from __future__ import annotations

from collections.abc import Callable

from pyagent_core import OptionSpec, ToolParserSpec, hookimpl
from pyagent_core.install import checkout_install_hint

PACKAGE = "pyagent_tool_parsers.parser"
INSTALL_HINT = checkout_install_hint("pyagent-tool-parsers", "plugins/tool_parsers/pyagent-tool-parsers")

# name: (class, summary, model families, chat-template substrings that identify the format)
FAMILIES: dict[str, tuple[str, str, tuple[str, ...], tuple[str, ...]]] = {
    "hermes": ("HermesToolParser", "<tool_call>{json}</tool_call> per call (Hermes, Qwen2.5, Qwen3).",
               ("hermes", "qwen2.5", "qwen3"), ("<tool_call>", "</tool_call>")),
    "llama3_json": ("Llama3JsonToolParser", "{\"name\", \"parameters\"} JSON calls, ';'-separated (Llama 3.1/3.2).",
                    ("llama3.1", "llama3.2"), ("<|start_header_id|>", '"parameters": dictionary')),
    "pythonic": ("PythonicToolParser", "[f(a=1), g(b='x')] Python-style calls (Llama 3.2, Llama 4).",
                 ("llama3.2", "llama4"), ("[func_name1(",)),
    "mistral": ("MistralToolParser", "[TOOL_CALLS] then a JSON list, or name[ARGS]{json} per call (Mistral).",
                ("mistral", "mixtral", "magistral", "devstral"), ("[TOOL_CALLS]",)),
    "qwen3_coder": ("Qwen3CoderToolParser", "<function=NAME><parameter=KEY>value</parameter> XML (Qwen3-Coder).",
                    ("qwen3-coder",), ("<tool_call>", "<function=", "<parameter=")),
    "deepseek_v3": ("DeepSeekV3ToolParser", "function<｜tool▁sep｜>NAME then a ```json block (DeepSeek-V3).",
                    ("deepseek-v3", "deepseek-r1"), ("<｜tool▁calls▁begin｜>", "<｜tool▁sep｜>", "```json")),
    "deepseek_v31": ("DeepSeekV31ToolParser", "<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{json} (DeepSeek-V3.1).",
                     ("deepseek-v3.1",), ("<｜tool▁calls▁begin｜>", "<｜tool▁sep｜>")),
    "granite": ("GraniteToolParser", "<|tool_call|>[{json}, ...] opening the reply (Granite 3.0/3.1).",
                ("granite-3.0", "granite-3.1"), ("<|start_of_role|>", "<|tool_call|>")),
    "internlm": ("InternLMToolParser", "<|action_start|><|plugin|>{json}<|action_end|> (InternLM 2/2.5).",
                 ("internlm2", "internlm2.5"), ("<|action_start|>", "<|plugin|>")),
    "jamba": ("JambaToolParser", "<tool_calls>[{json}, ...]</tool_calls> (Jamba).", ("jamba",), ("<tool_calls>",)),
    "kimi_k2": ("KimiK2ToolParser", "<|tool_call_begin|>functions.NAME:i<|tool_call_argument_begin|>{json} (Kimi-K2).",
                ("kimi-k2",), ("<|tool_calls_section_begin|>",)),
    "glm45": ("Glm45ToolParser", "<tool_call>NAME<arg_key>k</arg_key><arg_value>v</arg_value> (GLM-4.5).",
              ("glm-4.5", "glm-4.6"), ("<tool_call>", "<arg_key>", "<arg_value>")),
    "xlam": ("XlamToolParser", "A JSON list of calls as the reply, in ```json or <tool_call> (xLAM).",
             ("xlam",), ("[TOOL_CALLS]", "func_name1")),
    "phi4_mini_json": ("Phi4MiniJsonToolParser", "functools[{json}, ...] (Phi-4-mini).",
                       ("phi-4-mini",), ("<|tool|>", "<|/tool|>")),
    "minimax_m2": ("MinimaxM2ToolParser", "<minimax:tool_call><invoke name=...><parameter name=...> (MiniMax-M2).",
                   ("minimax-m2",), ("<minimax:tool_call>",)),
    "gpt-oss": ("GptOssToolParser", "Harmony commentary messages to=functions.NAME (gpt-oss).",
                ("gpt-oss",), ("<|channel|>", "to=functions.")),
}


@hookimpl
def pyagent_register_tool_parsers(register: Callable[[ToolParserSpec], None]) -> None:
    """Register one parser per model family, plus the configurable ``generic`` one."""
    for name, (cls, summary, families, markers) in FAMILIES.items():
        register(ToolParserSpec(
            name=name,
            impl=f"{PACKAGE}:{cls}",
            summary=summary,
            description=(
                "Streams tool calls (arguments as they arrive, checked to be JSON) and extracts them from whole "
                "messages with the same reader; calls are checked against the request's tools."
            ),
            model_families=families,
            template_markers=markers,
            install_hint=INSTALL_HINT,
        ))
    register(ToolParserSpec(
        name="generic",
        impl=f"{PACKAGE}:GenericToolParser",
        summary="Calls between configurable start/end markers, body as JSON, XML or pythonic.",
        description=(
            "For a model whose format no other parser knows: set 'start' and 'end' to its markers and "
            "'body' to json (one call object or a list), json_list, xml (<function=..><parameter=..>) or "
            "pythonic ([f(a=1)])."
        ),
        options={
            "start": OptionSpec(type=str, default="<tool_call>", help="marker opening a tool call"),
            "end": OptionSpec(type=str, default="</tool_call>", help="marker closing it ('' when none)"),
            "body": OptionSpec(type=str, default="json", choices=("json", "json_list", "xml", "pythonic"),
                               help="how calls are written between the markers"),
        },
        install_hint=INSTALL_HINT,
    ))
