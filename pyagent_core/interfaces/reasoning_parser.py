"""Reasoning-parser interface: separate a model's thinking from its answer.

Models that reason first (``<think>...</think>`` and the like) produce one text; the parser splits
it into ``reasoning_content`` and ``content`` for an OpenAI-compatible response, at the end
(:meth:`ReasoningParser.extract`) or while streaming, under the same streaming rules as tool-call
parsers (:mod:`pyagent_core.interfaces.tool_parser`): concatenating the streamed pieces gives what
:meth:`ReasoningParser.extract` returns.

A reasoning parser is built like every parser, ``cls(options, context)``, with a
:class:`ReasoningParserContext` as its context.
"""

from __future__ import annotations

from abc import abstractmethod

import attrs

from pyagent_core.interfaces.tool_parser import DeltaMessage, StreamingParser

__all__ = ["DeltaMessage", "ReasoningParser", "ReasoningParserContext"]


@attrs.frozen
class ReasoningParserContext:
    """What a reasoning parser is built for; it has no fields yet.

    Reasoning parsers need nothing from the request today: their markers are fixed by the model
    family or set by options. The record exists so that what a parser may need later (for example
    what the request turned on) becomes a field here, with a default, instead of a change to every
    parser's constructor.
    """


class ReasoningParser(StreamingParser[ReasoningParserContext]):
    """Splits generated text into reasoning and content.

    Args:
        options: the parser's validated options (defaults filled in).
        context: a :class:`ReasoningParserContext`.
    """

    @abstractmethod
    def extract(self, text: str) -> tuple[str | None, str | None]:
        """``(reasoning_content, content)`` of a complete message, ``None`` for an empty part.

        Never raises on odd model output (an unclosed thinking block, stray markers...).
        """
