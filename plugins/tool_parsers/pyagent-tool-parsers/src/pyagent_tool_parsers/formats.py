"""The tool-call formats of the model families, each a short declaration over :mod:`pyagent_parser_base`.

Marker strings are those of the families' published chat templates and model cards. Every
format also writes calls (``render``) exactly as the model would, which the round-trip tests,
the benchmark and :meth:`~pyagent_tool_parsers.parser.FormatToolParser.constraint_for` use.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pyagent_parser_base.harmony import CALL, CONTENT, DROP, MESSAGE, Header, harmony_program
from pyagent_parser_base.jsonscan import (
    call_list,
    call_object,
    call_object_or_list,
    call_sequence,
    dumps,
    json_arguments,
)
from pyagent_parser_base.named import NamedCall, repeated
from pyagent_parser_base.regions import Body, ProgramFormat, Region, ToolFormat
from pyagent_parser_base.source import Source, Wait, accept, read_until, skip_space
from pyagent_parser_base.xml import XmlCall
from pyagent_tool_parsers.pythonic import python_list, render_python_list

Calls = Sequence[tuple[str, dict[str, Any]]]
Format = ToolFormat | ProgramFormat


def _objects(calls: Calls, arguments_key: str = "arguments") -> list[dict[str, Any]]:
    return [{"name": name, arguments_key: arguments} for name, arguments in calls]


def _each(template: Callable[[str, dict[str, Any]], str], separator: str = "\n") -> Callable[[Calls], str]:
    return lambda calls: separator.join(template(name, arguments) for name, arguments in calls)


# Hermes / Qwen2.5 / Qwen3: <tool_call>{"name": ..., "arguments": {...}}</tool_call> per call.
HERMES = ToolFormat(
    regions=(Region("<tool_call>", call_object, end="</tool_call>"),),
    render=_each(lambda n, a: f"<tool_call>\n{dumps({'name': n, 'arguments': a})}\n</tool_call>"),
)

# Llama 3.1/3.2 JSON: {"name": ..., "parameters": {...}} (after <|python_tag|>, or as the whole reply), ";"-separated.
LLAMA3_JSON = ToolFormat(
    regions=(Region("{", call_sequence(";"), at_start=True, in_body=True),
             Region("<|python_tag|>", call_sequence(";"))),
    render=lambda calls: "; ".join(map(dumps, _objects(calls, "parameters"))),
)

# Llama 3.2 / Llama 4 pythonic: [f(a=1), g(b="x")], optionally inside <|python_start|> ... <|python_end|>.
PYTHONIC = ToolFormat(
    regions=(Region("[", python_list, at_start=True, in_body=True),
             Region("<|python_start|>", python_list, end="<|python_end|>")),
    render=render_python_list,
)


def _mistral_body(src: Source, out: Any) -> Wait[None]:
    """After [TOOL_CALLS]: a JSON list (tokenizer < v11), or NAME[CALL_ID]ID[ARGS]{...} / NAME{...} (v11+)."""
    if (yield from skip_space(src)) == "[":
        yield from call_list(src, out)
        return
    name, _ = yield from read_until(src, ("[CALL_ID]", "[ARGS]", "{"), "the tool's name", consume=False)
    call_id = ""
    if (yield from accept(src, "[CALL_ID]")):
        call_id, _ = yield from read_until(src, ("[ARGS]", "{"), "the call id", consume=False)
    yield from accept(src, "[ARGS]")
    out.start_call(name.strip(), call_id.strip() or None)
    yield from json_arguments(src, out)
    out.end_call()


MISTRAL = ToolFormat(
    regions=(Region("[TOOL_CALLS]", _mistral_body),),
    render=_each(lambda n, a: f"[TOOL_CALLS]{n}[ARGS]{dumps(a)}", ""),
)


def render_mistral_list(calls: Calls) -> str:
    """Calls in Mistral's older form (tokenizers before v11): ``[TOOL_CALLS] [{...}, ...]``."""
    return "[TOOL_CALLS] " + dumps(_objects(calls))


QWEN3_CODER_CALL = XmlCall(open="<function=", name_stops=(">",), name_close=">", param_open="<parameter=",
                           key_close=(">",), value_close="</parameter>", close="</function>")
QWEN3_CODER = ToolFormat(
    regions=(Region("<tool_call>", repeated(QWEN3_CODER_CALL.body, "<function=", "</function>", until="</tool_call>"),
                    end="</tool_call>"),
             Region("<function=", QWEN3_CODER_CALL.body, in_body=True)),
    render=_each(lambda n, a: f"<tool_call>\n{QWEN3_CODER_CALL.render(n, a)}\n</tool_call>"),
)


def _section(begin: str, end: str, call: NamedCall, separator: str = "") -> ToolFormat:
    """A section of template calls between ``begin`` and ``end`` (DeepSeek, Kimi)."""
    return ToolFormat(
        regions=(Region(begin, repeated(call.body, call.opener, call.closer, until=end), end=end),),
        render=lambda calls: begin + call.render(calls, separator) + end,
    )


DEEPSEEK_V3 = _section(
    "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>",
    NamedCall("<｜tool▁call▁begin｜>function<｜tool▁sep｜>{name}\n```json\n{args}\n```<｜tool▁call▁end｜>"), "\n",
)
DEEPSEEK_V31 = _section(
    "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>",
    NamedCall("<｜tool▁call▁begin｜>{name}<｜tool▁sep｜>{args}<｜tool▁call▁end｜>"),
)

_KIMI_ID = re.compile(r"(?:functions\.)?(.+?)(?::\d+)?")


def _kimi_name(text: str) -> tuple[str, str | None]:
    """Kimi-K2 writes ``functions.NAME:INDEX``, which is also the call's id."""
    found = _KIMI_ID.fullmatch(text)
    return (found.group(1) if found else text), text


KIMI_K2 = _section(
    "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>",
    NamedCall("<|tool_call_begin|>{name}<|tool_call_argument_begin|>{args}<|tool_call_end|>",
              parse_name=_kimi_name, write_name=lambda name, index: f"functions.{name}:{index}"),
)

# Granite 3.0 (<|tool_call|>) and 3.1 (<tool_call>): a JSON list opening the reply.
GRANITE = ToolFormat(
    regions=(Region("<|tool_call|>", call_list, at_start=True), Region("<tool_call>", call_list, at_start=True),
             Region("[", call_list, at_start=True, in_body=True)),
    render=lambda calls: "<|tool_call|>" + dumps(_objects(calls)),
)

# InternLM 2/2.5: <|action_start|><|plugin|>{"name": ..., "parameters": {...}}<|action_end|>.
INTERNLM = ToolFormat(
    regions=(Region("<|action_start|><|plugin|>", call_object, end="<|action_end|>"),),
    render=_each(lambda n, a: f"<|action_start|><|plugin|>\n{dumps({'name': n, 'parameters': a})}<|action_end|>"),
)

# Jamba: <tool_calls>[{...}, ...]</tool_calls>.
JAMBA = ToolFormat(
    regions=(Region("<tool_calls>", call_list, end="</tool_calls>"),),
    render=lambda calls: f"<tool_calls>{dumps(_objects(calls))}</tool_calls>",
)

GLM45_CALL = XmlCall(open="", name_stops=("<arg_key>", "</tool_call>"), name_close="", param_open="<arg_key>",
                     key_close=("</arg_key>", "<arg_value>"), value_close="</arg_value>", close="", layout="inline")
GLM45 = ToolFormat(
    regions=(Region("<tool_call>", GLM45_CALL.body, end="</tool_call>"),),
    render=_each(lambda n, a: f"<tool_call>{GLM45_CALL.render(n, a)}</tool_call>"),
)

# xLAM: a JSON list as the reply, or in a ```json block, or inside <tool_call> tags.
XLAM = ToolFormat(
    regions=(Region("[", call_list, at_start=True, in_body=True),
             Region("```json", call_object_or_list, end="```"),
             Region("<tool_call>", call_object_or_list, end="</tool_call>")),
    render=lambda calls: dumps(_objects(calls)),
)

# Phi-4-mini: functools[{...}, ...].
PHI4_MINI_JSON = ToolFormat(
    regions=(Region("functools", call_list),),
    render=lambda calls: "functools" + dumps(_objects(calls)),
)

MINIMAX_M2_CALL = XmlCall(open="<invoke name=", name_stops=(">",), name_close=">", param_open="<parameter name=",
                          key_close=(">",), value_close="</parameter>", close="</invoke>", render_name='"{}"',
                          layout="inline")
MINIMAX_M2 = ToolFormat(
    regions=(Region("<minimax:tool_call>", repeated(MINIMAX_M2_CALL.body, "<invoke name=", "</invoke>",
                                                    until="</minimax:tool_call>"), end="</minimax:tool_call>"),),
    render=lambda calls: "<minimax:tool_call>\n" + "\n".join(MINIMAX_M2_CALL.render_all(calls))
    + "\n</minimax:tool_call>",
)



def harmony_for_tools(header: Header) -> str:
    """gpt-oss messages for the tool parser: calls are calls, ``analysis`` is left to a reasoning parser
    (dropped), every other message is content."""
    if header.recipient is not None:
        return CALL
    return DROP if header.channel == "analysis" else CONTENT


def render_harmony(calls: Calls) -> str:
    """Calls as gpt-oss writes them (the first message's ``<|start|>assistant`` is in the prompt)."""
    messages = [f"<|channel|>commentary to=functions.{name} <|constrain|>json{MESSAGE}{dumps(arguments)}<|call|>"
                for name, arguments in calls]
    return "<|start|>assistant".join(messages)


GPT_OSS = ProgramFormat(reader=harmony_program(harmony_for_tools), render=render_harmony,
                        trigger="<|channel|>commentary to=")

FORMATS: Mapping[str, Format] = {
    "hermes": HERMES, "llama3_json": LLAMA3_JSON, "pythonic": PYTHONIC, "mistral": MISTRAL,
    "qwen3_coder": QWEN3_CODER, "deepseek_v3": DEEPSEEK_V3, "deepseek_v31": DEEPSEEK_V31, "granite": GRANITE,
    "internlm": INTERNLM, "jamba": JAMBA, "kimi_k2": KIMI_K2, "glm45": GLM45, "xlam": XLAM,
    "phi4_mini_json": PHI4_MINI_JSON, "minimax_m2": MINIMAX_M2, "gpt-oss": GPT_OSS,
}
"""Every family's format by its registered name."""

GENERIC_BODIES: Mapping[str, tuple[Body, Callable[[Calls], str]]] = {
    "json": (call_object_or_list, lambda calls: "".join(dumps(o) for o in _objects(calls))),
    "json_list": (call_list, lambda calls: dumps(_objects(calls))),
    "xml": (repeated(QWEN3_CODER_CALL.body, "<function="), _each(QWEN3_CODER_CALL.render)),
    "pythonic": (python_list, render_python_list),
}
"""Body formats of the ``generic`` parser: ``(reader, writer)``."""


def generic_format(start: str, end: str, body: str) -> ToolFormat:
    """A format of ``start`` BODY ``end`` regions; each call in its own region when rendered."""
    reader, writer = GENERIC_BODIES[body]
    return ToolFormat(
        regions=(Region(start, reader, end=end),),
        render=lambda calls: "\n".join(f"{start}{writer([call])}{end}" for call in calls),
    )
