"""The :class:`~pyagent_core.interfaces.reasoning_parser.ReasoningParser` s, on :mod:`pyagent_parser_base`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from pyagent_core.errors import OptionError
from pyagent_core.interfaces.reasoning_parser import ReasoningParser, ReasoningParserContext
from pyagent_parser_base.emitter import Emitter, ToolSet
from pyagent_parser_base.harmony import CONTENT, REASONING, VERBATIM, Header, harmony_program
from pyagent_parser_base.machine import Program, Run, Streaming
from pyagent_reasoning_parsers import think


class ProgramReasoningParser(Streaming, ReasoningParser):
    """A reasoning parser running a program; subclasses set ``format`` or override :meth:`program`."""

    format: ClassVar[think.ThinkFormat]

    def program(self) -> Program:
        """The program reading a reply."""
        return self.format.program

    def new_run(self) -> Run:
        """A fresh run of the program."""
        return Run(self.program(), Emitter(ToolSet([])))

    def extract(self, text: str) -> tuple[str | None, str | None]:
        """``(reasoning_content, content)`` of a complete reply."""
        emitter = self.run_whole(text).emitter
        return emitter.reasoning.text(), emitter.content.text()


class DeepSeekR1ReasoningParser(ProgramReasoningParser):
    """DeepSeek-R1: the reply starts inside ``<think>`` (opened by the prompt) and thinks until ``</think>``."""

    format = think.DEEPSEEK_R1


class Qwen3ReasoningParser(ProgramReasoningParser):
    """Qwen3: ``<think>...</think>`` opening the reply (a ``<tool_call>`` also ends it); option ``forced_open``
    when the template opened it."""

    def program(self) -> Program:
        """The forced-open variant when the option says so."""
        return (think.QWEN3_FORCED if self.options["forced_open"] else think.QWEN3).program


class Glm45ReasoningParser(ProgramReasoningParser):
    """GLM-4.5: ``<think>...</think>`` opening the reply."""

    format = think.GLM45


class KimiK2ReasoningParser(ProgramReasoningParser):
    """Kimi-K2: thinks until ``</think>``, or until its tool-call section begins."""

    format = think.KIMI_K2


class MinimaxM2ReasoningParser(ProgramReasoningParser):
    """MiniMax-M2: the reply starts inside ``<think>`` and thinks until ``</think>``."""

    format = think.MINIMAX_M2


class MistralReasoningParser(ProgramReasoningParser):
    """Magistral: ``[THINK]...[/THINK]`` opening the reply."""

    format = think.MISTRAL


class GraniteReasoningParser(ProgramReasoningParser):
    """Granite 3.2: ``Here is my thought process:`` ... ``Here is my response:`` ... (``Here's`` too)."""

    format = think.GRANITE


def harmony_for_reasoning(header: Header) -> str:
    """gpt-oss messages for the reasoning parser: ``analysis`` is reasoning, tool calls pass through
    verbatim (for the tool parser), every other message is content."""
    if header.recipient is not None:
        return VERBATIM
    return REASONING if header.channel == "analysis" else CONTENT


class GptOssReasoningParser(ProgramReasoningParser):
    """gpt-oss (harmony): ``analysis`` messages are reasoning, ``final`` ones content; tool-call
    messages stay in the content verbatim, for the gpt-oss tool parser."""

    def program(self) -> Program:
        """The harmony reader, routing messages for reasoning."""
        return harmony_program(harmony_for_reasoning)


class GenericReasoningParser(ProgramReasoningParser):
    """Reasoning between the ``open`` and ``close`` options' markers (``forced_open``: the prompt opened it)."""

    def __init__(self, options: Mapping[str, Any], context: ReasoningParserContext) -> None:
        super().__init__(options, context)
        if not self.options["close"]:
            raise OptionError("option 'close' of reasoning parser 'generic' is empty; give the marker ending reasoning")
        opening = (self.options["open"],) if self.options["open"] else ()
        self._format = think.ThinkFormat(opening, (self.options["close"],), forced_open=self.options["forced_open"])

    def program(self) -> Program:
        """The block the options describe."""
        return self._format.program
