"""profile: the kernels count their calls and time per area while counting is on, and nothing
outside; a product shared with a helper thread counts a hand-off within its time."""

from __future__ import annotations

import pytest
import torch

import pyagent_kernels
from pyagent_kernels.layer_ops import add_rms_norm
from pyagent_kernels.linear import linear
from pyagent_kernels.profile import AREAS, count_kernels

COMPILED = bool(pyagent_kernels.status()["compiled"])
needs_c = pytest.mark.skipif(not COMPILED, reason="pyagent_kernels._C is not built")


@needs_c
def test_calls_are_counted_per_area_inside_the_block_only() -> None:
    x, w = torch.randn(2, 64), torch.randn(32, 64)
    linear(x, w, threads=1)  # before the block: not counted
    with count_kernels() as counted:
        linear(x, w, threads=1)
        linear(x, w, threads=1)
        add_rms_norm(x, torch.ones(64), 1e-6)
    linear(x, w, threads=1)  # after: not counted
    assert counted.compiled
    assert counted.calls == {area: {"linear": 2, "layer_ops": 1}.get(area, 0) for area in AREAS}
    assert counted.seconds["linear"] > 0 and counted.seconds["layer_ops"] > 0 and counted.seconds["attention"] == 0
    assert counted.total_s == sum(counted.seconds.values())
    assert counted.shared_calls == 0 and counted.handoff_s == 0  # one thread: no hand-off


@needs_c
def test_a_shared_product_counts_its_hand_off_within_its_time() -> None:
    x, w = torch.randn(4, 512), torch.randn(1024, 512)
    with count_kernels() as counted:
        linear(x, w, threads=2)
    assert counted.calls["linear"] == 1 and counted.shared_calls == 1
    assert 0 <= counted.handoff_s <= counted.seconds["linear"]


def test_without_the_extension_nothing_is_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    from pyagent_kernels import _extension

    monkeypatch.setattr(_extension, "load", lambda: _extension.Extension(None, None, None, "not built"))
    with count_kernels() as counted:
        pass
    assert not counted.compiled and counted.total_s == 0 and counted.calls == dict.fromkeys(AREAS, 0)
