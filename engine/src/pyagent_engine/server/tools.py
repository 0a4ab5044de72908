"""A chat request's tools: which are offered, the parsers that read the reply, the constraint that forces a call.

``tool_choice`` ``"none"`` offers no tools and parses no calls; ``"auto"`` (the default with tools)
offers them and parses the calls the model makes with the server's tool parser; ``"required"`` and a
named function also constrain the output. With a tool parser the constraint is the parser's own (a
structural tag built from the tools' parameter schemas in the parser's format, see
``ToolParser.constraint_for``), so even a small model writes a call that parses and whose arguments
validate; without one the reply is JSON, as vLLM serves it (:mod:`~pyagent_engine.server.tool_json`).
``parallel_tool_calls=false`` stops the constraint after the first call. OpenAI's deprecated
``functions`` and ``function_call`` are read as ``tools`` and ``tool_choice``.

A reply whose tool call is malformed (not JSON, an unknown tool, arguments its schema refuses) comes
back as vLLM returns it: the whole reply text as ``content``, no ``tool_calls``. A reply cut by
``max_tokens`` keeps the calls it finished (the one it was cut in is dropped) and finishes with
``length``; a reply with calls that ended on its own finishes with ``tool_calls``. A forced reply
(``"required"`` or a named function) has no ``content``, streamed or not.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import attrs

from pyagent_core.interfaces.grammar import ConstraintSpec
from pyagent_core.interfaces.tool_parser import ToolParserContext
from pyagent_core.parsing import AssistantMessage, MessageParser, build_message_parser
from pyagent_engine.server.errors import bad_request
from pyagent_engine.server.protocol import ChatCompletionRequest
from pyagent_engine.server.state import ServerConfig
from pyagent_engine.server.tool_json import JsonToolCalls, json_constraint
from pyagent_engine.structured.checks import check_json_schema


@attrs.frozen
class ToolPlan:
    """How a chat request uses tools.

    Attributes:
        config: the server's settings (its parsers and their options).
        tools: the OpenAI tool definitions offered to the model (empty with ``tool_choice="none"``).
        parse_calls: whether calls are read out of the reply (with the server's tool parser).
        constraint: the constraint forcing a call (``"required"`` or a named function), else ``None``.
        json_choice: the tool choice served as JSON, without a tool parser (``None``: the server's parser).
    """

    config: ServerConfig
    tools: tuple[Mapping[str, Any], ...] = ()
    parse_calls: bool = False
    constraint: ConstraintSpec | None = None
    json_choice: str | Mapping[str, Any] | None = None

    def parser(self) -> MessageParser:
        """A fresh parser for one reply (each choice of a stream needs its own)."""
        config = self.config
        tool_parser = config.tool_parser if self.parse_calls and self.json_choice is None else None
        chained = build_message_parser(tool_parser, config.reasoning_parser, tools=self.tools,
                                       tool_options=config.tool_parser_options,
                                       reasoning_options=config.reasoning_parser_options)
        if self.json_choice is None:
            return chained
        calls = JsonToolCalls({}, ToolParserContext(tools=self.tools), self.json_choice)
        return MessageParser(calls, chained.reasoning_parser)

    def message(self, text: str, finish_reason: str | None) -> AssistantMessage:
        """The assistant message of a whole reply: with a malformed call, the reply's text as content; but a
        reply cut by ``max_tokens`` (``finish_reason == "length"``) keeps the calls it finished, as the one
        it was cut in is unfinished, not malformed. A forced reply (:attr:`constraint`) is calls only: it
        has no content, whatever a cut left of its last call."""
        parser = self.parser()
        message = parser.parse(text)
        if self.constraint is not None:
            return attrs.evolve(message, content=None)
        if not message.errors or finish_reason == "length":
            return message
        return MessageParser(None, parser.reasoning_parser).parse(text)

    @staticmethod
    def finish_reason(message: AssistantMessage, engine_reason: str | None) -> str | None:
        """``tool_calls`` for a reply with calls that ended on its own, else the engine's reason (``length``:
        cut by ``max_tokens``)."""
        return "tool_calls" if message.tool_calls and engine_reason == "stop" else engine_reason


def _requested(body: ChatCompletionRequest) -> tuple[list[dict[str, Any]], str | dict[str, Any]]:
    """The tools and the tool choice: ``tools``/``tool_choice``, or the deprecated ``functions``/``function_call``."""
    if body.functions is not None and body.tools is not None:
        raise bad_request("give tools or the deprecated functions, not both", "functions")
    if body.function_call is not None and body.tool_choice is not None:
        raise bad_request("give tool_choice or the deprecated function_call, not both", "function_call")
    if body.functions is not None:
        tools = [{"type": "function", "function": f.model_dump(exclude_none=True)} for f in body.functions]
    else:
        tools = [tool.model_dump(exclude_none=True) for tool in body.tools or ()]
    given = body.tool_choice if body.tool_choice is not None else body.function_call
    if given is None:
        return tools, "auto" if tools else "none"
    if isinstance(given, str):
        return tools, given
    dumped = given.model_dump()
    return tools, dumped if "function" in dumped else {"type": "function", "function": dumped}


def plan_tools(body: ChatCompletionRequest, config: ServerConfig) -> ToolPlan:
    """The :class:`ToolPlan` of ``body`` on a server with these settings.

    Raises:
        APIError: ``auto`` tools without a tool parser on the server, a tool choice without tools or
            naming an unknown tool, or parameters that are not a JSON schema.
        RequestError: the parser cannot express the tool choice as a constraint, or refuses the tools.
    """
    tools, choice = _requested(body)
    if choice != "none" and not tools:
        raise bad_request(f"tool_choice={json.dumps(choice)} needs tools; the request has none", "tool_choice")
    if choice == "none" or not tools:
        return ToolPlan(config)
    for index, tool in enumerate(tools):
        try:
            check_json_schema(tool["function"].get("parameters", {"type": "object"}))
        except ValueError as error:
            raise bad_request(f"tools[{index}].function.parameters is not a valid JSON schema: {error}",
                              f"tools[{index}].function.parameters") from None
    if isinstance(choice, dict):
        name = choice["function"]["name"]
        if name not in {tool["function"]["name"] for tool in tools}:
            raise bad_request(f"tool_choice names {name!r}, which is not among the tools: "
                              f"{', '.join(t['function']['name'] for t in tools)}", "tool_choice")
    if config.tool_parser is None:
        if choice == "auto":
            raise bad_request("this server reads no tool calls the model chooses to make: start it with "
                              "--tool-parser NAME (see `pyagent list tool_parser`), or send tool_choice 'required' "
                              "or a named function (answered as JSON), or 'none'", "tool_choice")
        return ToolPlan(config, tuple(tools), parse_calls=True, json_choice=choice,
                        constraint=json_constraint(tools, choice, body.parallel_tool_calls))
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
