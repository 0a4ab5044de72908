"""A chat request's tools: which are offered, the parsers that read the reply, the constraint that forces a call.

``tool_choice`` ``"none"`` offers no tools and parses no calls; ``"auto"`` (the default with tools)
offers them and parses the calls the model makes; ``"required"`` and a named function also constrain
the output with the tool parser's own constraint (a structural tag built from the tools' parameter
schemas in the parser's format, see ``ToolParser.constraint_for``), so even a small model writes a
call that parses and whose arguments validate. ``parallel_tool_calls=false`` stops the constraint
after the first call.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import attrs

from pyagent_core.interfaces.grammar import ConstraintSpec
from pyagent_core.parsing import MessageParser, build_message_parser
from pyagent_engine.server.errors import bad_request
from pyagent_engine.server.protocol import ChatCompletionRequest
from pyagent_engine.server.state import ServerConfig
from pyagent_engine.structured.checks import check_json_schema


@attrs.frozen
class ToolPlan:
    """How a chat request uses tools.

    Attributes:
        config: the server's settings (its parsers and their options).
        tools: the OpenAI tool definitions offered to the model (empty with ``tool_choice="none"``).
        parse_calls: whether calls are read out of the reply (with the server's tool parser).
        constraint: the constraint forcing a call (``"required"`` or a named function), else ``None``.
    """

    config: ServerConfig
    tools: tuple[Mapping[str, Any], ...] = ()
    parse_calls: bool = False
    constraint: ConstraintSpec | None = None

    def parser(self) -> MessageParser:
        """A fresh parser for one reply (each choice of a stream needs its own)."""
        config = self.config
        return build_message_parser(config.tool_parser if self.parse_calls else None, config.reasoning_parser,
                                    tools=self.tools, tool_options=config.tool_parser_options,
                                    reasoning_options=config.reasoning_parser_options)


def plan_tools(body: ChatCompletionRequest, config: ServerConfig) -> ToolPlan:
    """The :class:`ToolPlan` of ``body`` on a server with these settings.

    Raises:
        APIError: tools without a tool parser on the server, a tool choice without tools or naming an
            unknown tool, or parameters that are not a JSON schema.
        RequestError: the parser cannot express the tool choice as a constraint, or refuses the tools.
    """
    tools = [tool.model_dump(exclude_none=True) for tool in body.tools or ()]
    choice: str | dict[str, Any] = body.tool_choice if isinstance(body.tool_choice, str) else (
        body.tool_choice.model_dump() if body.tool_choice is not None else ("auto" if tools else "none"))
    if choice != "none" and not tools:
        raise bad_request(f"tool_choice={json.dumps(choice)} needs tools; the request has none", "tool_choice")
    if choice == "none" or not tools:
        return ToolPlan(config)
    if config.tool_parser is None:
        raise bad_request("this server reads no tool calls: start it with --tool-parser NAME "
                          "(see `pyagent list tool_parser`), or send tool_choice='none'", "tools")
    for index, tool in enumerate(tools):
        try:
            check_json_schema(tool["function"].get("parameters", {"type": "object"}))
        except ValueError as error:
            raise bad_request(f"tools[{index}].function.parameters is not a valid JSON schema: {error}",
                              f"tools[{index}].function.parameters") from None
    plan = ToolPlan(config, tuple(tools), parse_calls=True)
    parser = plan.parser().tool_parser
    assert parser is not None
    constraint = parser.constraint_for(choice)
    if constraint is not None and not body.parallel_tool_calls and constraint.structural_tag is not None:
        tag = json.loads(constraint.structural_tag)
        constraint = attrs.evolve(constraint, structural_tag={**tag, "stop_after_first": True})
    return attrs.evolve(plan, constraint=constraint)


def history(body: ChatCompletionRequest) -> list[dict[str, Any]]:
    """The messages as chat templates read them: ``developer`` as ``system``, tool-call arguments as objects,
    no content as ``""`` (most templates add the content to a string)."""
    messages = []
    for message in body.messages:
        item = {"content": "", **message.model_dump(exclude_none=True)}
        if item["role"] == "developer":
            item["role"] = "system"
        for call in item.get("tool_calls", ()):
            arguments = call["function"]["arguments"]
            if isinstance(arguments, str):
                try:
                    call["function"]["arguments"] = json.loads(arguments or "{}")
                except ValueError:
                    raise bad_request(f"tool call {call.get('id')!r} in the history has arguments that are not "
                                      f"JSON: {arguments[:80]!r}", "messages") from None
        messages.append(item)
    return messages
