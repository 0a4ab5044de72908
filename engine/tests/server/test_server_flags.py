"""``pyagent serve``'s flags are checked before the model loads: each bad one is one line and exit status 2.

Every case also names a model that does not exist: were the flag checked after loading, the error
would be about the model instead.
"""

from __future__ import annotations

import socket
import subprocess

import pytest

from pyagent_engine.testing.cli_batch import run_commands

NO_MODEL = ("--model", "/no/such/model.gguf")

BAD_FLAGS = [
    (("--request-timeout", "nan"), "--request-timeout must be 0 (no limit) or a number of seconds from 1, got nan"),
    (("--request-timeout", "-1"), "--request-timeout must be 0 (no limit) or a number of seconds from 1, got -1.0"),
    (("--request-timeout", "1e-9"), "got 1e-09: shorter, every request would time out"),
    (("--request-timeout", "inf"), "--request-timeout must be 0 (no limit) or a number of seconds from 1, got inf"),
    (("--shutdown-grace", "-5"), "--shutdown-grace must be a number of seconds >= 0, got -5.0"),
    (("--shutdown-grace", "nan"), "--shutdown-grace must be a number of seconds >= 0, got nan"),
    (("--max-concurrent", "-1"), "--max-concurrent must be >= 0 (0: no cap), got -1"),
    (("--max-body-bytes", "0"), "--max-body-bytes must be positive, got 0"),
    (("--log-level", "loud"), "--log-level takes critical, error, warning, info, debug, trace, got 'loud'"),
    (("--port", "99999"), "--port must be from 1 to 65535, got 99999"),
    (("--port", "0"), "--port must be from 1 to 65535, got 0"),
    (("--host", "203.0.113.7"), "cannot listen on 203.0.113.7:"),
    (("--grammar-cache-mib", "-1"), "--grammar-cache-mib must be a number of MiB >= 0 (0: no cache), got -1.0"),
    (("--api-key", ""), "the API key (--api-key or PYAGENT_API_KEY) is empty: give a key, or leave both out"),
]
"""Each bad flag and what its error says."""


@pytest.fixture(scope="module")
def refused(tmp_path_factory: pytest.TempPathFactory) -> list[subprocess.CompletedProcess[str]]:
    """``pyagent serve`` with each of :data:`BAD_FLAGS`, in one process (each command's own output and status)."""
    return run_commands([("serve", *NO_MODEL, *args) for args, _ in BAD_FLAGS], cwd=tmp_path_factory.mktemp("flags"))


@pytest.mark.parametrize("case", range(len(BAD_FLAGS)), ids=[" ".join(args) for args, _ in BAD_FLAGS])
def test_bad_server_flags_fail_before_the_model_loads(refused, case):
    message = BAD_FLAGS[case][1]
    result = refused[case]
    assert result.returncode == 2 and message in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_an_empty_api_key_in_the_environment_is_refused(cli, tmp_path):
    result = cli("serve", *NO_MODEL, env={"PYAGENT_API_KEY": ""}, cwd=tmp_path)
    assert result.returncode == 2 and "the API key (--api-key or PYAGENT_API_KEY) is empty" in result.stderr


def test_a_busy_port_fails_before_the_model_loads(cli, tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = cli("serve", *NO_MODEL, "--port", str(port), cwd=tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip() == (f"error: cannot listen on 127.0.0.1:{port}: Address already in use; choose "
                                     "another --port (or --host), or stop the process that holds it")


def test_the_grammar_cache_flag_sets_the_cache_bytes():
    from pyagent_engine.cli.constraints import structured_config
    from pyagent_engine.structured.orchestrator import DEFAULT_CACHE_BYTES

    assert structured_config(None, 30.0, cache_mib=16).cache_bytes == 16 * 2**20
    assert structured_config(None, 30.0, cache_mib=0.5).cache_bytes == 2**19
    assert structured_config(None, 30.0).cache_bytes == DEFAULT_CACHE_BYTES == 256 * 2**20
