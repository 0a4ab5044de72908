"""Where a step's time goes, counted inside the C kernels (``include/pyagent/profile.h``).

``with count_kernels() as counted:`` switches the kernels' counters on for the block; afterwards
``counted.seconds`` holds the wall time spent inside the kernels per area (the linear products,
paged attention, the layer operations, LoRA, the mixers), ``counted.calls`` the number of calls, and
``counted.handoff_s`` the part of that time the calling thread spent handing work to the helper
threads and waiting for their last chunks (in the ``shared_calls`` calls that had helpers). Time
outside the kernels (Python, torch operations, the cffi transitions) is a step's wall time minus
``counted.total_s``. The counters are process-wide: count one thread's steps at a time. Without the
compiled extension the kernels run in torch and nothing is counted (``counted.compiled`` is False).

Nothing here imports torch.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator

from pyagent_kernels import _extension

#: The areas the kernels count, in the order of ``enum pak_profile_area``.
AREAS: tuple[str, ...] = ("linear", "attention", "layer_ops", "lora", "mixers")


@dataclasses.dataclass
class KernelCounts:
    """What :func:`count_kernels` counted: per area, calls and seconds inside the kernels, and the
    calling thread's seconds spent on hand-offs to the helper threads (included in the areas' seconds)."""

    compiled: bool = False
    calls: dict[str, int] = dataclasses.field(default_factory=lambda: dict.fromkeys(AREAS, 0))
    seconds: dict[str, float] = dataclasses.field(default_factory=lambda: dict.fromkeys(AREAS, 0.0))
    shared_calls: int = 0
    handoff_s: float = 0.0

    @property
    def total_s(self) -> float:
        """Seconds inside the kernels, every area together (hand-offs included)."""
        return sum(self.seconds.values())


@contextlib.contextmanager
def count_kernels() -> Iterator[KernelCounts]:
    """Count the kernels' calls and time while the block runs; the result fills in when it ends."""
    counts = KernelCounts()
    ext = _extension.load()
    if ext.lib is None:
        yield counts
        return
    ffi, lib = ext.ffi, ext.lib
    lib.pak_profile_enable(1)
    try:
        yield counts
    finally:
        lib.pak_profile_enable(0)
        read = ffi.new("pak_profile_counters *")
        lib.pak_profile_read(read)
        counts.compiled = True
        counts.calls = {area: int(read.calls[i]) for i, area in enumerate(AREAS)}
        counts.seconds = {area: read.ns[i] / 1e9 for i, area in enumerate(AREAS)}
        counts.shared_calls = int(read.shared_calls)
        counts.handoff_s = read.handoff_ns / 1e9
