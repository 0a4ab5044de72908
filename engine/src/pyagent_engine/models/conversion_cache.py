"""A one-time conversion cache: each GGUF file converted once, kept as a checkpoint folder.

Reading a GGUF means parsing its metadata token by token and converting its tensors (quantized
matrices repacked, the others dequantized); reading the result back from safetensors is faster. The cache lives under
``$PYAGENT_CACHE_DIR`` (default ``~/.cache/pyagent``) in ``models/<stem>-<key>/``, where the key
hashes the file's size, modification time and first mebibyte (its header), so a changed or
replaced file gets a new entry. An entry is written to a staging folder and renamed into place,
so a folder that exists is complete. The writer holds an exclusive ``flock`` on a lock file beside
its staging folder while it writes; the lock dies with the process, so a staging folder whose lock
nobody holds (its writer was killed mid-conversion) is removed by the next load
(:func:`remove_stale`), while another process's conversion in progress is left alone. An entry whose
weights the model then refuses is removed too (:func:`discard`).
"""

from __future__ import annotations

import fcntl
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
FORMAT_VERSION = 5  # 3: K-quant, Q5_0 and Q5_1 matrices kept in blocks; 4: the GGUF blocks themselves;
# 5: weights the GGUF converter transformed restored by the model plugin (gguf_restore)
LOCK_SUFFIX = ".lock"
STAGING_SUFFIX = ".staging"


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
    descriptor, name = tempfile.mkstemp(prefix=f".{entry.name}-", suffix=LOCK_SUFFIX, dir=entry.parent)
    lock = Path(name)
    staging = _staging_of(lock)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)  # released by the kernel if this process is killed
        staging.mkdir()
        write_checkpoint(checkpoint, staging, keep_quantized=True)
        os.replace(staging, entry)
    except OSError:
        if not entry.is_dir():  # else another process stored it first
            raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        lock.unlink(missing_ok=True)  # while still held: a cleaner never takes the lock of a finished writer
        os.close(descriptor)


def _staging_of(lock: Path) -> Path:
    return lock.with_name(lock.name.removesuffix(LOCK_SUFFIX) + STAGING_SUFFIX)


def remove_stale(folder: Path) -> list[Path]:
    """Remove the staging folders in ``folder`` whose writer is gone; return them.

    A writer holds the lock beside its staging folder until the folder is renamed into place or
    removed, so a lock that can be taken, or a staging folder without its lock, belongs to a writer
    that was killed. Staging folders of other writers still running stay.
    """
    removed: list[Path] = []
    if not folder.is_dir():
        return removed
    for lock_path in folder.glob(f".*{LOCK_SUFFIX}"):
        try:
            with lock_path.open("rb") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # taken: its writer is dead
                staging = _staging_of(lock_path)
                if staging.exists():
                    shutil.rmtree(staging, ignore_errors=True)
                    removed.append(staging)
                lock_path.unlink(missing_ok=True)
        except OSError:  # held by a running writer, or gone meanwhile
            continue
    # A writer makes its lock before its staging folder and removes it after: a hidden folder without a lock
    # is a dead writer's (or an older pyagent's, which took no lock).
    for staging in folder.glob(".*"):
        if staging.is_dir() and not _lock_of(staging).exists():
            shutil.rmtree(staging, ignore_errors=True)
            removed.append(staging)
    return removed


def _lock_of(staging: Path) -> Path:
    return staging.with_name(staging.name.removesuffix(STAGING_SUFFIX) + LOCK_SUFFIX)


def discard(entry: Path) -> None:
    """Remove the cache folder ``entry`` (its weights turned out unusable); a missing one is fine."""
    shutil.rmtree(entry, ignore_errors=True)
