"""``pyagent chat`` with tools and parsers: the tools go into the prompt, each reply streams through the parsers."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from pyagent_core.commands import error, read_tools, show_message
from pyagent_core.errors import RequestError
from pyagent_engine.cli.line_editor import StopOnInterrupt

if TYPE_CHECKING:
    from pyagent_core.interfaces.tool_parser import DeltaMessage
    from pyagent_engine.api.llm import LLM, Prompt
    from pyagent_engine.requests.params import SamplingParams
    from pyagent_engine.requests.request import RequestOutput


class ChatParsing:
    """``pyagent chat`` with tools and parsers: tools in the prompt, each reply streamed through the parsers.

    Args:
        tools: the OpenAI tool definitions offered to the model.
        tool_parser, reasoning_parser: parser names (either may be ``None``).
    """

    def __init__(self, tools: list[dict[str, Any]], tool_parser: str | None, reasoning_parser: str | None) -> None:
        from pyagent_core.parsing import build_message_parser

        self.tools = tools
        self.names = (tool_parser, reasoning_parser)
        build_message_parser(tool_parser, reasoning_parser, tools=tools)  # fail now on a bad name or tools

    def prompt(self, llm: LLM, history: list[dict[str, Any]]) -> Prompt:
        """The conversation, rendered with the tools when the model's chat template takes them."""
        template = llm.loaded.chat_template
        if not self.tools or template is None or "tools" not in template.source:
            return history
        text = template.render(history, add_generation_prompt=True, tools=self.tools)
        return list(llm.tokenizer.encode(text, add_special_tokens=False))

    def reply(self, llm: LLM, history: list[dict[str, Any]], params: SamplingParams,
              stop: StopOnInterrupt | None = None, lora: str | None = None) -> RequestOutput:
        """Generate and print one reply: reasoning and content as they stream, then its tool calls
        (``stop``: Ctrl-C ends the reply early; ``lora``: the adapter, see :func:`stream_reply`)."""
        from pyagent_core.parsing import build_message_parser

        parser = build_message_parser(*self.names, tools=self.tools)
        final = None
        for output in stream_reply(llm, self.prompt(llm, history), params, stop, lora):
            _show_delta(parser.feed(output.delta) if output.delta else None)
            final = output if output.finished else final
        _show_delta(parser.finish())
        sys.stdout.write("\n")
        assert final is not None
        if final.error is None:
            message = build_message_parser(*self.names, tools=self.tools).parse(final.text)
            if message.tool_calls:
                show_message({"tool_calls": message.to_openai()["tool_calls"]})
            for problem in message.errors:
                error(problem)
        return final


def stream_reply(llm: LLM, prompt: Prompt, params: SamplingParams,
                 stop: StopOnInterrupt | None = None, lora: str | None = None) -> Iterator[RequestOutput]:
    """The outputs of one chat reply, with the registered LoRA adapter ``lora`` (``None``: the base model);
    once ``stop.requested`` (Ctrl-C), the reply is aborted in the engine and its last output
    (``finish_reason == "abort"``, the text so far) ends the stream."""
    for output in llm.stream([prompt], params, chat=True, lora_request=lora):
        yield output
        if stop is not None and stop.requested and not output.finished:
            engine = llm.engine
            for request in [*engine.scheduler.running, *engine.scheduler.waiting,
                            *engine.structured.pending_requests()]:
                yield engine.abort(request)
            return


def _show_delta(delta: DeltaMessage | None) -> None:
    if delta is None:
        return
    if delta.reasoning_content:
        typer.secho(delta.reasoning_content, dim=True, nl=False)
    if delta.content:
        sys.stdout.write(delta.content)
    sys.stdout.flush()


def chat_parsing(tools: Path | None, tool_parser: str | None, reasoning_parser: str | None) -> ChatParsing | None:
    """What ``pyagent chat`` needs for ``--tools`` and its parsers; ``None`` without them. A parser is the
    flag's, else the one ``PYAGENT_TOOL_PARSER`` / ``PYAGENT_REASONING_PARSER``, ``pyagent.toml`` or the
    user config selects (``none``: off); see :func:`pyagent_core.parsing.choose_parser`."""
    from pyagent_core.kinds import REASONING_PARSER, TOOL_PARSER
    from pyagent_core.parsing import choose_parser

    tool_parser = choose_parser(TOOL_PARSER, tool_parser)[0]
    reasoning_parser = choose_parser(REASONING_PARSER, reasoning_parser)[0]
    if tools is None and not tool_parser and not reasoning_parser:
        return None
    if tools is not None and not tool_parser:
        raise RequestError("--tools needs --tool-parser NAME to read the calls (see `pyagent list tool_parser`)")
    return ChatParsing(read_tools(tools), tool_parser, reasoning_parser)
