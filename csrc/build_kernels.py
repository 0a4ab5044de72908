"""cffi build script: compiles the C kernels into the private module ``pyagent_kernels._C``.

Used by ``setup.py`` through ``cffi_modules`` (API mode, out of line). The cdef is read from the
public headers in ``include/pyagent/`` with their preprocessor lines dropped, so the headers are the
single source of the C interface. The extension is marked optional: when no C compiler is available
(or compiling fails) setuptools prints a warning, installation still succeeds, and the Python
wrappers fall back to their pure-torch implementations.
"""

from __future__ import annotations

from pathlib import Path

from cffi import FFI

HERE = Path(__file__).resolve().parent
HEADERS = ("common.h", "grammar.h", "sampling.h", "attention.h", "spec_decode.h", "linear.h", "penalties.h",
           "gumbel.h", "greedy.h", "layer_ops.h", "linear_int8.h", "lora.h", "mixers.h", "profile.h", "program.h")

# Portable code generation: no -march; the x86 variants are compiled per function through
# `#pragma GCC target` and chosen at run time (see kernels/common/variant.h).
COMPILE_ARGS = ["-O3", "-std=gnu11", "-ffp-contract=off", "-fvisibility=hidden", "-pthread", "-Wno-psabi"]


def _cdef(header: Path) -> str:
    """The header's declarations, without the preprocessor lines cffi cannot parse."""
    lines = header.read_text(encoding="utf-8").splitlines()
    return "\n".join(line for line in lines if not line.lstrip().startswith("#"))


def _sources() -> list[str]:
    """Every C file under kernels/, relative to this directory (setuptools wants relative paths)."""
    return sorted(path.relative_to(HERE).as_posix() for path in (HERE / "kernels").rglob("*.c"))


ffibuilder = FFI()
ffibuilder.cdef("\n".join(_cdef(HERE / "include" / "pyagent" / name) for name in HEADERS))
ffibuilder.set_source(
    "pyagent_kernels._C",
    "\n".join(f'#include "pyagent/{name}"' for name in HEADERS),
    sources=_sources(),
    include_dirs=["include", "kernels"],
    extra_compile_args=COMPILE_ARGS,
    extra_link_args=["-pthread"],
    optional=True,
)
