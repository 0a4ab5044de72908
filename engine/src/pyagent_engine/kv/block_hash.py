"""Chained hashes of full KV blocks: the keys of the prefix cache.

The hash of block ``i`` covers the hash of block ``i - 1`` and the token ids of block ``i``, so equal
hashes mean equal prefixes, not merely equal blocks. A request's ``cache_salt`` is mixed into the
first block's hash: requests with different salts never share a block, whatever their tokens.

Three hash functions: ``sha256`` (the default; collisions are out of reach), ``xxhash`` (xxh3-128,
several times faster; needs the ``xxhash`` package: ``pip install xxhash``) and
``builtin`` (Python's ``hash`` of a tuple: fastest, 64 bits, so collisions are possible on very large
caches, and values differ between processes).
"""

from __future__ import annotations

import hashlib
from array import array
from collections.abc import Callable, Sequence

from pyagent_core.errors import ConfigError
from pyagent_engine.requests.request import BlockHash

HashFunction = Callable[[BlockHash | None, Sequence[int], str | None], BlockHash]
"""``(parent hash or None for the first block, the block's token ids, salt) -> hash``."""

HASH_NAMES = ("sha256", "xxhash", "builtin")


def _token_bytes(parent: BlockHash | None, tokens: Sequence[int], salt: str | None) -> bytes:
    if parent is None:
        head = b"\x00" if salt is None else b"\x01" + salt.encode("utf-8") + b"\x00"
    else:
        head = parent if isinstance(parent, bytes) else parent.to_bytes(8, "little", signed=True)
    return head + array("q", tokens).tobytes()


def _sha256(parent: BlockHash | None, tokens: Sequence[int], salt: str | None) -> BlockHash:
    return hashlib.sha256(_token_bytes(parent, tokens, salt)).digest()


def _builtin(parent: BlockHash | None, tokens: Sequence[int], salt: str | None) -> BlockHash:
    return hash((parent if parent is not None else ("salt", salt), tuple(tokens)))


def hash_function(name: str) -> HashFunction:
    """The block hash function called ``name`` (one of :data:`HASH_NAMES`).

    Raises :class:`ConfigError` for an unknown name, or for ``xxhash`` when the package is missing.
    """
    if name == "sha256":
        return _sha256
    if name == "builtin":
        return _builtin
    if name == "xxhash":
        try:
            import xxhash
        except ImportError:
            raise ConfigError("kv hash 'xxhash' needs the xxhash package: pip install xxhash "
                              "(or choose --kv-hash sha256 or builtin)") from None
        xxh3 = xxhash.xxh3_128_digest

        def _xxhash(parent: BlockHash | None, tokens: Sequence[int], salt: str | None) -> BlockHash:
            return xxh3(_token_bytes(parent, tokens, salt))

        return _xxhash
    raise ConfigError(f"unknown kv hash {name!r}; choose one of: {', '.join(HASH_NAMES)}")


def extend_block_hashes(hashes: list[BlockHash], token_ids: Callable[[int, int], Sequence[int]], block_size: int,
                        salt: str | None, hasher: HashFunction, num_blocks: int) -> None:
    """Append to ``hashes`` the chained hashes of blocks ``len(hashes) .. num_blocks - 1``.

    ``token_ids(start, stop)`` returns the sequence's tokens ``start:stop``; hashes already there are kept.
    """
    for index in range(len(hashes), num_blocks):
        parent = hashes[index - 1] if index else None
        hashes.append(hasher(parent, token_ids(index * block_size, (index + 1) * block_size), salt))
