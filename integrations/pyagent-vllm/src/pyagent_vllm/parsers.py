"""pyagent's tool-call and reasoning parsers behind vLLM's ``ToolParser`` and ``ReasoningParser``.

vLLM builds one parser object per request (``cls(tokenizer, tools)`` / ``cls(tokenizer)``) and calls
it with its own request objects; each class here builds the pyagent parser of the same name from
the registry (with the request's tools) and translates the results into vLLM's
``ExtractedToolCallInformation`` and ``DeltaMessage``. The classes are made on first access,
``PyagentTool_<name>`` / ``PyagentReasoning_<name>`` attributes of this module, which is how
:mod:`pyagent_vllm.vllm_plugin` registers them lazily with vLLM's managers as ``pyagent-<name>``.

Streaming: vLLM never tells a tool parser that the stream ended, so text a pyagent parser holds back
(a possible start of a marker) is released when a delta ends with one of the tokenizer's
end-of-sequence ids; a stream cut by ``max_tokens`` or a stop string keeps it back. vLLM moves a
request from the reasoning parser to the tool parser when ``is_reasoning_end`` says so: here, once
the reasoning parser has streamed content. Reasoning parsers work on text, so ``is_reasoning_end``
on token ids alone (vLLM's structured-output gating) stays false: structured outputs apply from
the reply's start.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from vllm.entrypoints.generate.base.protocol import (
    DeltaFunctionCall,
    DeltaMessage,
    DeltaToolCall,
    ExtractedToolCallInformation,
    FunctionCall,
    ToolCall,
)
from vllm.reasoning import ReasoningParser
from vllm.tool_parsers import ToolParser

from pyagent_core.interfaces import reasoning_parser as pa_reasoning
from pyagent_core.interfaces import tool_parser as pa_tool
from pyagent_core.kinds import REASONING_PARSER, TOOL_PARSER, Kind
from pyagent_core.registry import get_registry
from pyagent_vllm.inventory import REASONING_PREFIX, TOOL_PREFIX


def _build(kind: Kind[Any], name: str, context: Any) -> Any:
    registry = get_registry()
    selection = registry.select(kind, name)
    return registry.load(selection.backend)(selection.options, context)


def openai_tool(tool: Any) -> dict[str, Any]:
    """A vLLM tool (chat ``ChatCompletionToolsParam`` or responses ``FunctionTool``) as an OpenAI chat
    tool definition, the shape pyagent's parsers take."""
    data = tool.model_dump(exclude_none=True) if hasattr(tool, "model_dump") else dict(tool)
    if "function" in data:
        return data
    function = {key: data[key] for key in ("name", "description", "parameters", "strict") if key in data}
    return {"type": "function", "function": function}


def _delta_call(fragment: pa_tool.DeltaToolCall) -> DeltaToolCall:
    function = DeltaFunctionCall(name=fragment.name, arguments=fragment.arguments)
    return DeltaToolCall(index=fragment.index, id=fragment.id, type="function" if fragment.id else None,
                         function=function)


def _merge(first: pa_tool.DeltaMessage | None, second: pa_tool.DeltaMessage | None) -> pa_tool.DeltaMessage | None:
    """One pyagent delta holding ``first`` then ``second``."""
    if first is None or second is None:
        return first or second

    def join(a: str | None, b: str | None) -> str | None:
        return None if a is None and b is None else (a or "") + (b or "")

    return pa_tool.DeltaMessage(content=join(first.content, second.content),
                                reasoning_content=join(first.reasoning_content, second.reasoning_content),
                                tool_calls=(*first.tool_calls, *second.tool_calls))


def vllm_delta(delta: pa_tool.DeltaMessage | None) -> DeltaMessage | None:
    """pyagent's streaming delta as vLLM's (``None`` when it adds nothing)."""
    if delta is None or (delta.content is None and delta.reasoning_content is None and not delta.tool_calls):
        return None
    return DeltaMessage(content=delta.content, reasoning=delta.reasoning_content,
                        tool_calls=[_delta_call(call) for call in delta.tool_calls])


class _StreamEnd:
    """Knows the tokenizer's end-of-sequence ids, to release held-back text at the stream's end."""

    def _init_stream_end(self, tokenizer: Any) -> None:
        eos = getattr(tokenizer, "eos_token_id", None)
        self._eos_ids = frozenset(() if eos is None else (eos,) if isinstance(eos, int) else eos)

    def _ends(self, delta_token_ids: Sequence[int]) -> bool:
        return bool(delta_token_ids) and delta_token_ids[-1] in self._eos_ids


class PyagentToolParser(ToolParser, _StreamEnd):
    """A pyagent tool-call parser (:attr:`pyagent_name`) as a vLLM ``ToolParser``."""

    pyagent_name: str = ""
    supports_required_and_named = False  # vLLM parses required / named tool_choice with this parser too

    def __init__(self, tokenizer: Any, tools: list[Any] | None = None) -> None:
        super().__init__(tokenizer, tools)
        self._init_stream_end(tokenizer)
        self._parser: pa_tool.ToolParser | None = None

    def _pyagent(self, request: Any) -> pa_tool.ToolParser:
        if self._parser is None:
            tools = getattr(request, "tools", None) or self.tools
            context = pa_tool.ToolParserContext(tuple(openai_tool(t) for t in tools or ()))
            self._parser = _build(TOOL_PARSER, self.pyagent_name, context)
        return self._parser

    def extract_tool_calls(self, model_output: str, request: Any) -> ExtractedToolCallInformation:
        """Content and calls of a whole message, from pyagent's ``extract``."""
        result = self._pyagent(request).extract(model_output)
        calls = [ToolCall(id=call.id, function=FunctionCall(name=call.name, arguments=call.arguments))
                 for call in result.tool_calls]
        return ExtractedToolCallInformation(tools_called=bool(calls), tool_calls=calls, content=result.content)

    def extract_tool_calls_streaming(self, previous_text: str, current_text: str, delta_text: str,
                                     previous_token_ids: Sequence[int], current_token_ids: Sequence[int],
                                     delta_token_ids: Sequence[int], request: Any) -> DeltaMessage | None:
        """What ``delta_text`` adds, from pyagent's ``extract_delta`` (and ``finish`` at end of sequence)."""
        parser = self._pyagent(request)
        delta = parser.extract_delta(previous_text, delta_text)
        if self._ends(delta_token_ids):
            delta = _merge(delta, parser.finish(current_text))
        self._track(delta)
        return vllm_delta(delta)

    def _track(self, delta: pa_tool.DeltaMessage | None) -> None:
        """Keep vLLM's bookkeeping of streamed calls (``prev_tool_call_arr``, ``streamed_args_for_tool``),
        which its serving layer reads at the end of a stream: pyagent streams every argument itself."""
        for call in () if delta is None else delta.tool_calls:
            while len(self.prev_tool_call_arr) <= call.index:
                self.prev_tool_call_arr.append({"name": None, "arguments": ""})
                self.streamed_args_for_tool.append("")
            entry = self.prev_tool_call_arr[call.index]
            entry["name"] = call.name or entry["name"]
            entry["arguments"] += call.arguments
            self.streamed_args_for_tool[call.index] += call.arguments
            self.current_tool_id = call.index


class PyagentReasoningParser(ReasoningParser, _StreamEnd):
    """A pyagent reasoning parser (:attr:`pyagent_name`) as a vLLM ``ReasoningParser``."""

    pyagent_name: str = ""

    def __init__(self, tokenizer: Any, *args: Any, **kwargs: Any) -> None:
        super().__init__(tokenizer, *args, **kwargs)
        self._init_stream_end(tokenizer)
        self._parser: pa_reasoning.ReasoningParser = _build(REASONING_PARSER, self.pyagent_name,
                                                            pa_reasoning.ReasoningParserContext())
        self._content_started = False

    def extract_reasoning(self, model_output: str, request: Any) -> tuple[str | None, str | None]:
        """``(reasoning, content)`` of a whole message, from pyagent's ``extract``."""
        return self._parser.extract(model_output)

    def extract_reasoning_streaming(self, previous_text: str, current_text: str, delta_text: str,
                                    previous_token_ids: Sequence[int], current_token_ids: Sequence[int],
                                    delta_token_ids: Sequence[int]) -> DeltaMessage | None:
        """What ``delta_text`` adds, from pyagent's ``extract_delta`` (and ``finish`` at end of sequence)."""
        delta = self._parser.extract_delta(previous_text, delta_text)
        if self._ends(delta_token_ids):
            delta = _merge(delta, self._parser.finish(current_text))
        if delta is not None and delta.content:
            self._content_started = True
        return vllm_delta(delta)

    def is_reasoning_end(self, input_ids: Sequence[int]) -> bool:
        """Whether this parser's stream has reached content (see the module docstring)."""
        return self._content_started

    def extract_content_ids(self, input_ids: list[int]) -> list[int]:
        """The ids after reasoning: all of them once content started (pyagent's parsers work on text)."""
        return list(input_ids) if self._content_started else []


def _parser_class(attribute: str) -> type | None:
    """The class named ``attribute`` (``PyagentTool_hermes``...), made from the registered parser."""
    bases: Mapping[str, tuple[type, Kind[Any]]] = {
        TOOL_PREFIX: (PyagentToolParser, TOOL_PARSER), REASONING_PREFIX: (PyagentReasoningParser, REASONING_PARSER),
    }
    for prefix, (base, kind) in bases.items():
        if attribute.startswith(prefix):
            name = attribute[len(prefix):]
            get_registry().get(kind, name)  # an unknown name raises, listing the installed ones
            return type(attribute, (base,), {"pyagent_name": name, "__module__": __name__,
                                             "__doc__": f"pyagent's {kind.title} {name!r} as a vLLM parser."})
    return None


def __getattr__(attribute: str) -> type:
    made = _parser_class(attribute)
    if made is None:
        raise AttributeError(f"module {__name__!r} has no attribute {attribute!r}")
    globals()[attribute] = made
    return made
