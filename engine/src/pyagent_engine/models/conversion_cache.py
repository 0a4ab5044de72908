"""A one-time conversion cache: each GGUF file converted once, kept as a checkpoint folder.

Reading a GGUF means parsing its metadata token by token and converting its tensors (quantized
matrices repacked, the others dequantized); reading the result back from safetensors is faster. The cache lives under
``$PYAGENT_CACHE_DIR`` (default ``~/.cache/pyagent``) in ``models/<stem>-<key>/``, where the key
hashes the file's size, modification time and first mebibyte (its header), so a changed or
replaced file gets a new entry. An entry is written to a temporary folder and renamed into place,
so a folder that exists is complete.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path

from pyagent_engine.models.checkpoint import Checkpoint, write_checkpoint

CACHE_DIR_ENV = "PYAGENT_CACHE_DIR"
HEADER_BYTES = 1 << 20
#: Changes when the layout of an entry changes, so older entries are not read.
FORMAT_VERSION = 4  # 3: K-quant, Q5_0 and Q5_1 matrices kept in blocks; 4: the GGUF blocks themselves


def cache_root(environ: Mapping[str, str] = os.environ) -> Path:
    """The user cache folder: ``$PYAGENT_CACHE_DIR`` or ``~/.cache/pyagent``."""
    configured = environ.get(CACHE_DIR_ENV)
    return Path(configured).expanduser() if configured else Path.home() / ".cache" / "pyagent"


def cache_key(path: Path) -> str:
    """Hex digest of :data:`FORMAT_VERSION` and the file's size, modification time (ns) and first
    :data:`HEADER_BYTES` bytes."""
    stat = path.stat()
    digest = hashlib.sha256(f"{FORMAT_VERSION}:{stat.st_size}:{stat.st_mtime_ns}:".encode())
    with path.open("rb") as file:
        digest.update(file.read(HEADER_BYTES))
    return digest.hexdigest()


def entry_for(path: Path, environ: Mapping[str, str] = os.environ) -> Path:
    """The cache folder that holds (or will hold) the conversion of the GGUF file ``path``."""
    return cache_root(environ) / "models" / f"{path.stem}-{cache_key(path)[:20]}"


def store(checkpoint: Checkpoint, entry: Path) -> None:
    """Write ``checkpoint`` to the cache folder ``entry`` atomically (a concurrent writer may win).

    Raises ``OSError`` when the cache cannot be written (full disk, read-only home).
    """
    entry.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{entry.name}-", dir=entry.parent))
    try:
        write_checkpoint(checkpoint, staging, keep_quantized=True)
        os.replace(staging, entry)
    except OSError:
        if entry.is_dir():  # another process stored it first
            return
        raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
