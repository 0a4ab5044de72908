"""Reasoning-parser interface: separate a model's thinking from its answer.

Models that reason first (``<think>...</think>`` and the like) produce one text; the parser splits
it into ``reasoning_content`` and ``content`` for an OpenAI-compatible response, at the end
(:meth:`ReasoningParser.extract`) or while streaming, under the same streaming rules as tool-call
parsers (:mod:`pyagent_core.interfaces.tool_parser`): concatenating the streamed pieces gives what
:meth:`ReasoningParser.extract` returns.
"""

from __future__ import annotations

from abc import abstractmethod

from pyagent_core.interfaces.tool_parser import DeltaMessage, StreamingParser

__all__ = ["DeltaMessage", "ReasoningParser"]


class ReasoningParser(StreamingParser):
    """Splits generated text into reasoning and content.

    Args:
        options: the parser's validated options (defaults filled in).
    """

    @abstractmethod
    def extract(self, text: str) -> tuple[str | None, str | None]:
        """``(reasoning_content, content)`` of a complete message, ``None`` for an empty part.

        Never raises on odd model output (an unclosed thinking block, stray markers...).
        """
