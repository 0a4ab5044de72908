"""Generated text to an OpenAI assistant message: the reasoning parser, then the tool-call parser.

:class:`MessageParser` chains the two selected parsers (either may be absent): the reasoning
parser splits off ``reasoning_content``, the tool parser reads the rest. It works on whole texts
(:meth:`MessageParser.parse`) and on streams (:meth:`MessageParser.feed`, then
:meth:`MessageParser.finish`). :func:`detect_tool_parser` picks a parser from a chat template.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from pyagent_core.interfaces.reasoning_parser import ReasoningParser, ReasoningParserContext
from pyagent_core.interfaces.tool_parser import DeltaMessage, ToolCall, ToolParser, ToolParserContext
from pyagent_core.kinds import REASONING_PARSER, TOOL_PARSER, Kind
from pyagent_core.registry import NO_BACKEND, Registry, get_registry
from pyagent_core.types import ReasoningParserSpec, ToolParserSpec


def _tuple(values: Sequence[Any]) -> tuple[Any, ...]:
    return tuple(values)


@attrs.frozen
class AssistantMessage:
    """A parsed reply.

    Attributes:
        content: the visible text, ``None`` when there is none.
        reasoning_content: the reasoning text, ``None`` when there is none.
        tool_calls: the valid tool calls.
        errors: one message per call that was malformed, unknown or invalid for its schema.
    """

    content: str | None
    reasoning_content: str | None = None
    tool_calls: tuple[ToolCall, ...] = attrs.field(default=(), converter=_tuple)
    errors: tuple[str, ...] = attrs.field(default=(), converter=_tuple)

    def to_openai(self) -> dict[str, Any]:
        """The OpenAI chat-completion ``message`` object (``tool_calls`` only when there are some)."""
        message: dict[str, Any] = {
            "role": "assistant", "content": self.content, "reasoning_content": self.reasoning_content,
        }
        if self.tool_calls:
            message["tool_calls"] = [call.to_openai() for call in self.tool_calls]
        return message


class MessageParser:
    """A reasoning parser and a tool parser in a chain (see the module docstring).

    Args:
        tool_parser: reads tool calls out of the content, or ``None``.
        reasoning_parser: splits off the reasoning first, or ``None``.
    """

    def __init__(self, tool_parser: ToolParser | None = None, reasoning_parser: ReasoningParser | None = None) -> None:
        self.tool_parser = tool_parser
        self.reasoning_parser = reasoning_parser
        self._text = ""
        self._content = ""

    def parse(self, text: str) -> AssistantMessage:
        """Parse a complete reply."""
        reasoning, content = self.reasoning_parser.extract(text) if self.reasoning_parser else (None, text)
        if self.tool_parser is None:
            return AssistantMessage(content=content or None, reasoning_content=reasoning)
        extracted = self.tool_parser.extract(content or "")
        return AssistantMessage(content=extracted.content, reasoning_content=reasoning,
                                tool_calls=extracted.tool_calls, errors=extracted.errors)

    def feed(self, delta: str) -> DeltaMessage | None:
        """What ``delta`` adds to the streamed reply (``None``: nothing yet)."""
        previous, self._text = self._text, self._text + delta
        if self.reasoning_parser is None:
            return self._tools(delta, None)
        step = self.reasoning_parser.extract_delta(previous, delta)
        return self._tools(step.content or "", step.reasoning_content) if step else None

    def finish(self) -> DeltaMessage | None:
        """End of the stream: everything still held back."""
        text, self._text = self._text, ""
        step = self.reasoning_parser.finish(text) if self.reasoning_parser else None
        tail = self._tools(step.content or "", step.reasoning_content) if step else None
        if self.tool_parser is None:
            return tail
        content, self._content = self._content, ""
        return _merge(tail, self.tool_parser.finish(content))

    def _tools(self, piece: str, reasoning: str | None) -> DeltaMessage | None:
        if self.tool_parser is None:
            return _delta(piece or None, reasoning, ())
        previous, self._content = self._content, self._content + piece
        step = self.tool_parser.extract_delta(previous, piece) if piece else None
        return _merge(_delta(None, reasoning, ()), step)


def _delta(content: str | None, reasoning: str | None, calls: Sequence[Any]) -> DeltaMessage | None:
    if content is None and reasoning is None and not calls:
        return None
    return DeltaMessage(content=content, reasoning_content=reasoning, tool_calls=calls)


def _join(a: str | None, b: str | None) -> str | None:
    return b if a is None else a if b is None else a + b


def _merge(first: DeltaMessage | None, second: DeltaMessage | None) -> DeltaMessage | None:
    if first is None or second is None:
        return first or second
    return _delta(_join(first.content, second.content), _join(first.reasoning_content, second.reasoning_content),
                  (*first.tool_calls, *second.tool_calls))


def build_message_parser(
    tool_parser: str | None = None,
    reasoning_parser: str | None = None,
    *,
    tools: Sequence[Mapping[str, Any]] = (),
    tool_options: Mapping[str, Any] | None = None,
    reasoning_options: Mapping[str, Any] | None = None,
    registry: Registry | None = None,
) -> MessageParser:
    """Select the named parsers from the registry (options validated) and chain them.

    Each is built ``cls(options, context)``: the tool parser with a :class:`ToolParserContext` of
    ``tools``, the reasoning parser with a :class:`ReasoningParserContext`.

    Raises:
        SelectionError: a name is unknown or unavailable (the message lists the choices).
        OptionError: a bad option. RequestError: malformed ``tools``.
    """
    registry = registry or get_registry()
    tools_parser: ToolParser | None = None
    reasoning: ReasoningParser | None = None
    if tool_parser:
        selection = registry.select(TOOL_PARSER, tool_parser, tool_options)
        tools_parser = registry.load(selection.backend)(dict(selection.options), ToolParserContext(tools=tools))
    if reasoning_parser:
        chosen = registry.select(REASONING_PARSER, reasoning_parser, reasoning_options)
        reasoning = registry.load(chosen.backend)(dict(chosen.options), ReasoningParserContext())
    return MessageParser(tools_parser, reasoning)


def detect_parser(kind: Kind[ToolParserSpec] | Kind[ReasoningParserSpec], chat_template: str,
                  registry: Registry | None = None) -> str | None:
    """The registered parser of ``kind`` whose ``template_markers`` all occur in ``chat_template``.

    The most specific match wins: the most markers, then the most marked characters, then the name.
    ``None`` when no parser's markers all occur.
    """
    registry = registry or get_registry()
    scored = []
    for backend in registry.backends(kind):
        markers = backend.spec.template_markers
        if markers and all(marker in chat_template for marker in markers):
            scored.append((-len(markers), -sum(map(len, markers)), backend.name))
    return min(scored)[2] if scored else None


def detect_tool_parser(chat_template: str, registry: Registry | None = None) -> str | None:
    """The tool-call parser for a model with this chat template, or ``None`` (see :func:`detect_parser`)."""
    return detect_parser(TOOL_PARSER, chat_template, registry)


def detect_reasoning_parser(chat_template: str, registry: Registry | None = None) -> str | None:
    """The reasoning parser for a model with this chat template, or ``None`` (see :func:`detect_parser`)."""
    return detect_parser(REASONING_PARSER, chat_template, registry)


def choose_parser(kind: Kind[ToolParserSpec] | Kind[ReasoningParserSpec], given: str | None,
                  chat_template: str | None = None, registry: Registry | None = None) -> tuple[str | None, str]:
    """The parser of ``kind`` a host uses, and where the choice came from.

    DESIGN rule 5 for a kind without a default: ``given`` (a command-line flag or an argument) >
    ``PYAGENT_<KIND>`` > ``pyagent.toml`` > the user config > the parser detected from
    ``chat_template`` (when the host passes one: ``pyagent serve``) > none. ``"none"`` from any of
    the sources turns the parser off (no detection). The name is checked when the parser is built
    (:func:`build_message_parser`).
    """
    registry = registry or get_registry()
    if given is not None:
        return (None if given == NO_BACKEND else given), "the flag"
    configured = registry.settings.selected(kind.name)
    if configured is not None:
        name, source = configured
        return (None if name == NO_BACKEND else name), source
    if chat_template is not None:
        detected = detect_parser(kind, chat_template, registry)
        if detected is not None:
            return detected, "detected from the chat template"
    return None, "none selected"
