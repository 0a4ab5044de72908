"""JSONSchemaBench schemas with their valid and invalid instances, walked token by token through a matcher.

The data (``../shared/data/jsonschemabench/``, one file per schema: ``{"schema", "tests": [{"data",
"valid"}]}``) keeps instances as parsed JSON, so each one is serialised here: ``compact`` (``,`` and
``:``) or ``spaced`` (``, `` and ``: ``, the form models usually write), non-ASCII characters kept.
The text is tokenised with the model's tokenizer, as the model would emit it, then fed to a matcher:
before each token the matcher fills its bitmask row, the token's bit must be set and
``accept_token`` must agree; at the end an end-of-sequence token must be allowed and terminate.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs

from pyagent_core.interfaces.grammar import CompiledGrammar, TokenizerInfo, allocate_bitmask
from pyagent_engine.benchmarks.shared_data import SHARED_DATA

DATA_ENV = "PYAGENT_JSONSCHEMABENCH"
SEPARATORS = {"compact": (",", ":"), "spaced": (", ", ": ")}


def default_data_dir() -> Path:
    """``$PYAGENT_JSONSCHEMABENCH``, else ``shared/data/jsonschemabench`` beside the repository."""
    configured = os.environ.get(DATA_ENV)
    if configured:
        return Path(configured)
    return SHARED_DATA / "jsonschemabench"


@attrs.frozen
class SchemaCase:
    """One JSONSchemaBench file: its schema and the instances marked valid and invalid."""

    name: str
    schema: dict[str, Any]
    valid: tuple[Any, ...]
    invalid: tuple[Any, ...]


def load_cases(folder: Path | None = None, limit: int | None = None, stride: int = 1) -> list[SchemaCase]:
    """The cases of ``folder`` sorted by file name, every ``stride``-th one, at most ``limit``.

    Raises ``FileNotFoundError`` naming the folder when it holds no schema files.
    """
    folder = folder or default_data_dir()
    files = sorted(p for p in folder.glob("*") if p.is_file() and p.name != "README.md") if folder.is_dir() else []
    if not files:
        raise FileNotFoundError(f"no JSONSchemaBench files in {folder}; set {DATA_ENV} to the data folder")
    cases = []
    for path in files[::stride][:limit]:
        data = json.loads(path.read_text(encoding="utf-8"))
        tests = data.get("tests") or []
        cases.append(SchemaCase(
            name=path.name.removesuffix(".json"), schema=data["schema"],
            valid=tuple(t["data"] for t in tests if t["valid"]),
            invalid=tuple(t["data"] for t in tests if not t["valid"]),
        ))
    return cases


def serialise(instance: Any, style: str) -> str:
    """``instance`` as JSON text in ``style`` (``compact`` or ``spaced``), non-ASCII kept."""
    return json.dumps(instance, separators=SEPARATORS[style], ensure_ascii=False)


@attrs.frozen
class Walk:
    """What happened to one instance.

    Attributes:
        accepted: every token was allowed and accepted and the end-of-sequence token terminated it.
        stopped_at: the index of the first refused token (``len(tokens)`` when the end was refused).
        disagreement: a token whose bit and ``accept_token`` disagreed (a matcher bug), else ``None``.
        step_seconds: seconds of each ``accept_token`` plus the next ``fill_bitmask``.
    """

    accepted: bool
    stopped_at: int | None
    disagreement: int | None
    step_seconds: tuple[float, ...]


def walk(compiled: CompiledGrammar, info: TokenizerInfo, tokens: list[int],
         clock: Callable[[], float] = time.perf_counter) -> Walk:
    """Feed ``tokens`` then end-of-sequence through a fresh matcher of ``compiled``, checking masks."""
    matcher = compiled.matcher()
    bitmask = allocate_bitmask(1, info.vocab_size)
    steps: list[float] = []
    matcher.fill_bitmask(bitmask, 0)
    for index, token in enumerate([*tokens, info.eos_token_ids[0]]):
        words = bitmask[0].tolist()
        allowed = bool(words[token >> 5] >> (token & 31) & 1)
        started = clock()
        accepted = matcher.accept_token(token)
        if accepted != allowed:
            return Walk(False, index, index, tuple(steps))
        if not accepted:
            return Walk(False, index, None, tuple(steps))
        matcher.fill_bitmask(bitmask, 0)
        steps.append(clock() - started)
    return Walk(matcher.is_terminated(), None, None, tuple(steps[:-1]))


def instance_texts(case: SchemaCase, styles: tuple[str, ...]) -> Iterator[tuple[bool, str, str]]:
    """``(valid, style, text)`` for every instance of ``case`` in every style."""
    for valid, instances in ((True, case.valid), (False, case.invalid)):
        for instance in instances:
            for style in styles:
                yield valid, style, serialise(instance, style)
