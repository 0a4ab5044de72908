"""Meta-tests of the reasoning-parser kit: the scaffold's think-tag parser passes it, broken variants fail it."""

from __future__ import annotations

import pytest

from pyagent_core.interfaces.reasoning_parser import ReasoningParser
from pyagent_core.testing.reasoning_parser import ReasoningParserConformance
from pyagent_core.testing.scaffolded import import_template

reference = import_template("reasoning_parser")
ThinkParser = reference.impl.KitReference
OPEN, CLOSE = reference.impl.OPEN, reference.impl.CLOSE
SPEC = reference.plugin.SPEC
# The scaffold's own conformance test, with its cases, run here on the think parser it scaffolds.
TestThinkParser = reference.tests.TestKitReference


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


def _kit(impl: type[ReasoningParser]) -> ReasoningParserConformance:
    return type(f"{impl.__name__}Kit", (TestThinkParser,), {"impl": impl})()


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
