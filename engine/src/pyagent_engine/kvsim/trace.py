"""Block-hash traces in the Mooncake format: one JSON request per line with its ``hash_ids``.

Each request lists the ids of its prompt's KV blocks in order; block ``i`` stands for the prompt's
first ``i + 1`` blocks (chained hashes), so the ids of a request form a prefix chain and an id has
one parent throughout a trace. ``input_length`` (optional) gives the prompt's tokens, from which the
last block's token count follows; the other blocks hold ``block_size`` tokens.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path

import attrs

from pyagent_core.errors import TraceError

MOONCAKE_BLOCK_SIZE = 512
"""Tokens per block in the published Mooncake traces."""


@attrs.frozen
class BlockTrace:
    """A replayable trace: each request's chain of block ids and the tokens its last block holds.

    Build one with :func:`load_trace` or :meth:`from_chains`, which check that the chains are
    consistent (no id twice in a request, one parent per id).
    """

    name: str
    requests: tuple[tuple[int, ...], ...]
    last_tokens: tuple[int, ...]
    block_size: int

    @classmethod
    def from_chains(cls, chains: Iterable[Sequence[int]], *, name: str = "trace",
                    block_size: int = MOONCAKE_BLOCK_SIZE,
                    input_lengths: Sequence[int | None] | None = None) -> BlockTrace:
        """Check ``chains`` (one list of block ids per request) and build a trace from them."""
        requests = tuple(tuple(chain) for chain in chains)
        lengths = list(input_lengths) if input_lengths is not None else [None] * len(requests)
        _check_chains(requests, name)
        last = tuple(_last_block_tokens(len(chain), length, block_size)
                     for chain, length in zip(requests, lengths, strict=True))
        return cls(name, requests, last, block_size)

    @property
    def total_blocks(self) -> int:
        """Blocks requested over the whole trace (the denominator of the hit ratio)."""
        return sum(len(chain) for chain in self.requests)

    @property
    def unique_blocks(self) -> int:
        """Distinct block ids in the trace (an unbounded cache misses each once)."""
        return len({block for chain in self.requests for block in chain})

    def head(self, count: int) -> BlockTrace:
        """The trace's first ``count`` requests."""
        return attrs.evolve(self, name=f"{self.name}[:{count}]", requests=self.requests[:count],
                            last_tokens=self.last_tokens[:count])


def _last_block_tokens(blocks: int, input_length: int | None, block_size: int) -> int:
    if input_length is None:
        return block_size
    return min(block_size, max(1, input_length - block_size * (blocks - 1)))


def _check_chains(requests: Sequence[tuple[int, ...]], name: str) -> None:
    parents: dict[int, int | None] = {}
    for index, chain in enumerate(requests):
        if len(set(chain)) != len(chain):
            raise TraceError(f"{name}: request {index + 1} lists a block id twice ({list(chain)[:8]}...); "
                             "hash_ids of one request must be distinct")
        parent: int | None = None
        for block in chain:
            if not isinstance(block, int) or isinstance(block, bool) or block < 0:
                raise TraceError(f"{name}: request {index + 1} has block id {block!r}; ids must be ints >= 0")
            known = parents.setdefault(block, parent)
            if known != parent:
                raise TraceError(
                    f"{name}: block {block} follows block {parent} in request {index + 1} but block {known} "
                    "earlier; hash_ids must be chained prefix hashes (one parent per id)"
                )
            parent = block


def load_trace(path: str | Path, *, limit: int | None = None, block_size: int = MOONCAKE_BLOCK_SIZE) -> BlockTrace:
    """Read a Mooncake-format JSONL trace (at most ``limit`` requests) and check its chains.

    Raises :class:`TraceError` for a missing or unreadable file, a malformed line, or ids that do not
    form prefix chains.
    """
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as error:
        raise TraceError(f"cannot read trace {str(path)!r}: {error.strerror or error}; pass a Mooncake "
                         "JSONL file (one request per line with 'hash_ids')") from None
    chains: list[list[int]] = []
    lengths: list[int | None] = []
    for number, line in enumerate(lines, 1):
        if limit is not None and len(chains) >= limit:
            break
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise TraceError(f"{path}:{number}: not JSON ({error.msg}); each line must be one request object") from None
        ids = record.get("hash_ids") if isinstance(record, dict) else None
        if not isinstance(ids, list) or not ids:
            raise TraceError(f"{path}:{number}: no 'hash_ids' list of block ids; got {str(record)[:80]}")
        length = record.get("input_length")
        chains.append(ids)
        lengths.append(length if isinstance(length, int) and not isinstance(length, bool) else None)
    if not chains:
        raise TraceError(f"trace {str(path)!r} holds no requests")
    return BlockTrace.from_chains(chains, name=path.name, block_size=block_size, input_lengths=lengths)
