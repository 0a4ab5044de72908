"""The Mamba2 mixer block (Mamba2, Granite 4 hybrid, Bamba, Nemotron-H): its weights, its state and its forward.

One projection gives the gate ``z``, the convolution's input ``xBC`` and the time steps ``dt``; a
causal depthwise convolution with SiLU (the ``short_conv`` family) gives ``x``, ``B`` and ``C``;
the selective scan (the ``ssd`` family) runs over them; a gated RMSNorm (``x * silu(z)``, normalized
per group) and the output projection follow. Both families run on the host's mixer backend with the
layer's two state tensors: the convolution's window ``[conv_dim, kernel - 1]`` and the SSM state
``[heads, head_dim, state_size]``.

llama.cpp's converter stores ``A_log`` as ``ssm_a = -exp(A_log)`` (``[heads, 1]``), ``D`` as
``[heads, 1]``, the convolution's kernel squeezed to ``[conv_dim, kernel]`` and the norm as
``[groups, inner / groups]``: :func:`restore_gguf_mamba` undoes that.
"""

from __future__ import annotations

import math
from typing import Any

import attrs
import torch

from pyagent_core.errors import UnsupportedModelError
from pyagent_core.interfaces.cache import RecurrentState
from pyagent_model_base.hybrid import Mix, Step, WeightReader
from pyagent_model_base.layers import Weight, dense, gated_group_norm


@attrs.frozen
class MambaShape:
    """A Mamba2 mixer's sizes.

    Attributes:
        hidden: the model's width.
        heads: SSM heads; ``inner = heads * head_dim`` is the scanned width.
        head_dim: values per head.
        state_size: the SSM state per head and value (``N``).
        groups: groups of ``B`` and ``C`` (and of the gated norm).
        conv_kernel: the convolution's width.
        eps: the gated norm's epsilon.
        dt_limit: the clamp of the time steps.
    """

    hidden: int
    heads: int
    head_dim: int
    state_size: int
    groups: int
    conv_kernel: int
    eps: float
    dt_limit: tuple[float, float] = (0.0, math.inf)

    @property
    def inner(self) -> int:
        """The scanned width, ``heads * head_dim``."""
        return self.heads * self.head_dim

    @property
    def conv_dim(self) -> int:
        """The convolution's channels: ``x``, ``B`` and ``C``."""
        return self.inner + 2 * self.groups * self.state_size

    def state(self) -> RecurrentState:
        """The layer's cache record: the convolution window and the SSM state."""
        return RecurrentState("mamba2", ("conv", "ssm"), ((self.conv_dim, self.conv_kernel - 1),
                                                         (self.heads, self.head_dim, self.state_size)))

    def weight_shapes(self, prefix: str, bias: bool, conv_bias: bool) -> dict[str, tuple[int, ...]]:
        """Hugging Face name -> shape of the mixer's weights under ``prefix`` (``...mixer.`` / ``...mamba.``)."""
        shapes: dict[str, tuple[int, ...]] = {
            prefix + "in_proj.weight": (self.inner + self.conv_dim + self.heads, self.hidden),
            prefix + "conv1d.weight": (self.conv_dim, 1, self.conv_kernel),
            prefix + "dt_bias": (self.heads,), prefix + "A_log": (self.heads,), prefix + "D": (self.heads,),
            prefix + "norm.weight": (self.inner,), prefix + "out_proj.weight": (self.hidden, self.inner),
        }
        if conv_bias:
            shapes[prefix + "conv1d.bias"] = (self.conv_dim,)
        if bias:
            shapes |= {prefix + "in_proj.bias": (self.inner + self.conv_dim + self.heads,),
                       prefix + "out_proj.bias": (self.hidden,)}
        return shapes


@attrs.frozen(eq=False)
class MambaWeights:
    """One Mamba2 mixer's weights, laid out for the forward (``A = -exp(A_log)`` in float32)."""

    in_proj: Weight
    conv_weight: torch.Tensor
    conv_bias: torch.Tensor | None
    dt_bias: torch.Tensor
    A: torch.Tensor
    D: torch.Tensor
    norm: torch.Tensor
    out_proj: Weight
    in_bias: torch.Tensor | None = None
    out_bias: torch.Tensor | None = None

    @classmethod
    def load(cls, prefix: str, reader: WeightReader) -> MambaWeights:
        """The weights under ``prefix`` (``...mixer.``, ``...mamba.``); absent biases stay ``None``."""
        return cls(in_proj=reader.matrix(prefix + "in_proj.weight"),
                   conv_weight=reader.tensor(prefix + "conv1d.weight")[:, 0].contiguous(),
                   conv_bias=reader.optional(prefix + "conv1d.bias"), dt_bias=reader.tensor(prefix + "dt_bias"),
                   A=-torch.exp(reader.weights[prefix + "A_log"].float()), D=reader.tensor(prefix + "D"),
                   norm=reader.tensor(prefix + "norm.weight"), out_proj=reader.matrix(prefix + "out_proj.weight"),
                   in_bias=reader.optional(prefix + "in_proj.bias"), out_bias=reader.optional(prefix + "out_proj.bias"))


def mamba_mix(w: MambaWeights, shape: MambaShape) -> Mix:
    """A Mamba2 layer's mix (module docstring): the layer's cache is its ``(conv, ssm)`` state pair."""

    def mix(x: torch.Tensor, step: Step, layer: int) -> torch.Tensor:
        tokens, mixer = x.shape[0], step.mixer
        assert mixer is not None
        projected = dense(x, w.in_proj, step.threads)
        if w.in_bias is not None:
            projected = projected + w.in_bias
        gate, xBC, dt = projected.split((shape.inner, shape.conv_dim, shape.heads), dim=-1)
        conv_state, ssm_state = step.caches[layer]
        xBC = mixer.short_conv(xBC.contiguous(), w.conv_weight, w.conv_bias, conv_state, step.metadata, layer,
                               activation="silu")
        size = shape.groups * shape.state_size
        inputs, B, C = xBC.split((shape.inner, size, size), dim=-1)
        groups = (tokens, shape.groups, shape.state_size)
        y = mixer.ssd(inputs.reshape(tokens, shape.heads, shape.head_dim), dt.contiguous(), w.A, B.reshape(groups),
                      C.reshape(groups), w.D, w.dt_bias, ssm_state, step.metadata, layer, dt_limit=shape.dt_limit)
        normed = gated_group_norm(y.reshape(tokens, shape.inner), gate, w.norm, shape.groups, shape.eps)
        out = dense(normed, w.out_proj, step.threads)
        return out if w.out_bias is None else out + w.out_bias

    return mix


def check_time_step_limit(value: Any, where: str) -> None:
    """Raise :class:`UnsupportedModelError` unless ``value`` (``config.json``'s ``time_step_limit``; infinity
    written as transformers writes it, ``{"__float__": "Infinity"}``) is the default ``(0, inf)``."""
    limits = [float(v["__float__"]) if isinstance(v, dict) and "__float__" in v else v
              for v in (value if isinstance(value, list | tuple) else [value])]
    if limits != [0.0, math.inf]:
        raise UnsupportedModelError(f"{where} clamps the time step to {value}; pyagent's Mamba2 mixers run the "
                                    "default (0, inf)")


#: The Hugging Face names (after a mixer's prefix) of the tensors llama.cpp's converter renames or reshapes.
MAMBA_CONVERTED = ("conv1d.weight", "A_log", "D", "norm.weight", "dt_bias")


def mamba_gguf_names(gguf_prefix: str, prefix: str) -> dict[str, str]:
    """GGUF name -> the name :meth:`~pyagent_core.interfaces.model.CausalLM.gguf_restore` receives it
    under, for one mixer's :data:`MAMBA_CONVERTED` tensors (``gguf_prefix``: ``blk.N.``): the time-step
    bias under its Hugging Face name, the transformed ones under their own GGUF names."""
    names = {gguf_prefix + "ssm_dt.bias": prefix + "dt_bias"}
    for gguf_name in ("ssm_conv1d.weight", "ssm_a", "ssm_d", "ssm_norm.weight"):
        names[gguf_prefix + gguf_name] = gguf_prefix + gguf_name
    return names


def restore_gguf_mamba(weights: dict[str, Any], gguf_prefix: str, prefix: str) -> None:
    """Replace llama.cpp's forms of one mixer's tensors (under their GGUF names, ``gguf_prefix``:
    ``blk.N.``) by Hugging Face's under ``prefix``, in place: the kernel unsqueezed, ``A_log = log(-A)``,
    ``D`` and the norm flattened."""
    weights[prefix + "conv1d.weight"] = weights.pop(gguf_prefix + "ssm_conv1d.weight")[:, None, :]
    weights[prefix + "A_log"] = torch.log(-weights.pop(gguf_prefix + "ssm_a").reshape(-1))
    weights[prefix + "D"] = weights.pop(gguf_prefix + "ssm_d").reshape(-1)
    weights[prefix + "norm.weight"] = weights.pop(gguf_prefix + "ssm_norm.weight").reshape(-1)
