"""The :class:`~pyagent_core.interfaces.tool_parser.ToolParser` s: one streaming machine, one class per family.

:class:`FormatToolParser` runs a format's program for both ``extract`` and streaming (see
:mod:`pyagent_parser_base.machine`), validates calls against the request's tools, and
derives the constraint for ``tool_choice`` from the format's own writer, so the constraint
describes exactly what the parser reads.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from pyagent_core.errors import OptionError, RequestError
from pyagent_core.interfaces.grammar import ConstraintSpec
from pyagent_core.interfaces.tool_parser import ExtractedToolCalls, ToolParser, ToolParserContext
from pyagent_parser_base.emitter import Emitter, ToolSet
from pyagent_parser_base.jsonscan import dumps
from pyagent_parser_base.machine import Run, Streaming
from pyagent_parser_base.regions import ToolFormat
from pyagent_tool_parsers import formats

_SLOT = {"\u0000": 0}
"""Arguments no real call has: where their JSON lands in a written call is where arguments go."""


class FormatToolParser(Streaming, ToolParser):
    """A tool parser defined by a format (:mod:`pyagent_tool_parsers.formats`); subclasses set ``format``.

    Raises:
        RequestError: the context's ``tools`` are not OpenAI function definitions.
    """

    format: ClassVar[formats.Format]

    def __init__(self, options: Mapping[str, Any], context: ToolParserContext) -> None:
        super().__init__(options, context)
        self.toolset = ToolSet(context.tools)

    def active_format(self) -> formats.Format:
        """The format this instance reads (the class's, or one built from options)."""
        return self.format

    def new_run(self) -> Run:
        """A fresh run of the format's program."""
        return Run(self.active_format().program, Emitter(self.toolset))

    def extract(self, text: str) -> ExtractedToolCalls:
        """Content, valid calls and errors of a complete message (never raises on model output)."""
        return self.run_whole(text).emitter.result()

    def render(self, calls: Sequence[tuple[str, dict[str, Any]]]) -> str:
        """``calls`` (name, arguments) written in this format, as the model writes them."""
        return self.active_format().render(calls)

    def constraint_for(self, tool_choice: str | Mapping[str, Any]) -> ConstraintSpec | None:
        """The constraint enforcing ``tool_choice``: ``None`` for ``"auto"``/``"none"``, else a structural tag.

        The tag has one structure per allowed tool: the text this format writes before the
        arguments, the tool's parameter schema, and the text after them; ``at_least_one`` makes the
        output open with a call. Where the format writes each call whole (nothing wraps several
        calls), the tag has the ``separator`` it writes between two calls: the output is calls only
        and ends after the last one, as OpenAI's and vLLM's forced calls do. Otherwise its trigger
        is what every call starts with (text may follow the calls).
        ``"required"`` allows every tool, ``{"type": "function", "function": {"name": NAME}}`` only NAME.

        Raises:
            RequestError: an unknown ``tool_choice`` or tool, no tools, or a format whose
                arguments are not JSON (XML parameters, Python keywords), which a JSON-schema
                structural tag cannot describe.
        """
        names = self._chosen(tool_choice)
        if names is None:
            return None
        slot = dumps(_SLOT)
        structures: list[dict[str, Any]] = []
        for name in names:
            written = self.render([(name, dict(_SLOT))])
            if written.count(slot) != 1:
                raise RequestError(
                    f"the {type(self).__name__} format does not write arguments as JSON, so no structural tag "
                    f"can enforce tool_choice={tool_choice!r}; use tool_choice='auto' with this parser"
                )
            begin, end = written.split(slot)
            structures.append({"begin": begin, "schema": dict(self.toolset.schemas[name]), "end": end})
        separator = self._separator(names[0], structures[0])
        layout = {"separator": separator} if separator is not None else {
            "triggers": [self._trigger([s["begin"] for s in structures])]}
        return ConstraintSpec(structural_tag={"structures": structures, **layout, "at_least_one": True})

    def _separator(self, name: str, structure: Mapping[str, Any]) -> str | None:
        """What this format writes between two whole calls of ``name`` (``structure``'s begin, arguments and
        end each time), or ``None`` when two calls are written otherwise (inside one wrapper)."""
        pieces = self.render([(name, dict(_SLOT)), (name, dict(_SLOT))]).split(dumps(_SLOT))
        if len(pieces) != 3:
            return None
        first, middle, last = pieces
        begin, end = structure["begin"], structure["end"]
        whole = (first == begin and last == end and len(middle) >= len(begin) + len(end)
                 and middle.startswith(end) and middle.endswith(begin))
        return middle[len(end):len(middle) - len(begin)] if whole else None

    def _chosen(self, tool_choice: str | Mapping[str, Any]) -> list[str] | None:
        if tool_choice in ("auto", "none"):
            return None
        if not self.toolset:
            raise RequestError(f"tool_choice={tool_choice!r} needs tools; the request has none")
        if tool_choice == "required":
            return list(self.toolset.schemas)
        function = tool_choice.get("function") if isinstance(tool_choice, Mapping) else None
        name = function.get("name") if isinstance(function, Mapping) else None
        if not isinstance(name, str):
            raise RequestError(
                f"tool_choice {tool_choice!r} is not 'auto', 'none', 'required' or "
                '{"type": "function", "function": {"name": "..."}}'
            )
        if name not in self.toolset.schemas:
            known = ", ".join(self.toolset.schemas)
            raise RequestError(f"tool_choice names {name!r}, which is not among the tools: {known}")
        return [name]

    def _trigger(self, begins: list[str]) -> str:
        fmt = self.active_format()
        starts = [r.start for r in fmt.regions] if isinstance(fmt, ToolFormat) else []
        for candidate in (fmt.trigger, *starts):
            if candidate and all(b.startswith(candidate) for b in begins):
                return candidate
        return os.path.commonprefix(begins)  # noqa: RUF071 - character prefix of texts is what a trigger is


class HermesToolParser(FormatToolParser):
    """Hermes / Qwen2.5 / Qwen3: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``."""

    format = formats.HERMES


class Llama3JsonToolParser(FormatToolParser):
    """Llama 3.1/3.2: ``{"name": ..., "parameters": {...}}`` (``;``-separated, optional ``<|python_tag|>``)."""

    format = formats.LLAMA3_JSON


class PythonicToolParser(FormatToolParser):
    """Llama 3.2 / Llama 4 pythonic: ``[get_weather(city="Paris"), ...]``."""

    format = formats.PYTHONIC


class MistralToolParser(FormatToolParser):
    """Mistral: ``[TOOL_CALLS] [{...}]`` (older) and ``[TOOL_CALLS]name[ARGS]{...}`` / ``name{...}`` (v11+)."""

    format = formats.MISTRAL


class Qwen3CoderToolParser(FormatToolParser):
    """Qwen3-Coder: ``<tool_call><function=NAME><parameter=KEY>VALUE</parameter></function></tool_call>``."""

    format = formats.QWEN3_CODER


class DeepSeekV3ToolParser(FormatToolParser):
    """DeepSeek-V3 / R1: ``<｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME`` then a ```json block."""

    format = formats.DEEPSEEK_V3


class DeepSeekV31ToolParser(FormatToolParser):
    """DeepSeek-V3.1: ``<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}<｜tool▁call▁end｜>``."""

    format = formats.DEEPSEEK_V31


class GraniteToolParser(FormatToolParser):
    """Granite 3.0 / 3.1: ``<|tool_call|>[{...}]`` or ``<tool_call>[{...}]`` opening the reply."""

    format = formats.GRANITE


class InternLMToolParser(FormatToolParser):
    """InternLM 2 / 2.5: ``<|action_start|><|plugin|>{...}<|action_end|>``."""

    format = formats.INTERNLM


class JambaToolParser(FormatToolParser):
    """Jamba: ``<tool_calls>[{...}]</tool_calls>``."""

    format = formats.JAMBA


class KimiK2ToolParser(FormatToolParser):
    """Kimi-K2: ``<|tool_call_begin|>functions.NAME:IDX<|tool_call_argument_begin|>{...}<|tool_call_end|>``."""

    format = formats.KIMI_K2


class Glm45ToolParser(FormatToolParser):
    """GLM-4.5: ``<tool_call>NAME<arg_key>KEY</arg_key><arg_value>VALUE</arg_value></tool_call>``."""

    format = formats.GLM45


class XlamToolParser(FormatToolParser):
    """xLAM: a JSON list of calls as the reply, in a ```json block, or in ``<tool_call>`` tags."""

    format = formats.XLAM


class Phi4MiniJsonToolParser(FormatToolParser):
    """Phi-4-mini: ``functools[{...}]``."""

    format = formats.PHI4_MINI_JSON


class MinimaxM2ToolParser(FormatToolParser):
    """MiniMax-M2: ``<minimax:tool_call><invoke name="NAME"><parameter name="KEY">VALUE</parameter></invoke>``."""

    format = formats.MINIMAX_M2


class GptOssToolParser(FormatToolParser):
    """gpt-oss (harmony): calls are ``commentary`` messages to ``functions.NAME``; ``final`` is content."""

    format = formats.GPT_OSS


class GenericToolParser(FormatToolParser):
    """Any format of ``start`` BODY ``end`` regions, configured by options (``start``, ``end``, ``body``)."""

    def __init__(self, options: Mapping[str, Any], context: ToolParserContext) -> None:
        super().__init__(options, context)
        if not self.options["start"]:
            raise OptionError("option 'start' of tool parser 'generic' is empty; give the marker that opens a call")
        self._format = formats.generic_format(self.options["start"], self.options["end"], self.options["body"])

    def active_format(self) -> formats.Format:
        """The format the options describe."""
        return self._format
