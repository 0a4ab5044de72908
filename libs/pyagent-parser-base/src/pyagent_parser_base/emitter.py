"""Where a format's events go: content and reasoning channels, tool calls, errors.

A format reports what it reads (:meth:`Emitter.text`, :meth:`Emitter.start_call`, ...). The
emitter keeps the whole message for :meth:`Emitter.result` and, for streaming, the pieces added
since the last :meth:`Emitter.take_delta`. Both views come from the same events.

A call's arguments are checked as they arrive (:class:`~pyagent_parser_base.jsonprefix.ObjectPrefix`):
the stream passes on only text that begins a JSON object, and a call appears in it (id and name)
with the first such text. The bracket completing the arguments is held until the call ends and
its arguments match the tool's schema. So, however the text is split, the streamed calls whose
arguments are complete JSON are exactly the calls of :meth:`Emitter.result`; a call that fails
after it began streaming is left with arguments that are not complete JSON, and is reported in
``errors``.

Channels trim the whitespace around their text (leading whitespace is dropped, trailing
whitespace is held until more text follows), so text between and around markers (``"\\n"``
between two calls) does not become content.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from pyagent_core.errors import RequestError
from pyagent_core.interfaces.tool_parser import (
    DeltaMessage,
    DeltaToolCall,
    ExtractedToolCalls,
    ToolCall,
    new_tool_call_id,
)
from pyagent_parser_base.jsonprefix import ObjectPrefix
from pyagent_parser_base.source import Malformed


class ToolSet:
    """The request's tools by name, with their parameter schemas (an empty set accepts any call).

    Raises:
        RequestError: a tool is not an OpenAI function definition or its schema is invalid.
    """

    def __init__(self, tools: Sequence[Mapping[str, Any]]) -> None:
        self.schemas: dict[str, Mapping[str, Any]] = {}
        for number, tool in enumerate(tools):
            function = tool.get("function") if isinstance(tool, Mapping) else None
            name = function.get("name") if isinstance(function, Mapping) else None
            if not isinstance(name, str) or not name:
                raise RequestError(
                    f"tool {number} is not an OpenAI function definition: {tool!r}; write "
                    '{"type": "function", "function": {"name": "...", "parameters": {...}}}'
                )
            parameters = function.get("parameters") or {"type": "object"}  # type: ignore[union-attr]
            if not isinstance(parameters, Mapping):
                raise RequestError(f"the parameters of tool {name!r} must be a JSON schema object, got {parameters!r}")
            self.schemas[name] = parameters
        self._validators: dict[str, Any] = {}

    def __bool__(self) -> bool:
        return bool(self.schemas)

    def knows(self, name: str) -> bool:
        """Whether a call of ``name`` is allowed (always, when no tools were given)."""
        return not self.schemas or name in self.schemas

    def property_schema(self, tool: str, key: str) -> Mapping[str, Any] | None:
        """The schema of parameter ``key`` of ``tool``, if the tool declares it."""
        properties = self.schemas.get(tool, {}).get("properties")
        schema = properties.get(key) if isinstance(properties, Mapping) else None
        return schema if isinstance(schema, Mapping) else None

    def problem(self, name: str, arguments: str) -> str | None:
        """Why ``arguments`` are not valid for ``name`` (JSON object, then its schema); ``None`` if valid."""
        try:
            value = json.loads(arguments)
        except (ValueError, RecursionError) as error:
            return f"its arguments are not valid JSON ({error}): {arguments[:200]!r}"
        if not isinstance(value, dict):
            return f"its arguments are not a JSON object: {arguments[:200]!r}"
        if name not in self.schemas:
            return None
        validator = self._validator(name)
        errors = sorted(validator.iter_errors(value), key=lambda e: list(e.absolute_path))
        if errors:
            where = "/".join(map(str, errors[0].absolute_path)) or "(the arguments)"
            return f"its arguments do not match the tool's schema at {where}: {errors[0].message}"
        return None

    def _validator(self, name: str) -> Any:
        if name not in self._validators:
            self._validators[name] = _compiled(name, json.dumps(self.schemas[name], sort_keys=True))
        return self._validators[name]


@functools.lru_cache(maxsize=512)
def _compiled(name: str, schema_text: str) -> Any:
    """A jsonschema validator for a tool's parameters (checked once; requests reuse their tools)."""
    import jsonschema

    schema = json.loads(schema_text)
    cls = jsonschema.validators.validator_for(schema)
    try:
        cls.check_schema(schema)
    except jsonschema.SchemaError as error:
        raise RequestError(f"the parameters schema of tool {name!r} is invalid: {error.message}") from None
    return cls(schema)


class Channel:
    """One text stream of the message (content or reasoning), trimmed of surrounding whitespace."""

    def __init__(self) -> None:
        self.started = False
        self.held = ""
        self.pending: list[str] = []
        self.written: list[str] = []

    def write(self, text: str) -> None:
        """Add text; whitespace at the start is dropped, trailing whitespace waits for more text."""
        if not self.started:
            text = text.lstrip()
            if not text:
                return
            self.started = True
        body = text.rstrip()
        if not body:
            self.held += text
            return
        piece = self.held + body
        self.held = text[len(body):]
        self.pending.append(piece)
        self.written.append(piece)

    def take(self) -> str | None:
        """The text added since the last call, or ``None``."""
        if not self.pending:
            return None
        piece = "".join(self.pending)
        self.pending.clear()
        return piece

    def text(self) -> str | None:
        """Everything written, or ``None`` when nothing was."""
        return "".join(self.written) or None


@attrs.define
class _Call:
    name: str
    id: str
    check: ObjectPrefix = attrs.field(factory=ObjectPrefix)
    arguments: list[str] = attrs.field(factory=list)
    index: int | None = None  # its number in the stream, once it appeared there
    ended: bool = False
    failed: bool = False


class Emitter:
    """Collects a message from format events; see the module docstring.

    Args:
        tools: the request's tools; calls of other tools are reported in ``errors`` and not emitted.
    """

    def __init__(self, tools: ToolSet) -> None:
        self.tools = tools
        self.content = Channel()
        self.reasoning = Channel()
        self.calls: list[_Call] = []
        self.errors: list[str] = []
        self.current: _Call | None = None
        self.rejecting = False
        self.calls_started = 0
        self._streamed = 0
        self._ids: set[str] = set()
        self._fragments: list[tuple[int, _Call | None, list[str]]] = []  # index, the call if it starts here, pieces

    def text(self, text: str) -> None:
        """Visible content."""
        self.content.write(text)

    def think(self, text: str) -> None:
        """Reasoning content."""
        self.reasoning.write(text)

    def start_call(self, name: str, call_id: str | None = None) -> None:
        """A call of ``name`` begins (``call_id``: the model's own id, if the format carries one)."""
        self.calls_started += 1
        self.current = None
        reason = None
        if not name or any(c.isspace() for c in name):
            reason = "not a function name"
        elif not self.tools.knows(name):
            reason = f"no such tool in the request (its tools: {', '.join(sorted(self.tools.schemas))})"
        self.rejecting = reason is not None
        if reason is not None:
            self.errors.append(f"tool call {name!r}: {reason}")
            return
        if not call_id or call_id in self._ids:
            call_id = new_tool_call_id()
        self._ids.add(call_id)
        self.current = _Call(name, call_id)
        self.calls.append(self.current)

    def args(self, text: str) -> None:
        """The next piece of the current call's arguments (JSON text).

        Arguments that cannot begin a JSON object fail the call (reported; the rest of its
        arguments is ignored), while the format's reader goes on to the next call.
        """
        call = self.current
        if call is None or not text:
            return
        call.arguments.append(text)
        try:
            released = call.check.feed(text)
        except Malformed as failure:
            self.fail(str(failure))
            self.rejecting = True  # the call is reported: a failure of its region adds nothing
            return
        self._stream(call, released)

    def _stream(self, call: _Call, text: str) -> None:
        if not text:
            return
        if call.index is None:
            call.index = self._streamed
            self._streamed += 1
            self._fragments.append((call.index, call, [text]))
        elif self._fragments and self._fragments[-1][0] == call.index:
            self._fragments[-1][2].append(text)
        else:
            self._fragments.append((call.index, None, [text]))

    def end_call(self) -> None:
        """The current call is complete: its arguments are checked (a JSON object matching the tool's schema)
        and either its stream is completed or it is reported in ``errors``."""
        call = self.current
        self.current = None
        self.rejecting = False
        if call is None:
            return
        try:
            rest = call.check.close()
        except Malformed as failure:
            call.failed = True
            self.errors.append(f"tool call {call.name!r}: {failure}")
            return
        problem = self.tools.problem(call.name, "".join(call.arguments))
        if problem is not None:
            call.failed = True
            self.errors.append(f"tool call {call.name!r}: {problem}")
            return
        call.ended = True
        self._stream(call, rest)

    def fail(self, message: str) -> None:
        """What was being read could not be parsed: the current call (if any) is dropped and reported."""
        call = self.current
        if call is not None:
            call.failed = True
            self.errors.append(f"tool call {call.name!r}: {message}")
        elif not self.rejecting:
            self.errors.append(message)
        self.current = None
        self.rejecting = False

    def take_delta(self) -> DeltaMessage | None:
        """What was added since the last call, as a streaming delta; ``None`` when nothing was."""
        content, reasoning = self.content.take(), self.reasoning.take()
        fragments = tuple(
            DeltaToolCall(index=index, id=call.id if call else None, name=call.name if call else None,
                          arguments="".join(pieces))
            for index, call, pieces in self._fragments)
        self._fragments = []
        if content is None and reasoning is None and not fragments:
            return None
        return DeltaMessage(content=content, reasoning_content=reasoning, tool_calls=fragments)

    def result(self) -> ExtractedToolCalls:
        """The whole message: content, the calls that ended with valid arguments, and every error."""
        calls = [ToolCall(name=c.name, arguments="".join(c.arguments), id=c.id) for c in self.calls if c.ended]
        return ExtractedToolCalls(content=self.content.text(), tool_calls=calls, errors=self.errors)
