"""The README's example parsers, executed as written, pass the tool-call and reasoning conformance kits."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

from pyagent_core.testing.reasoning_parser import ReasoningCase, ReasoningParserConformance
from pyagent_core.testing.tool_parser import ToolParserCase, ToolParserConformance
from pyagent_core.types import ReasoningParserSpec, ToolParserSpec

README = Path(__file__).resolve().parents[1] / "README.md"
MODULE = "pyagent_parser_base_readme_example"


def readme_module() -> types.ModuleType:
    """The README's Python block as the module ``MODULE`` (registered, so that spec paths resolve)."""
    if MODULE not in sys.modules:
        (code,) = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.DOTALL)
        module = types.ModuleType(MODULE)
        sys.modules[MODULE] = module
        exec(compile(code, str(README), "exec"), module.__dict__)
    return sys.modules[MODULE]


example = readme_module()


class TestCallTagParser(ToolParserConformance):
    impl = example.CallTagParser
    spec = ToolParserSpec(name="call-tags", impl=f"{MODULE}:CallTagParser")
    markers = ("<call>", "</call>")
    cases = (
        ToolParserCase("Just text.", content="Just text."),
        ToolParserCase('Let me check. <call>{"name": "get_weather", "arguments": {"city": "Paris"}}</call>',
                       content="Let me check.", calls=[("get_weather", {"city": "Paris"})]),
        ToolParserCase('<call>{"name": "add", "arguments": {"a": 1, "b": 2.5}}</call>\n'
                       '<call>{"arguments": {"city": "東京"}, "name": "get_weather"}</call> done', content="done",
                       calls=[("add", {"a": 1, "b": 2.5}), ("get_weather", {"city": "東京"})]),
        ToolParserCase('<call>{"name": "nope", "arguments": {}}</call>', errors=1),
        ToolParserCase('<call>{"name": "add", "arguments": {"a": "one"}}</call>', errors=1),
        ToolParserCase('<call>{"name": "add", "arguments": {"a": 1, "b": 2}', errors=1),
    )

    def render_calls(self, parser: object, calls: object) -> str:
        return example.CALL_TAGS.render(calls)


class TestThinkParser(ReasoningParserConformance):
    impl = example.ThinkParser
    spec = ReasoningParserSpec(name="think", impl=f"{MODULE}:ThinkParser")
    markers = ("<think>", "</think>")
    cases = (
        ReasoningCase("<think>\nLet me see.\n</think>\n\nThe answer.", reasoning="Let me see.", content="The answer."),
        ReasoningCase("No thinking, 東京.", content="No thinking, 東京."),
        ReasoningCase("<think>cut off", reasoning="cut off"),
        ReasoningCase("Answer <think>not reasoning</think>", content="Answer <think>not reasoning</think>"),
    )
