"""How much memory a new allocation may take: host memory (``MemAvailable``, the cgroup limit) or a GPU's free memory.

The KV cache is allocated in one go at engine start; checking it against this first turns an
out-of-memory kill (no message) or an allocator traceback into an error that says what to lower.
"""

from __future__ import annotations

from pathlib import Path

import torch

from pyagent_core.errors import ConfigError

GIB = 2**30


def _meminfo_available() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _cgroup_headroom() -> int | None:
    """What the process's cgroup (v2, else v1) still allows, or ``None`` without a limit."""
    for limit_file, usage_file in (("memory.max", "memory.current"),
                                   ("memory/memory.limit_in_bytes", "memory/memory.usage_in_bytes")):
        try:
            limit = Path("/sys/fs/cgroup", limit_file).read_text().strip()
            usage = Path("/sys/fs/cgroup", usage_file).read_text().strip()
        except OSError:
            continue
        if limit.isdigit() and usage.isdigit() and int(limit) < 2**60:
            return max(0, int(limit) - int(usage))
    return None


def available_bytes(device: torch.device) -> int | None:
    """Bytes a new allocation on ``device`` may take now, or ``None`` when it cannot be told."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    if device.type != "cpu":
        return None
    known = [n for n in (_meminfo_available(), _cgroup_headroom()) if n is not None]
    return min(known) if known else None


def check_fits(nbytes: int, device: torch.device, what: str, fix: str) -> None:
    """Raise :class:`ConfigError` when ``nbytes`` for ``what`` exceed what ``device`` has free.

    ``fix`` says what to lower.
    """
    free = available_bytes(device)
    if free is not None and nbytes > free:
        raise ConfigError(f"{what} needs {nbytes / GIB:.2f} GiB but only {free / GIB:.2f} GiB of "
                          f"{'GPU' if device.type == 'cuda' else 'host'} memory is available; {fix}")
