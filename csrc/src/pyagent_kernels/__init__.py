"""pyagent-kernels: C kernels for pyagent's hot loops, with pure-torch fallbacks.

Kernels live in one module per area and import torch when imported themselves:

- :mod:`pyagent_kernels.grammar`: :func:`~pyagent_kernels.grammar.apply_token_bitmask`
- :mod:`pyagent_kernels.sampling`: :func:`~pyagent_kernels.sampling.apply_sampling_mask`
- :mod:`pyagent_kernels.attention`: :func:`~pyagent_kernels.attention.paged_attention`

Importing this package does not import torch; :func:`status` reports whether the compiled
extension ``pyagent_kernels._C`` is available and which instruction set it uses.
"""

from pyagent_kernels._extension import (
    Backend,
    KernelStatus,
    PreparedCall,
    run_prepared,
    set_amx,
    set_int8_dot,
    set_isa,
    status,
    using_int8,
    using_isa,
)
from pyagent_kernels.errors import (
    KernelArgumentError,
    KernelError,
    KernelFallbackWarning,
    KernelUnavailableError,
)

__version__ = "0.2.0"

__all__ = [
    "Backend",
    "KernelArgumentError",
    "KernelError",
    "KernelFallbackWarning",
    "KernelStatus",
    "KernelUnavailableError",
    "PreparedCall",
    "__version__",
    "run_prepared",
    "set_amx",
    "set_int8_dot",
    "set_isa",
    "status",
    "using_int8",
    "using_isa",
]
