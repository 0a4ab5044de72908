"""A bounded schemathesis pass over the OpenAPI schema the server publishes: no input gets a 5xx but the
request timeout's 504 (the 2 s limit of this server, on a loaded machine); that 504 itself; and every
text field of every endpoint holding text that is not Unicode (a lone surrogate, an undecodable
byte, the CESU-8 bytes of a surrogate pair) gets a 400, never a 5xx.

Localhost only, a few examples per operation, derandomized (the same requests on every run, so CI
cannot fail by chance; raise EXAMPLES locally to search further). Generated requests keep their
random fields, but their token counts are capped (``max_tokens`` at most 4, ``n`` at most 2) so
each runs in well under a second on the embedded model; the server's own limits (2 s per request,
2 s per grammar compile) bound the rest.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .conftest import API_KEY, Server, running
from .test_server_errors import error_of
from .test_server_lifecycle import LONG, wait_for

CAPS = {"max_tokens": 4, "max_completion_tokens": 4, "n": 2}
EXAMPLES = 12
"""Generated requests per operation."""


@pytest.fixture(scope="module")
def fuzz_server() -> Iterator[Server]:
    """A server with tight limits, so no generated request can run long."""
    with running("--api-key", API_KEY, "--tool-parser", "hermes", "--request-timeout", "2",
                 "--grammar-timeout", "2", "--max-waiting", "8") as started:
        yield started


GENERATION = ("/v1/chat/completions", "/v1/completions")


def _capped(path: str, body: Any) -> Any:
    if path in GENERATION and isinstance(body, dict):
        for key, cap in CAPS.items():
            value = body.get(key)
            body[key] = min(value, cap) if isinstance(value, int) and not isinstance(value, bool) else cap
    return body


def test_no_generated_request_gets_a_server_error(fuzz_server: Server) -> None:
    schema = schemathesis.openapi.from_url(fuzz_server.url + "/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    assert {op.path for op in operations} >= {*GENERATION, "/v1/models", "/tokenize", "/detokenize", "/health"}
    for operation in operations:

        @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), database=None,
                  derandomize=True)
        @given(case=operation.as_strategy())
        def no_server_error(case: Any) -> None:
            case.body = _capped(case.path, case.body)
            response = case.call(headers={"Authorization": f"Bearer {API_KEY}"}, timeout=30)
            timed_out = response.status_code == 504 and response.json()["error"]["code"] == "timeout"
            assert response.status_code < 500 or timed_out, (case.method, case.path, case.body,
                                                             response.status_code, response.text)

        no_server_error()

def test_request_past_the_timeout_is_aborted_with_a_504(fuzz_server: Server) -> None:
    error = error_of(fuzz_server.post("/v1/completions", LONG), 504)
    assert error["code"] == "timeout" and error["type"] == "timeout_error"
    wait_for(fuzz_server, lambda h: h["running"] == 0 and h["kv_blocks_free"] == h["kv_blocks_total"],
             "the timed-out request freeing its blocks")


BASES: dict[str, dict[str, Any]] = {
    "/v1/chat/completions": {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1},
    "/v1/completions": {"prompt": "Hi", "max_tokens": 1},
    "/tokenize": {"prompt": "Hi"},
    "/detokenize": {"tokens": [1]},
}
"""A valid body per POST endpoint, which each case puts one bad text into."""

NOT_UNICODE = {"lone surrogate": b"\\ud800", "undecodable byte": b"\xe9", "CESU-8": b"\xed\xa0\x80\xed\xb0\x80"}
"""What goes into a JSON string: an escape, or raw bytes."""
PLACEHOLDER = "@@not-unicode@@"


def text_fields(spec: dict[str, Any], schema: dict[str, Any], path: tuple[Any, ...] = (),
                seen: frozenset[str] = frozenset()) -> list[tuple[Any, ...]]:
    """The paths of every string a body of ``schema`` can hold (an item as index 0; a free-form object's
    value under the key ``"x"``), from the published OpenAPI document ``spec``."""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[1]
        return [] if name in seen else text_fields(spec, spec["components"]["schemas"][name], path, seen | {name})
    found: list[tuple[Any, ...]] = []
    options = schema.get("anyOf", []) + schema.get("oneOf", []) + schema.get("allOf", [])
    for option in options:
        found += text_fields(spec, option, path, seen)
    kind = schema.get("type")
    if kind == "string" or (path and not kind and not options and "properties" not in schema):  # or any JSON
        found.append(path)
    if kind == "array" and "items" in schema:
        found += text_fields(spec, schema["items"], (*path, 0), seen)
    for key, child in schema.get("properties", {}).items():
        found += text_fields(spec, child, (*path, key), seen)
    extra = schema.get("additionalProperties")
    if kind == "object" and extra not in (None, False):
        found += text_fields(spec, extra if isinstance(extra, dict) else {}, (*path, "x"), seen)
    return sorted(set(found), key=str)


def with_text(body: Any, path: tuple[Any, ...], value: str) -> Any:
    """``body`` with ``value`` at ``path`` (objects and lists made where missing)."""
    if not path:
        return value
    head, rest = path[0], path[1:]
    if isinstance(head, int):
        items = list(body) if isinstance(body, list) and body else [{}]
        items[0] = with_text(items[0], rest, value)
        return items
    current = dict(body) if isinstance(body, dict) else {}
    current[head] = with_text(current.get(head), rest, value)
    return current


def check_text_field(url: str, path: str, body: Any, field: tuple[Any, ...], bad: bytes) -> None:
    """A few bodies (the text around ``bad`` drawn by hypothesis, derandomized) with ``bad`` in ``field``: each
    a 400, none a 5xx."""
    headers = {"Authorization": f"Bearer {API_KEY}", "Content-Type": "application/json"}
    template = json.dumps(with_text(body, field, PLACEHOLDER)).encode()

    @settings(max_examples=2, deadline=None, suppress_health_check=list(HealthCheck), database=None,
              derandomize=True)
    @given(before=st.text(max_size=6), after=st.text(max_size=6))
    def never_a_server_error(before: str, after: str) -> None:
        inside = json.dumps(before)[1:-1].encode() + bad + json.dumps(after)[1:-1].encode()
        data = template.replace(PLACEHOLDER.encode(), inside)
        response = httpx2.post(url + path, content=data, headers=headers, timeout=60)
        assert response.status_code == 400, (path, field, data[:200], response.text)
        assert "Traceback" not in response.text

    never_a_server_error()


def test_text_that_is_not_unicode_in_any_field_is_never_a_server_error(fuzz_server: Server) -> None:
    spec = httpx2.get(fuzz_server.url + "/openapi.json", timeout=30).json()
    checked = 0
    for path, base in BASES.items():
        body_schema = spec["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]
        fields = text_fields(spec, body_schema)
        assert fields, path
        for field in fields:
            for bad in NOT_UNICODE.values():
                check_text_field(fuzz_server.url, path, base, field, bad)
                checked += 1
    assert checked >= 3 * 90  # the text fields of the four endpoints (chat has about 60), each way
