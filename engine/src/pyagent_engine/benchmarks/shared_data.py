"""Where the benchmarks' public test data lives: ``../shared/data`` beside the repository checkout."""

from __future__ import annotations

from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[4]
"""The checkout holding ``engine/src/pyagent_engine`` (meaningful for an editable install)."""

SHARED_DATA = REPOSITORY.parent / "shared" / "data"
"""JSONSchemaBench, Mooncake traces and Spec-Bench questions, kept beside the repository, never copied."""
