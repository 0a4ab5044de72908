"""Exceptions and warnings raised by pyagent-kernels.

Every kernel error derives from :class:`pyagent_core.errors.KernelError`; bad arguments also derive
from :class:`ValueError`. Messages say what was wrong, with which value, and what to do.
"""

from __future__ import annotations

from pyagent_core.errors import KernelError

__all__ = ["KernelArgumentError", "KernelError", "KernelFallbackWarning", "KernelUnavailableError"]


class KernelArgumentError(KernelError, ValueError):
    """A kernel argument has the wrong type, dtype, shape, layout, device or value."""


class KernelUnavailableError(KernelError):
    """``backend="c"`` (or an ISA change) was requested but the compiled extension is not loaded."""


class KernelFallbackWarning(RuntimeWarning):
    """Warned once when kernels run their pure-torch fallback because the extension is missing."""
