"""Tool-call parser interface: OpenAI-shaped tool calls out of a model's raw text.

A parser turns the generated text into assistant content plus tool calls, either once at the end
(:meth:`ToolParser.extract`) or while streaming (:meth:`StreamingParser.extract_delta`, then
:meth:`StreamingParser.finish`). The two must agree: concatenating the streamed content gives the
extracted content, and the streamed fragments of call ``i`` give its name and arguments.

Streaming rules, shared with reasoning parsers: one parser instance follows one stream at a time
(:meth:`StreamingParser.reset` starts another). ``previous_text`` is everything before
``delta_text``. A parser may hold text back (a possible start of a marker) and emit it later; at the
end :meth:`StreamingParser.finish` releases anything still held. The first delta of tool call ``i``
carries its ``id`` and ``name``; later deltas of that call carry only argument fragments.

Every parser is built the same way, ``cls(options, context)``: ``options`` are its validated options
(defaults filled in) and ``context`` a frozen record for its kind, :class:`ToolParserContext` (the
request's tools) here, :class:`~pyagent_core.interfaces.reasoning_parser.ReasoningParserContext`
for reasoning parsers. One parser instance serves one request.
"""

from __future__ import annotations

import uuid
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from typing import Any, Generic, TypeVar

import attrs

from pyagent_core.errors import RequestError
from pyagent_core.interfaces.grammar import ConstraintSpec


def new_tool_call_id() -> str:
    """A fresh OpenAI-style tool call id, ``call_`` followed by 24 hex digits."""
    return "call_" + uuid.uuid4().hex[:24]


@attrs.frozen
class ToolCall:
    """A complete tool call.

    Attributes:
        name: the function's name.
        arguments: the arguments as JSON text (an object).
        id: unique id of the call; generated when not given.
        type: always ``"function"`` today.
    """

    name: str
    arguments: str
    id: str = attrs.field(factory=new_tool_call_id)
    type: str = "function"

    def to_openai(self) -> dict[str, Any]:
        """The call as an OpenAI ``tool_calls`` entry."""
        function = {"name": self.name, "arguments": self.arguments}
        return {"id": self.id, "type": self.type, "function": function}


@attrs.frozen
class DeltaToolCall:
    """A streamed fragment of tool call number ``index`` (0-based, in order of appearance).

    Attributes:
        index: which call of the message this fragment belongs to.
        id: the call's id, only in its first fragment.
        name: the function's name, only in its first fragment.
        arguments: the next piece of the arguments' JSON text (may be empty).
    """

    index: int
    id: str | None = None
    name: str | None = None
    arguments: str = ""

    def to_openai(self) -> dict[str, Any]:
        """The fragment as an OpenAI streaming ``tool_calls`` entry (absent fields left out)."""
        function: dict[str, str] = {"arguments": self.arguments}
        out: dict[str, Any] = {"index": self.index, "function": function}
        if self.id is not None:
            out.update(id=self.id, type="function")
        if self.name is not None:
            function["name"] = self.name
        return out


def _fragments(values: Iterable[DeltaToolCall]) -> tuple[DeltaToolCall, ...]:
    return tuple(values)


@attrs.frozen
class DeltaMessage:
    """What one streaming step adds to the assistant message (OpenAI ``delta`` shaped).

    Attributes:
        content: new visible text, or ``None``.
        reasoning_content: new reasoning text, or ``None``.
        tool_calls: new tool-call fragments.
    """

    content: str | None = None
    reasoning_content: str | None = None
    tool_calls: tuple[DeltaToolCall, ...] = attrs.field(default=(), converter=_fragments)


def _calls(values: Iterable[ToolCall]) -> tuple[ToolCall, ...]:
    return tuple(values)


def _strings(values: Iterable[str]) -> tuple[str, ...]:
    return tuple(values)


@attrs.frozen
class ExtractedToolCalls:
    """The result of parsing a complete message.

    Attributes:
        content: the text outside tool calls, ``None`` when there is none.
        tool_calls: the valid calls, in order.
        errors: one message per call that could not be parsed (bad JSON, unknown shape); such
            calls are left out of ``tool_calls``.
    """

    content: str | None
    tool_calls: tuple[ToolCall, ...] = attrs.field(default=(), converter=_calls)
    errors: tuple[str, ...] = attrs.field(default=(), converter=_strings)

    @property
    def tools_called(self) -> bool:
        """Whether at least one valid tool call was found."""
        return bool(self.tool_calls)


def _tools(values: Iterable[Mapping[str, Any]]) -> tuple[Mapping[str, Any], ...]:
    return tuple(values)


@attrs.frozen
class ToolParserContext:
    """What a tool-call parser is built for: the request it parses replies of."""

    tools: tuple[Mapping[str, Any], ...] = attrs.field(default=(), converter=_tools)
    """The request's tools as OpenAI tool definitions
    (``{"type": "function", "function": {"name": ..., "parameters": {...}}}``), in request order;
    empty when the request offers none. A parser checks them itself and raises
    :class:`~pyagent_core.errors.RequestError` for one it cannot use."""


ContextT = TypeVar("ContextT")


class StreamingParser(ABC, Generic[ContextT]):
    """Streaming half shared by tool-call and reasoning parsers (rules in the module docstring).

    Args:
        options: the parser's validated options (defaults filled in).
        context: the kind's context record (:class:`ToolParserContext` or
            :class:`~pyagent_core.interfaces.reasoning_parser.ReasoningParserContext`).

    Attributes:
        options: a copy of ``options``.
        context: ``context``.
    """

    def __init__(self, options: Mapping[str, Any], context: ContextT) -> None:
        self.options = dict(options)
        self.context = context

    @classmethod
    def check_available(cls) -> None:
        """Raise with a reason if this parser cannot run here (deep check, ``--check``)."""

    @abstractmethod
    def extract_delta(self, previous_text: str, delta_text: str) -> DeltaMessage | None:
        """What ``delta_text`` adds to the message; ``None`` when nothing can be emitted yet.

        Never raises on odd model output: malformed text becomes content or is dropped.
        """

    def finish(self, text: str) -> DeltaMessage | None:
        """End of stream (``text`` is the whole text): emit what was held back. Default: nothing."""
        return None

    def reset(self) -> None:
        """Forget the current stream's state before following another. Default: nothing."""


class ToolParser(StreamingParser[ToolParserContext]):
    """Finds tool calls in generated text.

    Args:
        options: the parser's validated options (defaults filled in).
        context: the request's tools (:class:`ToolParserContext`).
    """

    @abstractmethod
    def extract(self, text: str) -> ExtractedToolCalls:
        """Split a complete message into content and tool calls; never raises on odd model output."""

    def constraint_for(self, tool_choice: str | Mapping[str, Any]) -> ConstraintSpec | None:
        """The constraint a grammar backend enforces for ``tool_choice``, written in this parser's format.

        ``"auto"`` and ``"none"`` need none (``None``). For ``"required"`` and a named function
        (``{"type": "function", "function": {"name": ...}}``) a parser returns a constraint whose
        output it parses back into calls of the allowed tools, typically a structural tag with one
        structure per tool (the text before the arguments, the parameters' schema, the text after)
        and ``"at_least_one": true``, so the output opens with a call.

        Raises:
            RequestError: the parser cannot express ``tool_choice`` (the default for anything but
                ``"auto"``/``"none"``), or ``tool_choice`` is malformed.
        """
        if tool_choice in ("auto", "none"):
            return None
        raise RequestError(
            f"tool parser {type(self).__name__} supplies no constraint for tool_choice={tool_choice!r}; "
            "use tool_choice='auto'"
        )
