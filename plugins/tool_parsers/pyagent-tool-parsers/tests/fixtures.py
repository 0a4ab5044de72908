# ruff: noqa: E501 -- each fixture is one model output, kept on one line where it fits the format
"""Model outputs in each family's published format, and what the parser must find in them.

Shared by the conformance tests (``cases``) and the CLI/pipeline tests. Arguments are decoded JSON.
"""

from __future__ import annotations

from typing import Any

from pyagent_core.testing.tool_parser import ToolParserCase as Case

TOOLS = (
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {
        "city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        "opts": {"type": "object"}}, "required": ["city"]}}},
    {"type": "function", "function": {"name": "add", "parameters": {"type": "object", "properties": {
        "a": {"type": "number"}, "b": {"type": "number"}}, "required": ["a", "b"]}}},
)

PARIS: tuple[str, dict[str, Any]] = ("get_weather", {"city": "Paris"})
TOKYO: tuple[str, dict[str, Any]] = ("get_weather", {"city": "東京 🌧", "unit": "celsius"})
ADD: tuple[str, dict[str, Any]] = ("add", {"a": 1, "b": 2.5})
NESTED: tuple[str, dict[str, Any]] = ("get_weather", {"city": "Oslo", "opts": {"days": [1, 2], "x": {"y": None, "z": "ü"}}})
PLAIN = Case("Just an answer, no tools.", content="Just an answer, no tools.")

CASES: dict[str, list[Case]] = {
    "hermes": [
        PLAIN,
        Case('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>', calls=[PARIS]),
        Case('<tool_call>\n{"name": "get_weather", "arguments": {"city": "東京 🌧", "unit": "celsius"}}\n</tool_call>\n'
             '<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2.5}}\n</tool_call>', calls=[TOKYO, ADD]),
        Case('Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo", "opts": '
             '{"days": [1, 2], "x": {"y": null, "z": "ü"}}}}\n</tool_call>\nDone.',
             content="Let me check.\n\nDone.", calls=[NESTED]),
        Case('<tool_call>{"arguments": {"a": 1, "b": 2.5}, "name": "add"}</tool_call>', calls=[ADD]),
        Case('<tool_call>{"name": "get_weather", "arguments": {"city": "</tool_call><tool_call>"}}</tool_call>',
             calls=[("get_weather", {"city": "</tool_call><tool_call>"})]),
        Case('<tool_call>{"name": "add", "arguments": "{\\"a\\": 1, \\"b\\": 2.5}"}</tool_call>', calls=[ADD]),
        Case('Checking <tool_call>{"name": "get_weather", "arguments": {"city": "Par', content="Checking", errors=1),
        Case('<tool_call>{"name": "get_weather", "arguments": {"city": Paris}}</tool_call> ok', content="ok", errors=1),
        Case('<tool_call>{"name": "nope", "arguments": {}}</tool_call>', errors=1),
        Case('<tool_call>{"name": "add", "arguments": {"a": "one", "b": 2}}</tool_call>', errors=1),
        Case('<tool_call>no json here</tool_call>after', content="after", errors=1),
        Case('<tool_call>{"name": "get_weather", "arguments": "hello"}</tool_call>', errors=1),
        Case('<tool_call>{"name": "get_weather", "arguments": "{hello world}"}</tool_call>', errors=1),
        Case('<tool_call>{"name": "get_weather", "arguments": "[oops"}</tool_call>', errors=1),
        Case('<tool_call>{"name": "get_weather", "arguments": "{\\"city\\": \\"Paris\\"} tail text"}</tool_call>\n'
             '<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2.5}}</tool_call>', calls=[ADD], errors=1),
    ],
    "llama3_json": [
        PLAIN,
        Case('{"name": "get_weather", "parameters": {"city": "Paris"}}', calls=[PARIS]),
        Case('<|python_tag|>{"name": "get_weather", "parameters": {"city": "東京 🌧", "unit": "celsius"}}; '
             '{"name": "add", "parameters": {"a": 1, "b": 2.5}}', calls=[TOKYO, ADD]),
        Case('{"name": "get_weather", "arguments": {"city": "Oslo", "opts": {"days": [1, 2], "x": {"y": null, '
             '"z": "ü"}}}} Hope that helps.', content="Hope that helps.", calls=[NESTED]),
        Case('{"answer": 42}', content='{"answer": 42}'),
        Case('{"name": "get_weather", "parameters": {"city": "<|python_tag|>{"}}',
             calls=[("get_weather", {"city": "<|python_tag|>{"})]),
        Case('<|python_tag|>{"name": "add", "parameters": {"a": 1, "b": ', errors=1),
        Case('{"name": "get_weather", "parameters": {invalid json}', errors=1),
    ],
    "pythonic": [
        PLAIN,
        Case('[get_weather(city="Paris")]', calls=[PARIS]),
        Case("[get_weather(city='東京 🌧', unit='celsius'), add(a=1, b=2.5)]", calls=[TOKYO, ADD]),
        Case('<|python_start|>[get_weather(city="Oslo", opts={"days": [1, 2], "x": {"y": None, "z": "ü"}})]'
             '<|python_end|>', calls=[NESTED]),
        Case('[get_weather(city="a), b(]")]', calls=[("get_weather", {"city": "a), b(]"})]),
        Case("[link](https://example.com) is a list?", content="[link](https://example.com) is a list?"),
        Case('[get_weather(city="Par', errors=1),
        Case('[get_weather("Paris")]', errors=1),
        Case("[get_weather(city='x'])]", errors=1),
        Case("[bad(x=b'z'), get_weather(city='San Francisco', metric='celsius')]",
             calls=[("get_weather", {"city": "San Francisco", "metric": "celsius"})], errors=1),
        Case("[add(a=1e999, b=1), get_weather(city='San Francisco')]", calls=[("get_weather", {"city": "San Francisco"})],
             errors=1),
    ],
    "mistral": [
        PLAIN,
        Case('[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Paris"}}]', calls=[PARIS]),
        Case('[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "東京 🌧", "unit": "celsius"}}, '
             '{"name": "add", "arguments": {"a": 1, "b": 2.5}}]', calls=[TOKYO, ADD]),
        Case('[TOOL_CALLS]get_weather[ARGS]{"city": "東京 🌧", "unit": "celsius"}[TOOL_CALLS]add[ARGS]{"a": 1, "b": 2.5}',
             calls=[TOKYO, ADD]),
        Case('Sure.[TOOL_CALLS]get_weather{"city": "Oslo", "opts": {"days": [1, 2], "x": {"y": null, "z": "ü"}}}',
             content="Sure.", calls=[NESTED]),
        Case('[TOOL_CALLS]add[CALL_ID]a1b2c3d4e[ARGS]{"a": 1, "b": 2.5}', calls=[ADD]),
        Case('[TOOL_CALLS]get_weather[ARGS]{"city": "[TOOL_CALLS]x[ARGS]{"}', calls=[("get_weather", {"city": "[TOOL_CALLS]x[ARGS]{"})]),
        Case('[TOOL_CALLS]get_weather[ARGS]{"city": "Par', errors=1),
        Case('[TOOL_CALLS]not a call at all', errors=1),
    ],
    "qwen3_coder": [
        PLAIN,
        Case("<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>",
             calls=[PARIS]),
        Case("<tool_call>\n<function=get_weather>\n<parameter=city>\n東京 🌧\n</parameter>\n<parameter=unit>\ncelsius\n"
             "</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=add>\n<parameter=a>\n1\n</parameter>\n"
             "<parameter=b>\n2.5\n</parameter>\n</function>\n</tool_call>", calls=[TOKYO, ADD]),
        Case('I will look.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n<parameter=opts>\n'
             '{"days": [1, 2], "x": {"y": null, "z": "ü"}}\n</parameter>\n</function>\n</tool_call>',
             content="I will look.", calls=[NESTED]),
        Case("<tool_call>\n<function=get_weather>\n<parameter=city>\n<tool_call><function=x>\n</parameter>\n</function>\n"
             "</tool_call>", calls=[("get_weather", {"city": "<tool_call><function=x>"})]),
        Case("<tool_call>\n<function=get_weather>\n<parameter=city>\nPar", errors=1),
        Case("<tool_call>\n<function=get_weather>\n<oops>\n</function>\n</tool_call>", errors=1),
        Case("<tool_call>\n<function=get_weather>\n<oops>\n</function>\n<function=add>\n<parameter=a>\n1\n</parameter>\n"
             "<parameter=b>\n2.5\n</parameter>\n</function>\n</tool_call> ok", content="ok", calls=[ADD], errors=1),
    ],
    "deepseek_v3": [
        PLAIN,
        Case('<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{"city": "Paris"}\n```'
             '<｜tool▁call▁end｜><｜tool▁calls▁end｜>', calls=[PARIS]),
        Case('Sure.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{"city": "東京 🌧", '
             '"unit": "celsius"}\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>add\n```json\n{"a": 1, '
             '"b": 2.5}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>', content="Sure.", calls=[TOKYO, ADD]),
        Case('<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{"city": "```<｜tool▁call▁end｜>"}'
             '\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>', calls=[("get_weather", {"city": "```<｜tool▁call▁end｜>"})]),
        Case('<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{"city": "Pa', errors=1),
    ],
    "deepseek_v31": [
        PLAIN,
        Case('<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": "Paris"}<｜tool▁call▁end｜>'
             '<｜tool▁calls▁end｜>', calls=[PARIS]),
        Case('<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": "東京 🌧", "unit": "celsius"}'
             '<｜tool▁call▁end｜><｜tool▁call▁begin｜>add<｜tool▁sep｜>{"a": 1, "b": 2.5}<｜tool▁call▁end｜><｜tool▁calls▁end｜>'
             'Done.', content="Done.", calls=[TOKYO, ADD]),
        Case('<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": "Oslo", "opts": {"days": [1, 2], '
             '"x": {"y": null, "z": "ü"}}}<｜tool▁call▁end｜>', calls=[NESTED]),
        Case('<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": "Pa', errors=1),
    ],
    "kimi_k2": [
        PLAIN,
        Case('<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>'
             '{"city": "Paris"}<|tool_call_end|><|tool_calls_section_end|>', calls=[PARIS]),
        Case('On it.<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>'
             '{"city": "東京 🌧", "unit": "celsius"}<|tool_call_end|><|tool_call_begin|>functions.add:1'
             '<|tool_call_argument_begin|>{"a": 1, "b": 2.5}<|tool_call_end|><|tool_calls_section_end|>',
             content="On it.", calls=[TOKYO, ADD]),
        Case('<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>'
             '{"city": "<|tool_call_end|>"}<|tool_call_end|><|tool_calls_section_end|>',
             calls=[("get_weather", {"city": "<|tool_call_end|>"})]),
        Case('<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{', errors=1),
        Case('Help. <|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>'
             '{"city": "Beijing"<|tool_call_end|><|tool_call_begin|>functions.get_weather:1<|tool_call_argument_begin|>'
             '{"city": "Shanghai"}<|tool_call_end|><|tool_calls_section_end|>', content="Help.",
             calls=[("get_weather", {"city": "Shanghai"})], errors=1),
        Case('<|tool_calls_section_begin|><|tool_call_begin|>functions.add:0<|tool_call_argument_begin|>{"a": 1 2}'
             '<|tool_call_end|><|tool_calls_section_end|>Done.', content="Done.", errors=1),
    ],
    "granite": [
        PLAIN,
        Case('<|tool_call|>[{"name": "get_weather", "arguments": {"city": "Paris"}}]', calls=[PARIS]),
        Case('<tool_call>[{"name": "get_weather", "arguments": {"city": "東京 🌧", "unit": "celsius"}}, '
             '{"name": "add", "arguments": {"a": 1, "b": 2.5}}]', calls=[TOKYO, ADD]),
        Case('[1, 2, 3] are numbers.', content="[1, 2, 3] are numbers."),
        Case('<|tool_call|>[{"name": "get_weather", "arguments": {"city": "Pa', errors=1),
    ],
    "internlm": [
        PLAIN,
        Case('<|action_start|><|plugin|>\n{"name": "get_weather", "parameters": {"city": "Paris"}}<|action_end|>',
             calls=[PARIS]),
        Case('Let me see.<|action_start|><|plugin|>\n{"name": "add", "parameters": {"a": 1, "b": 2.5}}<|action_end|>',
             content="Let me see.", calls=[ADD]),
        Case('<|action_start|><|plugin|>{"name": "get_weather", "parameters": {"city": "<|action_end|>"}}<|action_end|>',
             calls=[("get_weather", {"city": "<|action_end|>"})]),
        Case('<|action_start|><|plugin|>\n{"name": "get_weather"', errors=1),
    ],
    "jamba": [
        PLAIN,
        Case('<tool_calls>[{"name": "get_weather", "arguments": {"city": "Paris"}}]</tool_calls>', calls=[PARIS]),
        Case('<tool_calls>[\n{"name": "get_weather", "arguments": {"city": "東京 🌧", "unit": "celsius"}},\n'
             '{"name": "add", "arguments": {"a": 1, "b": 2.5}}\n]</tool_calls> ok', content="ok", calls=[TOKYO, ADD]),
        Case('<tool_calls>[{"name": "get_weather", "arguments": "[oops"}, {"name": "add", "arguments": {"a": 1, "b": 2.5}}]'
             '</tool_calls>', calls=[ADD], errors=1),
        Case('<tool_calls>[{"name": "get_weather", "arguments": {"city": "Pa', errors=1),
    ],
    "glm45": [
        PLAIN,
        Case("<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n</tool_call>", calls=[PARIS]),
        Case("Checking.\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>東京 🌧</arg_value>\n<arg_key>unit"
             "</arg_key>\n<arg_value>celsius</arg_value>\n</tool_call>\n<tool_call>add\n<arg_key>a</arg_key>\n<arg_value>1"
             "</arg_value>\n<arg_key>b</arg_key>\n<arg_value>2.5</arg_value>\n</tool_call>",
             content="Checking.", calls=[TOKYO, ADD]),
        Case('<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Oslo</arg_value>\n<arg_key>opts</arg_key>\n'
             '<arg_value>{"days": [1, 2], "x": {"y": null, "z": "ü"}}</arg_value>\n</tool_call>', calls=[NESTED]),
        Case("<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Pa", errors=1),
    ],
    "xlam": [
        PLAIN,
        Case('[{"name": "get_weather", "arguments": {"city": "Paris"}}]', calls=[PARIS]),
        Case('Here you go:\n```json\n[{"name": "get_weather", "arguments": {"city": "東京 🌧", "unit": "celsius"}}, '
             '{"name": "add", "arguments": {"a": 1, "b": 2.5}}]\n```', content="Here you go:", calls=[TOKYO, ADD]),
        Case('<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2.5}}</tool_call>', calls=[ADD]),
        Case('[{"name": "get_weather", "arguments": {"city": "Pa', errors=1),
    ],
    "phi4_mini_json": [
        PLAIN,
        Case('functools[{"name": "get_weather", "arguments": {"city": "Paris"}}]', calls=[PARIS]),
        Case('functools[{"name": "get_weather", "arguments": {"city": "東京 🌧", "unit": "celsius"}}, '
             '{"name": "add", "parameters": {"a": 1, "b": 2.5}}]', calls=[TOKYO, ADD]),
        Case('functools[{"name": "get_weather", "arguments": {"city": "Pa', errors=1),
    ],
    "minimax_m2": [
        PLAIN,
        Case('<minimax:tool_call>\n<invoke name="get_weather">\n<parameter name="city">Paris</parameter>\n</invoke>\n'
             '</minimax:tool_call>', calls=[PARIS]),
        Case('Sure.\n<minimax:tool_call>\n<invoke name="get_weather">\n<parameter name="city">東京 🌧</parameter>\n'
             '<parameter name="unit">celsius</parameter>\n</invoke>\n<invoke name="add">\n<parameter name="a">1</parameter>\n'
             '<parameter name="b">2.5</parameter>\n</invoke>\n</minimax:tool_call>', content="Sure.", calls=[TOKYO, ADD]),
        Case('<minimax:tool_call>\n<invoke name="get_weather">\n<parameter name="city">Pa', errors=1),
        Case('<minimax:tool_call>\n<invoke name="add">\n<parameter name="a">one</parameter>\n<parameter name="b">2'
             '</parameter>\n</invoke>\n<invoke name="get_weather">\n<parameter name="city">Paris</parameter>\n</invoke>\n'
             '</minimax:tool_call>', calls=[PARIS], errors=1),
    ],
    "gpt-oss": [
        Case("<|channel|>final<|message|>Just an answer.<|return|>", content="Just an answer."),
        Case('<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>commentary '
             'to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}<|call|>', calls=[PARIS]),
        Case('<|channel|>commentary<|message|>Checking both.<|end|><|start|>assistant to=functions.get_weather'
             '<|channel|>commentary json<|message|>{"city": "東京 🌧", "unit": "celsius"}<|call|><|start|>assistant'
             '<|channel|>commentary to=functions.add <|constrain|>json<|message|>{"a": 1, "b": 2.5}<|call|>',
             content="Checking both.", calls=[TOKYO, ADD]),
        Case('<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "<|call|>"}<|call|>',
             calls=[("get_weather", {"city": "<|call|>"})]),
        Case('<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Pa', errors=1),
    ],
}
