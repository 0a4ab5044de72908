"""pyagent_kernels.status(), ISA selection, and behaviour when the extension is missing."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from collections.abc import Iterator

import pytest
import torch

import pyagent_kernels
from pyagent_kernels import KernelArgumentError, KernelFallbackWarning, KernelUnavailableError, _extension
from pyagent_kernels.grammar import apply_token_bitmask
from pyagent_kernels.sampling import apply_sampling_mask

COMPILED = bool(pyagent_kernels.status()["compiled"])


def test_status_reports_the_build() -> None:
    status = pyagent_kernels.status()
    assert set(status) == {"compiled", "reason", "isa", "isa_supported", "int8_dot", "amx", "module"}
    if status["compiled"]:
        assert status["reason"] is None
        assert status["isa"] in status["isa_supported"]
        assert "generic" in status["isa_supported"]
    else:
        assert "pyagent_kernels._C" in str(status["reason"])


def test_status_does_not_import_torch() -> None:
    code = (
        "import json, sys, pyagent_kernels; "
        "print(json.dumps([pyagent_kernels.status(), 'torch' in sys.modules]))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    status, torch_imported = json.loads(out)
    assert status["compiled"] == COMPILED
    assert torch_imported is False


@pytest.fixture
def without_extension(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Make ``import pyagent_kernels._C`` fail, as after an install without a compiler."""
    monkeypatch.setitem(sys.modules, "pyagent_kernels._C", None)
    monkeypatch.delattr(pyagent_kernels, "_C", raising=False)
    _extension.load.cache_clear()
    _extension._warn_fallback.cache_clear()
    yield
    monkeypatch.undo()
    _extension.load.cache_clear()
    _extension._warn_fallback.cache_clear()


@pytest.mark.usefixtures("without_extension")
def test_missing_extension_falls_back_with_one_warning() -> None:
    status = pyagent_kernels.status()
    assert status["compiled"] is False
    assert status["isa"] == "none"
    assert "pyagent_kernels._C could not be imported" in str(status["reason"])
    logits = torch.tensor([[1.0, 2.0, 3.0]])
    with pytest.warns(KernelFallbackWarning, match="pure-torch fallbacks"):
        apply_sampling_mask(logits, top_k=torch.tensor([2], dtype=torch.int32))
    assert logits.tolist() == [[float("-inf"), 2.0, 3.0]]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the warning is given once per process, not per call
        apply_token_bitmask(logits, torch.tensor([[2]], dtype=torch.int32))
    assert logits.tolist() == [[float("-inf"), 2.0, float("-inf")]]


@pytest.mark.usefixtures("without_extension")
def test_missing_extension_refuses_backend_c() -> None:
    with pytest.raises(KernelUnavailableError, match="backend='c' was requested"):
        apply_sampling_mask(torch.zeros(1, 3), backend="c")
    with pytest.raises(KernelUnavailableError, match="install a C compiler"):
        pyagent_kernels.set_isa("generic")


@pytest.mark.skipif(not COMPILED, reason="pyagent_kernels._C is not built")
def test_set_isa() -> None:
    supported = pyagent_kernels.status()["isa_supported"]
    try:
        for name in supported:
            assert pyagent_kernels.set_isa(name) == name
            assert pyagent_kernels.status()["isa"] == name
        with pytest.raises(KernelArgumentError, match="unknown instruction set 'sse9'; choose one of"):
            pyagent_kernels.set_isa("sse9")
    finally:
        best = pyagent_kernels.set_isa(None)
    assert best == supported[-1]
