"""Meta-tests of the reasoning-parser kit: a think-tag parser passes it, broken variants fail it."""

from __future__ import annotations

import pytest

from pyagent_core.interfaces.reasoning_parser import DeltaMessage, ReasoningParser
from pyagent_core.testing.reasoning_parser import ReasoningCase, ReasoningParserConformance
from pyagent_core.types import ReasoningParserSpec

OPEN, CLOSE = "<think>", "</think>"


def partial_marker(text: str, marker: str) -> int:
    """Length of the longest proper prefix of ``marker`` that ``text`` ends with."""
    return next((n for n in range(len(marker) - 1, 0, -1) if text.endswith(marker[:n])), 0)


class ThinkParser(ReasoningParser):
    """Reasoning is the text between a leading ``<think>`` and ``</think>`` (or the end).

    Streaming is stateless: the split of ``previous_text`` is what was already emitted, because a
    split of unfinished text holds back anything that could still turn into a marker.
    """

    def split(self, text: str, final: bool) -> tuple[str, str]:
        """``(reasoning, content)`` of ``text``; unless ``final``, only the part that cannot change."""
        if not text.startswith(OPEN):
            return ("", "") if not final and OPEN.startswith(text) else ("", text)
        body = text[len(OPEN):]
        end = body.find(CLOSE)
        if end >= 0:
            return body[:end], body[end + len(CLOSE):]
        return (body if final else body[: len(body) - partial_marker(body, CLOSE)]), ""

    def extract(self, text: str) -> tuple[str | None, str | None]:
        reasoning, content = self.split(text, final=True)
        return reasoning or None, content or None

    def extract_delta(self, previous_text: str, delta_text: str) -> DeltaMessage | None:
        before = self.split(previous_text, final=False)
        return self.difference(before, self.split(previous_text + delta_text, final=False))

    def finish(self, text: str) -> DeltaMessage | None:
        return self.difference(self.split(text, False), self.split(text, True))

    @staticmethod
    def difference(before: tuple[str, str], after: tuple[str, str]) -> DeltaMessage | None:
        """What ``after`` adds to ``before``, as a delta (``None`` when nothing)."""
        reasoning, content = after[0][len(before[0]):], after[1][len(before[1]):]
        if not reasoning and not content:
            return None
        return DeltaMessage(content=content or None, reasoning_content=reasoning or None)


class EagerParser(ThinkParser):
    """Broken: streams a partial ``</think>`` as reasoning instead of holding it back."""

    def split(self, text: str, final: bool) -> tuple[str, str]:
        return super().split(text, final=True)


class StrictParser(ThinkParser):
    """Broken: raises on a closing tag without an opening one."""

    def split(self, text: str, final: bool) -> tuple[str, str]:
        if CLOSE in text and not text.startswith(OPEN):
            raise ValueError("unbalanced think tags")
        return super().split(text, final)


SPEC = ReasoningParserSpec(name="think-test", impl=f"{__name__}:ThinkParser", summary="test-local parser")

CASES = (
    ReasoningCase("<think>Let me think.</think>The answer is 4.", "Let me think.", "The answer is 4."),
    ReasoningCase("No thinking here.", None, "No thinking here."),
    ReasoningCase("<think>unfinished <", "unfinished <", None),
    ReasoningCase("<think></think>", None, None),
    ReasoningCase("<thinking>x", None, "<thinking>x"),
    ReasoningCase("<think>a</think>b</think>", "a", "b</think>"),
)


class TestThinkParser(ReasoningParserConformance):
    impl = ThinkParser
    spec = SPEC
    cases = CASES
    markers = (OPEN, CLOSE)


def _kit(impl: type[ReasoningParser]) -> ReasoningParserConformance:
    attributes = {"impl": impl, "spec": SPEC, "cases": CASES, "markers": (OPEN, CLOSE)}
    return type(f"{impl.__name__}Kit", (ReasoningParserConformance,), attributes)()


@pytest.mark.parametrize(
    ("impl", "check"),
    [
        (EagerParser, "test_streaming_in_one_chunk_and_by_character"),
        (EagerParser, "test_streaming_at_random_split_points"),
        (StrictParser, "test_odd_input_never_raises"),
    ],
)
def test_kit_catches_broken_parser(impl: type[ReasoningParser], check: str) -> None:
    with pytest.raises(AssertionError):
        getattr(_kit(impl), check)()


def test_kit_requires_fixtures() -> None:
    kit = type("NoCasesKit", (ReasoningParserConformance,), {"impl": ThinkParser, "spec": SPEC})()
    with pytest.raises(AssertionError):
        kit.test_has_cases()
