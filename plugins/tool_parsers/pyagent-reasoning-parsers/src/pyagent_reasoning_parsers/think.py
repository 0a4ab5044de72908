"""Thinking blocks: reasoning between an opening and a closing marker, the answer after it.

One declaration covers the families: which markers open and close the block, whether the prompt
already opened it (DeepSeek-R1, MiniMax-M2 and Qwen3 thinking templates end with ``<think>``, so
the reply starts inside the block and an opening marker in it is optional), and which markers end
reasoning implicitly while staying in the content (Kimi-K2 may start its tool calls without
closing its thinking, and so may Qwen3 with ``<tool_call>``). A block that is never closed is all
reasoning; without an opening marker (and not forced) the whole reply is content.
"""

from __future__ import annotations

import attrs

from pyagent_parser_base.emitter import Emitter
from pyagent_parser_base.source import Source, Wait, skip_space, starts_with, stream_until


@attrs.frozen
class ThinkFormat:
    """A thinking-block format (see the module docstring).

    Attributes:
        open: markers opening the block at the start of the reply.
        close: markers closing it.
        forced_open: the prompt opened the block: the reply starts inside it.
        implicit_close: markers that end reasoning and belong to the content.
    """

    open: tuple[str, ...]
    close: tuple[str, ...]
    forced_open: bool = False
    implicit_close: tuple[str, ...] = ()

    def program(self, src: Source, out: Emitter) -> Wait[None]:
        """Read a reply: the block (if any) as reasoning, the rest as content."""
        if (yield from skip_space(src)) is None:
            return
        opened = self.forced_open
        for marker in self.open:
            if (yield from starts_with(src, marker)):
                src.pos += len(marker)
                opened = True
                break
        if opened:
            stop = yield from stream_until(src, self.close + self.implicit_close, out.think)
            if stop is not None and stop in self.implicit_close:
                src.pos -= len(stop)
        yield from stream_until(src, (), out.text)


THINK = ("<think>",), ("</think>",)
DEEPSEEK_R1 = ThinkFormat(*THINK, forced_open=True)
QWEN3 = ThinkFormat(*THINK, implicit_close=("<tool_call>",))
QWEN3_FORCED = ThinkFormat(*THINK, forced_open=True, implicit_close=("<tool_call>",))
GLM45 = ThinkFormat(*THINK)
KIMI_K2 = ThinkFormat(*THINK, forced_open=True, implicit_close=("<|tool_calls_section_begin|>",))
MINIMAX_M2 = ThinkFormat(*THINK, forced_open=True)
MISTRAL = ThinkFormat(("[THINK]",), ("[/THINK]",))
GRANITE = ThinkFormat(("Here is my thought process:", "Here's my thought process:"),
                      ("Here is my response:", "Here's my response:"))
