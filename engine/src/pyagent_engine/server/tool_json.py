"""Forced tool calls on a server without a tool parser, as vLLM serves them: the reply is JSON, read as calls.

With ``tool_choice`` naming a function, the reply is constrained to that function's parameter schema
and is its arguments. With ``"required"``, the reply is a JSON array of ``{"name", "parameters"}``
objects, each ``name`` one of the tools and its ``parameters`` following that tool's schema (at
least one call; exactly one with ``parallel_tool_calls: false``); ``$defs`` of the tools' schemas
move to the top of the array's schema, where their references point. A reply that is not what the
constraint describes (cut short by ``max_tokens``, say) is reported as a malformed call.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from pyagent_core.errors import RequestError
from pyagent_core.interfaces.grammar import ConstraintSpec
from pyagent_core.interfaces.tool_parser import (
    DeltaMessage,
    DeltaToolCall,
    ExtractedToolCalls,
    ToolCall,
    ToolParser,
    ToolParserContext,
)

ANY_OBJECT: dict[str, Any] = {"type": "object"}
"""The parameters of a function that declares none."""


def _parameters(tool: Mapping[str, Any]) -> dict[str, Any]:
    return dict(tool["function"].get("parameters") or ANY_OBJECT)


def _named(tool_choice: str | Mapping[str, Any]) -> str | None:
    return None if isinstance(tool_choice, str) else str(tool_choice["function"]["name"])


def json_constraint(tools: Sequence[Mapping[str, Any]], tool_choice: str | Mapping[str, Any],
                    parallel: bool) -> ConstraintSpec:
    """The JSON schema the reply follows for ``tool_choice`` (``"required"`` or a named function).

    Raises:
        RequestError: two tools define the same ``$defs`` entry differently.
    """
    name = _named(tool_choice)
    if name is not None:
        [tool] = [t for t in tools if t["function"]["name"] == name]
        return ConstraintSpec(json_schema=_parameters(tool))
    definitions: dict[str, Any] = {}
    calls = []
    for tool in tools:
        parameters = _parameters(tool)
        for key, definition in parameters.pop("$defs", {}).items():
            if definitions.setdefault(key, definition) != definition:
                raise RequestError(f"two tools define $defs/{key} differently; give the definitions distinct names")
        calls.append({"type": "object", "properties": {"name": {"enum": [tool["function"]["name"]]},
                                                       "parameters": parameters},
                      "required": ["name", "parameters"], "additionalProperties": False})
    schema: dict[str, Any] = {"type": "array", "minItems": 1, "items": {"anyOf": calls}}
    if not parallel:
        schema["maxItems"] = 1
    if definitions:
        schema["$defs"] = definitions
    return ConstraintSpec(json_schema=schema)


class JsonToolCalls(ToolParser):
    """Reads the reply of :func:`json_constraint` back as calls; streamed, the calls come at the end.

    Args:
        options: unused (the reader has none).
        context: the request's tools.
        tool_choice: ``"required"`` or the named function the reply was constrained for.
    """

    def __init__(self, options: Mapping[str, Any], context: ToolParserContext,
                 tool_choice: str | Mapping[str, Any]) -> None:
        super().__init__(options, context)
        self.name = _named(tool_choice)

    def extract(self, text: str) -> ExtractedToolCalls:
        """The calls of a whole reply; a reply that does not parse is one error, its text the content."""
        try:
            value = json.loads(text)
            if self.name is not None:
                if not isinstance(value, dict):
                    raise ValueError("the arguments are not a JSON object")
                calls = [ToolCall(self.name, text.strip())]
            else:
                calls = [ToolCall(str(call["name"]), json.dumps(call["parameters"], ensure_ascii=False))
                         for call in value]
        except (ValueError, KeyError, TypeError) as error:
            return ExtractedToolCalls(content=text or None,
                                      errors=(f"the reply is not the JSON the tool choice asked for ({error}): "
                                              f"{text[:80]!r}",))
        return ExtractedToolCalls(content=None, tool_calls=calls)

    def extract_delta(self, previous_text: str, delta_text: str) -> DeltaMessage | None:
        """Nothing until the end: a JSON reply is read whole."""
        return None

    def finish(self, text: str) -> DeltaMessage | None:
        """The whole reply: its calls, or its text when it does not parse."""
        extracted = self.extract(text)
        if not extracted.tool_calls:
            return DeltaMessage(content=extracted.content) if extracted.content else None
        return DeltaMessage(tool_calls=[DeltaToolCall(index, id=call.id, name=call.name, arguments=call.arguments)
                                        for index, call in enumerate(extracted.tool_calls)])
