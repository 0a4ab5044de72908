"""A bounded schemathesis pass over the OpenAPI schema the server publishes: no input gets a 5xx but the
request timeout's 504 (the 2 s limit of this server, on a loaded machine); and that 504 itself.

Localhost only, a few examples per operation. Generated requests keep their random fields, but their
token counts are capped (``max_tokens`` at most 4, ``n`` at most 2) so each runs in well under a
second on the embedded model; the server's own limits (2 s per request, 2 s per grammar compile)
bound the rest.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings

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

        @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), database=None)
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
