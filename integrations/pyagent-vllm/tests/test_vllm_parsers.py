"""Every pyagent parser, registered in vLLM by the general plugin and called through vLLM's managers
with vLLM's request objects and method signatures, gives what pyagent's parser gives, whole and streamed.

The model outputs are the parser plugins' own fixtures (each family's published format).
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

pytest.importorskip("vllm")

from pyagent_core.interfaces.reasoning_parser import ReasoningParserContext
from pyagent_core.interfaces.tool_parser import ToolParserContext
from pyagent_core.kinds import REASONING_PARSER, TOOL_PARSER
from pyagent_core.registry import get_registry

REPO = Path(__file__).resolve().parents[3]
CHUNK = 5
"""Characters per streamed delta."""


def load(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


TOOL_FIXTURES = load(REPO / "plugins/tool_parsers/pyagent-tool-parsers/tests/fixtures.py")
REASONING_TESTS = load(REPO / "plugins/tool_parsers/pyagent-reasoning-parsers/tests"
                       / "test_reasoning_parsers_conformance.py")
TOOL_CASES = [(name, case) for name, cases in TOOL_FIXTURES.CASES.items() for case in cases]
REASONING_KITS: list[Any] = [kit for kit in vars(REASONING_TESTS).values()
                             if isinstance(kit, type) and getattr(kit, "spec", None) is not None]
REASONING_CASES = [(kit.spec.name, case) for kit in REASONING_KITS if not kit.options for case in kit.cases]
"""Every reasoning kit's fixtures, less those of kits with options (vLLM gets each parser's defaults)."""


@pytest.fixture(scope="module")
def vllm_side(model_dir: Path) -> dict[str, Any]:
    """vLLM's managers after its general plugins ran, the model's tokenizer, and a chat request with tools."""
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.plugins import load_general_plugins
    from vllm.reasoning import ReasoningParserManager
    from vllm.tokenizers import get_tokenizer
    from vllm.tool_parsers import ToolParserManager

    load_general_plugins()
    request = ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "hi"}],
                                    tools=list(TOOL_FIXTURES.TOOLS), tool_choice="auto")
    return {"tools": ToolParserManager, "reasoning": ReasoningParserManager,
            "tokenizer": get_tokenizer(str(model_dir)), "request": request}


def chunks(text: str) -> list[str]:
    return [text[i:i + CHUNK] for i in range(0, len(text), CHUNK)] or [""]


def stream(parser: Any, text: str, eos: int, call: str, *extra: Any) -> list[Any]:
    """Feed ``text`` to a vLLM streaming method delta by delta, the last delta ending in ``eos``."""
    previous, deltas, pieces = "", [], chunks(text)
    for i, piece in enumerate(pieces):
        ids = [eos] if i == len(pieces) - 1 else [0]
        deltas.append(getattr(parser, call)(previous, previous + piece, piece, [], ids, ids, *extra))
        previous += piece
    return [d for d in deltas if d is not None]


def pyagent_stream(parser: Any, text: str) -> list[Any]:
    previous, deltas = "", []
    for piece in chunks(text):
        deltas.append(parser.extract_delta(previous, piece))
        previous += piece
    deltas.append(parser.finish(text))
    return [d for d in deltas if d is not None]


def joined(deltas: list[Any], field: str) -> str:
    return "".join(getattr(d, field) or "" for d in deltas)


def calls_of(deltas: list[Any], pyagent: bool) -> dict[int, tuple[str | None, str]]:
    calls: dict[int, tuple[str | None, str]] = {}
    for delta in deltas:
        for call in delta.tool_calls:
            name, arguments = (call.name, call.arguments) if pyagent else (call.function.name, call.function.arguments)
            old_name, old_args = calls.get(call.index, (None, ""))
            calls[call.index] = (old_name or name, old_args + (arguments or ""))
    return calls


def test_every_parser_is_registered_under_the_pyagent_prefix(vllm_side: dict[str, Any]) -> None:
    registry = get_registry()
    tools = {f"pyagent-{b.name}" for b in registry.backends(TOOL_PARSER)}
    reasoning = {f"pyagent-{b.name}" for b in registry.backends(REASONING_PARSER)}
    assert tools <= set(vllm_side["tools"].list_registered())
    assert reasoning <= set(vllm_side["reasoning"].list_registered())
    assert "hermes" in vllm_side["tools"].list_registered()  # vLLM's own parser is still there


@pytest.mark.parametrize(("name", "case"), TOOL_CASES, ids=[f"{n}-{i}" for i, (n, _) in enumerate(TOOL_CASES)])
def test_tool_parser_through_vllm_matches_pyagent(vllm_side: dict[str, Any], name: str, case: Any) -> None:
    registry, request, tokenizer = get_registry(), vllm_side["request"], vllm_side["tokenizer"]
    selection = registry.select(TOOL_PARSER, name)

    def reference() -> Any:
        return registry.load(selection.backend)(selection.options, ToolParserContext(TOOL_FIXTURES.TOOLS))

    cls = vllm_side["tools"].get_tool_parser(f"pyagent-{name}")
    whole = cls(tokenizer, request.tools).extract_tool_calls(case.text, request)
    expected = reference().extract(case.text)
    assert whole.content == expected.content
    assert [(c.function.name, json.loads(c.function.arguments)) for c in whole.tool_calls] == \
        [(c.name, json.loads(c.arguments)) for c in expected.tool_calls]
    assert whole.tools_called == bool(expected.tool_calls)

    streamed = stream(cls(tokenizer, request.tools), case.text, tokenizer.eos_token_id,
                      "extract_tool_calls_streaming", request)
    expected_stream = pyagent_stream(reference(), case.text)
    assert joined(streamed, "content") == joined(expected_stream, "content")
    assert calls_of(streamed, pyagent=False) == calls_of(expected_stream, pyagent=True)


@pytest.mark.parametrize(("name", "case"), REASONING_CASES,
                         ids=[f"{n}-{i}" for i, (n, _) in enumerate(REASONING_CASES)])
def test_reasoning_parser_through_vllm_matches_pyagent(vllm_side: dict[str, Any], name: str, case: Any) -> None:
    registry, request, tokenizer = get_registry(), vllm_side["request"], vllm_side["tokenizer"]
    selection = registry.select(REASONING_PARSER, name)

    def reference() -> Any:
        return registry.load(selection.backend)(selection.options, ReasoningParserContext())

    cls = vllm_side["reasoning"].get_reasoning_parser(f"pyagent-{name}")
    assert cls(tokenizer).extract_reasoning(case.text, request) == reference().extract(case.text)
    streamed = stream(cls(tokenizer), case.text, tokenizer.eos_token_id, "extract_reasoning_streaming")
    expected = pyagent_stream(reference(), case.text)
    assert joined(streamed, "reasoning") == joined(expected, "reasoning_content")
    assert joined(streamed, "content") == joined(expected, "content")
