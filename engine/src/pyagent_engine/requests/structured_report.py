"""What structured output reports about a request: which backend served it, what was skipped and why,
which keywords of its schema went unenforced."""

from __future__ import annotations

from typing import Any

import attrs


@attrs.frozen
class Skip:
    """A backend the fallback walk passed over, and why."""

    backend: str
    reason: str


@attrs.frozen
class StructuredReport:
    """How structured output served a request, as the engine reports it.

    Attributes:
        requested: the backend the request asked for (a name or ``"auto"``).
        backend: the backend that compiled its constraint (``None`` while compiling or when it failed).
        skipped: backends passed over before it, with their reasons.
        cache_hit: its grammar came from the cache.
        compile_s: seconds its compile took (``None`` while compiling or when it failed).
        jump_forward_tokens: output tokens appended without sampling because the grammar forced them.
        unenforced: keywords of its JSON schema the serving backend does not enforce, so that the output
            may break them (``format:NAME`` for a format); empty when every keyword is enforced.
    """

    requested: str
    backend: str | None = None
    skipped: tuple[Skip, ...] = ()
    cache_hit: bool = False
    compile_s: float | None = None
    jump_forward_tokens: int = 0
    unenforced: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready form (``skipped`` as ``{"backend", "reason"}`` objects)."""
        record = attrs.asdict(self, recurse=False)
        record["skipped"] = [attrs.asdict(s) for s in self.skipped]
        record["unenforced"] = list(self.unenforced)
        return record
