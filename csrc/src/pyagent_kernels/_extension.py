"""The compiled extension ``pyagent_kernels._C``: loading, backend choice, ISA, status.

Nothing here imports torch, so :func:`status` is cheap enough for ``pyagent doctor``.
"""

from __future__ import annotations

import functools
import importlib
import warnings
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any, Literal, NamedTuple, TypedDict

from pyagent_kernels.errors import (
    KernelArgumentError,
    KernelError,
    KernelFallbackWarning,
    KernelUnavailableError,
)

Backend = Literal["auto", "c", "torch"]
BACKENDS: tuple[str, ...] = ("auto", "c", "torch")
REBUILD_HINT = (
    "install a C compiler (gcc) and rebuild pyagent-kernels (not on PyPI) in a pyagent checkout: "
    "`pip install --force-reinstall --no-deps ./csrc`, or `make wheels` and install the wheel it puts in dist/"
)


class Extension(NamedTuple):
    """The loaded extension (``ffi``, ``lib``, module ``path``) or why it could not be loaded."""

    ffi: Any
    lib: Any
    path: str | None
    reason: str | None


@functools.cache
def load() -> Extension:
    """Import ``pyagent_kernels._C`` once; never raises."""
    try:
        compiled = importlib.import_module("pyagent_kernels._C")
    except ImportError as exc:
        reason = f"pyagent_kernels._C could not be imported ({type(exc).__name__}: {exc})"
        return Extension(None, None, None, reason)
    return Extension(compiled.ffi, compiled.lib, compiled.__file__, None)


@functools.cache
def _warn_fallback(reason: str) -> None:
    warnings.warn(
        f"pyagent-kernels is using its pure-torch fallbacks, which are slower: {reason}; "
        f"to build the C kernels, {REBUILD_HINT}",
        KernelFallbackWarning,
        stacklevel=4,
    )


def resolve(backend: str, kernel: str) -> Literal["c", "torch"]:
    """The implementation ``kernel`` should run for ``backend`` ("auto" | "c" | "torch").

    "auto" picks C when the extension is loaded and otherwise warns once and picks torch.
    """
    if backend not in BACKENDS:
        raise KernelArgumentError(f"{kernel}: backend={backend!r} is not one of {', '.join(BACKENDS)}")
    if backend == "torch":
        return "torch"
    ext = load()
    if ext.lib is not None:
        return "c"
    if backend == "c":
        raise KernelUnavailableError(
            f"{kernel}: backend='c' was requested but {ext.reason}; {REBUILD_HINT}, "
            "or pass backend='auto' or 'torch'"
        )
    _warn_fallback(ext.reason or "unknown reason")
    return "torch"


def c_extension(backend: str, kernel: str) -> Extension | None:
    """The loaded extension when ``kernel`` runs in C for ``backend``, None when it runs in torch.

    :func:`resolve` in one call for the wrappers that run every step: the usual case (the extension
    is loaded, backend "auto" or "c") costs two comparisons; the others follow :func:`resolve`'s rules
    (warning, KernelArgumentError, KernelUnavailableError).
    """
    ext = load()
    if ext.lib is not None and (backend == "auto" or backend == "c"):
        return ext
    resolve(backend, kernel)  # "torch", or it raises: "c" needs the extension checked above
    return None


def require() -> tuple[Any, Any]:
    """``(ffi, lib)`` of the loaded extension; KernelUnavailableError if it is not loaded."""
    ext = load()
    if ext.lib is None:
        raise KernelUnavailableError(f"{ext.reason}; {REBUILD_HINT}")
    return ext.ffi, ext.lib


def check_status(rc: int, kernel: str) -> None:
    """Raise KernelError for a non-zero return code the caller did not handle itself."""
    if rc == 0:
        return
    _, lib = require()
    if rc == lib.PAK_ENOMEM:
        raise KernelError(
            f"{kernel}: the C kernel could not allocate its scratch memory; free memory and retry"
        )
    raise KernelError(
        f"{kernel}: the C kernel returned status {rc} for arguments the wrapper had accepted; "
        "this is a bug in pyagent-kernels, please report it with the tensors' shapes and dtypes"
    )


class PreparedCall(NamedTuple):
    """One kernel call on fixed tensors, checked once by a wrapper's ``prepare_*`` function and run
    any number of times by :func:`run_prepared` (each run reads the tensors' current values).

    ``function(*arguments)`` returns the C kernel's status (the torch fallback's closure returns 0);
    ``tensors`` keeps alive the tensors whose pointers ``arguments`` holds. The tensors must keep
    their storage (no ``resize_`` or ``set_``) while the call is in use. ``explain``, when set, is
    given a failing status first and raises the specific error (what was wrong with which input);
    otherwise, or when it returns, :func:`check_status` raises the generic one.
    """

    function: Callable[..., int]
    arguments: tuple[Any, ...]
    kernel: str
    tensors: tuple[Any, ...]
    explain: Callable[[int], None] | None = None


def run_call(function: Callable[..., int], arguments: tuple[Any, ...], kernel: str) -> None:
    """Call a C kernel (or a prepared fallback); KernelError if it returns a failure status."""
    rc = function(*arguments)
    if rc:
        check_status(rc, kernel)


def failed(call: PreparedCall, rc: int) -> None:
    """Raise the error of ``call`` having returned the failing status ``rc``: its own explanation's,
    else :func:`check_status`'s."""
    if call.explain is not None:
        call.explain(rc)
    check_status(rc, call.kernel)


def run_prepared(calls: Iterable[PreparedCall]) -> None:
    """Run prepared calls in order; KernelError (or the call's own explanation) if a C kernel fails."""
    for call in calls:
        rc = call.function(*call.arguments)
        if rc:
            failed(call, rc)


def torch_call(kernel: str, compute: Callable[[], Any], outs: tuple[Any, ...],
               tensors: tuple[Any, ...]) -> PreparedCall:
    """A prepared call that runs a torch fallback: ``compute()`` returns the result (a tensor, or a
    tuple of them), copied into ``outs`` (one buffer per result); ``tensors`` as in :class:`PreparedCall`."""

    def run() -> int:
        results = compute()
        for out, result in zip(outs, results if isinstance(results, tuple) else (results,), strict=True):
            out.copy_(result)
        return 0

    return PreparedCall(run, (), kernel, tensors)


def _isa_names(ffi: Any, lib: Any) -> list[str]:
    return [ffi.string(lib.pak_isa_name(isa)).decode() for isa in range(lib.PAK_ISA_AVX512 + 1)]


def set_isa(name: str | None = None) -> str:
    """Make the C kernels use instruction set ``name`` ("generic", "avx2", "avx512"; None: the best
    one this CPU supports) and return the name now active. Meant for tests and benchmarks: every
    variant gives bit-identical results."""
    ffi, lib = require()
    names = _isa_names(ffi, lib)
    if name is not None and name not in names:
        raise KernelArgumentError(f"unknown instruction set {name!r}; choose one of: {', '.join(names)}")
    rc = lib.pak_isa_select(-1 if name is None else names.index(name))
    if rc == lib.PAK_EUNSUPPORTED:
        supported = [n for i, n in enumerate(names) if lib.pak_isa_supported(i)]
        raise KernelArgumentError(
            f"this CPU (or this build) cannot run the {name!r} kernels; choose one of: {', '.join(supported)}"
        )
    check_status(rc, "set_isa")
    active: int = lib.pak_isa_active()
    return names[active]


@contextmanager
def using_isa(name: str) -> Iterator[str]:
    """Run the C kernels on instruction set ``name`` inside the ``with`` block (see :func:`set_isa`),
    then on the one active before; yields the name now active."""
    previous = status()["isa"]
    active = set_isa(name)
    try:
        yield active
    finally:
        set_isa(previous)


INT8_DOTS: tuple[str, ...] = ("auto", "maddubs")
AMX_MODES: tuple[str, ...] = ("off", "allow", "emulate")


def set_int8_dot(name: str) -> str:
    """Make the int8 path's x86 variants use integer dot product ``name``: "auto" (VNNI where the CPU
    has it) or "maddubs" (the AVX2 / AVX-512 BW multiply-add pairs, for tests and benchmarks); every
    choice gives the same bits. Returns the previous choice."""
    _, lib = require()
    if name not in INT8_DOTS:
        raise KernelArgumentError(f"unknown int8 dot product {name!r}; choose one of: {', '.join(INT8_DOTS)}")
    return INT8_DOTS[lib.pak_int8_dot_select(INT8_DOTS.index(name))]


def set_amx(mode: str) -> str:
    """Whether the int8 path's products of many rows may use AMX: "allow" (where a probe proved it
    usable; the default), "off", or "emulate" (its tile products computed in C, on any CPU with
    AVX-512: tests the AMX path's layout on CPUs without AMX). Returns the previous mode."""
    _, lib = require()
    if mode not in AMX_MODES:
        raise KernelArgumentError(f"unknown AMX mode {mode!r}; choose one of: {', '.join(AMX_MODES)}")
    return AMX_MODES[lib.pak_int8_amx_select(AMX_MODES.index(mode))]


@contextmanager
def using_int8(*, dot: str | None = None, amx: str | None = None) -> Iterator[None]:
    """Run the int8 path with dot product ``dot`` and AMX mode ``amx`` (None: unchanged) inside the
    ``with`` block (see :func:`set_int8_dot`, :func:`set_amx`), then restore them."""
    previous_dot = set_int8_dot(dot) if dot is not None else None
    try:
        previous_amx = set_amx(amx) if amx is not None else None
        try:
            yield
        finally:
            if previous_amx is not None:
                set_amx(previous_amx)
    finally:
        if previous_dot is not None:
            set_int8_dot(previous_dot)


class KernelStatus(TypedDict):
    """What :func:`status` reports (a plain dict at run time)."""

    compiled: bool  # whether pyagent_kernels._C is loaded
    reason: str | None  # why it is not, or None
    isa: str  # the instruction set the kernels use now ("none" when not compiled)
    isa_supported: list[str]  # the instruction sets this build can run on this CPU
    int8_dot: str  # the int8 path's dot product now ("vnni512", "maddubs256", "scalar", ...; "none")
    amx: str  # whether the int8 path may use AMX and why ("usable", "not advertised ...", ...; "none")
    module: str | None  # path of the compiled module


def status() -> KernelStatus:
    """Build and runtime facts for ``pyagent doctor``; never raises and never imports torch.

    ``amx`` runs the AMX probe (once per process: a forked child, see ``include/pyagent/linear_int8.h``)."""
    ext = load()
    if ext.lib is None:
        return {"compiled": False, "reason": ext.reason, "isa": "none", "isa_supported": [], "int8_dot": "none",
                "amx": "none", "module": None}
    names = _isa_names(ext.ffi, ext.lib)
    return {
        "compiled": True,
        "reason": None,
        "isa": names[int(ext.lib.pak_isa_active())],
        "isa_supported": [n for i, n in enumerate(names) if ext.lib.pak_isa_supported(i)],
        "int8_dot": ext.ffi.string(ext.lib.pak_int8_dot_name()).decode(),
        "amx": ext.ffi.string(ext.lib.pak_int8_amx_reason()).decode(),
        "module": ext.path,
    }
