"""Exceptions and warnings raised by pyagent-kernels.

Every kernel error derives from :class:`KernelError`; bad arguments also derive from
:class:`ValueError`. Messages say what was wrong, with which value, and what to do. This library
imports nothing from pyagent: engines and plugins catch these classes where they call a kernel.
"""

from __future__ import annotations

__all__ = ["KernelArgumentError", "KernelError", "KernelFallbackWarning", "KernelUnavailableError"]


class KernelError(RuntimeError):
    """A C kernel rejected its arguments or returned an error code."""


class KernelArgumentError(KernelError, ValueError):
    """A kernel argument has the wrong type, dtype, shape, layout, device or value."""


class KernelUnavailableError(KernelError):
    """``backend="c"`` (or an ISA change) was requested but the compiled extension is not loaded."""


class KernelFallbackWarning(RuntimeWarning):
    """Warned once when kernels run their pure-torch fallback because the extension is missing."""
