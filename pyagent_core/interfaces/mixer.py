"""Mixer interface: the sequence mixers beside softmax attention that keep a state or a latent cache.

A model's layer mixes its tokens with attention (:mod:`pyagent_core.interfaces.attention`) or with
one of these families; a mixer backend implements some of them (:attr:`~pyagent_core.types.MixerSpec.
families`), and a model names the families its forward calls
(:meth:`~pyagent_core.interfaces.model.CausalLM.mixer_families`). The projections around a mixer
(in and out projections, norms, gates) stay in the model; the backend computes the part that reads
and writes the cache:

- ``short_conv``: a causal depthwise convolution over the sequence, its window kept as state (LFM2's
  short convolutions; the convolution in front of Mamba2 and Gated DeltaNet).
- ``ssd``: Mamba2's selective state-space recurrence (state space duality: chunked for prefill, one
  step per token for decode).
- ``gated_delta``: the gated delta rule of Gated DeltaNet (Qwen3-Next's linear attention).
- ``mla``: multi-head latent attention (DeepSeek-V2/V3) over a paged latent cache, the per-head key
  and value projections absorbed into the query and output.

**Batches and state.** A call sees the flat batch of one step: sequence ``s`` owns new tokens
``query_start_loc[s]:query_start_loc[s + 1]`` of every input (the layout of
:class:`~pyagent_core.interfaces.attention.AttentionMetadata`). A recurrent state tensor is
``float32 [num_slots, ...]`` (:class:`~pyagent_core.interfaces.cache.RecurrentState`); sequence ``s``
uses slot ``metadata.state_slots[s]``. A sequence whose cached context is empty (``seq_lens[s] ==
query_len``) starts from the zero state, whatever its slot holds; otherwise the slot holds the state
after its context (a chunked prefill's earlier chunks, or its earlier decode steps). After the call
the slot holds the state after all its tokens, and no other slot changes. A sequence's outputs do not
depend on the other sequences of the batch. Draft trees are not supported by the state families
(a tree's branches would need one state each): ``tree_mask`` must be ``None``.

**Semantics**, per sequence, token by token (``t`` runs over the sequence's tokens, context first):

- ``short_conv(x, weight, bias, state, ...)``: ``out[t, c] = act(bias[c] + sum_j weight[c, j] *
  u[t - W + 1 + j, c])`` for ``j < W`` (``W = weight.shape[1]``), ``u`` the sequence's inputs with
  zeros before its first token, ``act`` the identity or SiLU. The state holds the ``W - 1`` latest
  inputs, oldest first.
- ``ssd(x, dt, A, B, C, D, dt_bias, state, ...)``: per head ``h`` (group ``g = h // (H / G)``),
  ``delta = clamp(softplus(dt[t, h] + dt_bias[h]), *dt_limit)``, ``S[h] = exp(delta * A[h]) * S[h] +
  delta * outer(x[t, h], B[t, g])`` and ``y[t, h] = S[h] @ C[t, g] + D[h] * x[t, h]``; the state
  ``S`` is ``[H, P, N]`` (head dim, state size).
- ``gated_delta(q, k, v, g, beta, state, ...)``: per value head ``h`` (query/key head ``h // (Hv /
  Hk)``), ``S[h] = exp(g[t, h]) * S[h]``, then ``S[h] += outer(k, beta[t, h] * (v[t, h] - S[h].T @
  k))`` and ``o[t, h] = scale * S[h].T @ q``; the state ``S`` is ``[Hv, K, V]``. ``q`` and ``k`` are
  used as given (a model that L2-normalizes them does it before the call).
- ``mla(q_nope, q_pe, latent, k_pe, w_uk, w_uv, cache, ...)``: writes ``[latent[t], k_pe[t]]`` at
  ``slot_mapping[t]`` of the latent cache (:class:`~pyagent_core.interfaces.cache.LatentKV`), then
  each new token attends causally over its sequence: head ``h``'s key at position ``j`` is
  ``[w_uk[h] @ c_j, r_j]`` and its value ``w_uv[h] @ c_j`` (``c_j``, ``r_j`` the cached latent and
  rotated key), scores scaled by ``scale``. Equivalently (absorbed): the query becomes
  ``[w_uk[h].T @ q_nope, q_pe]`` against the cached rows, and the latent-space output is projected
  by ``w_uv[h]``.

Every family returns its output in the dtype of its first input; the state families compute in
float32. Shape and dtype problems raise ``ValueError`` naming the tensor (the ``check_*`` helpers of
:class:`MixerBackend`).
"""

from __future__ import annotations

from abc import ABC
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import attrs

if TYPE_CHECKING:
    import torch

    from pyagent_core.interfaces.attention import AttentionMetadata

#: The mixer families a backend may implement, in the order docs list them.
MIXER_FAMILIES = ("short_conv", "ssd", "gated_delta", "mla")

#: The activations ``short_conv`` applies after the convolution.
CONV_ACTIVATIONS = (None, "silu")


def _expect(condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(message)


def _shape(name: str, tensor: torch.Tensor, shape: tuple[int, ...], meaning: str) -> None:
    _expect(tuple(tensor.shape) == shape, f"{name} must have shape {list(shape)} {meaning}, got {list(tensor.shape)}")


@attrs.frozen(kw_only=True)
class MixerContext:
    """What a mixer backend is built for.

    Attributes:
        dtype: the torch dtype name the model runs in (``"float32"``, ``"bfloat16"``): the dtype of the
            inputs and of the latent cache; recurrent states are float32 whatever it is.
        block_size: tokens per block of the paged latent caches (``mla``).
    """

    dtype: str
    block_size: int

    def __attrs_post_init__(self) -> None:
        _expect(self.block_size > 0, f"block_size must be positive, got {self.block_size}")


class MixerBackend(ABC):  # noqa: B024 - the families are optional, a spec says which
    """Computes the mixer families its spec declares, one layer per call.

    Constructed once per model (shared by its layers). A family the backend does not implement
    raises ``NotImplementedError`` naming it; the host never calls one its spec leaves out.

    Args:
        options: the backend's validated options (defaults filled in).
        context: see :class:`MixerContext`.
    """

    def __init__(self, options: Mapping[str, Any], context: MixerContext) -> None:
        self.options = dict(options)
        self.context = context

    @classmethod  # noqa: B027 - optional hook
    def check_available(cls) -> None:
        """Raise with a reason if this backend cannot run here (deep check, ``--check``)."""

    def _missing(self, family: str) -> NotImplementedError:
        return NotImplementedError(f"mixer backend {type(self).__name__} does not implement the {family!r} family")

    # --- the families ------------------------------------------------------------------------------

    def short_conv(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, state: torch.Tensor,
                   metadata: AttentionMetadata, layer: int, activation: str | None = None) -> torch.Tensor:
        """Causal depthwise convolution (module docstring); returns ``[num_tokens, channels]``.

        Args:
            x: ``[num_tokens, channels]``, the new inputs of every sequence.
            weight: ``[channels, width]`` (``width >= 2``), ``x``'s dtype.
            bias: ``[channels]`` or ``None``.
            state: ``float32 [num_slots, channels, width - 1]``.
            metadata: the batch layout with ``state_slots``.
            layer: index of the layer, for backends that keep per-layer data.
            activation: ``None`` or ``"silu"``.
        """
        raise self._missing("short_conv")

    def ssd(self, x: torch.Tensor, dt: torch.Tensor, A: torch.Tensor, B: torch.Tensor, C: torch.Tensor,
            D: torch.Tensor, dt_bias: torch.Tensor, state: torch.Tensor, metadata: AttentionMetadata, layer: int,
            dt_limit: tuple[float, float] = (0.0, float("inf"))) -> torch.Tensor:
        """Mamba2's selective scan (module docstring); returns ``y [num_tokens, heads, head_dim]``.

        Args:
            x: ``[num_tokens, heads, head_dim]``.
            dt: ``[num_tokens, heads]``, before ``dt_bias`` and softplus.
            A: ``float32 [heads]``, negative (``-exp(A_log)``).
            B, C: ``[num_tokens, groups, state_size]``, ``groups`` dividing ``heads``.
            D: ``[heads]``, the skip connection.
            dt_bias: ``[heads]``.
            state: ``float32 [num_slots, heads, head_dim, state_size]``.
            metadata, layer: as :meth:`short_conv`.
            dt_limit: the clamp of the time step after softplus.
        """
        raise self._missing("ssd")

    def gated_delta(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
                    state: torch.Tensor, metadata: AttentionMetadata, layer: int, scale: float) -> torch.Tensor:
        """The gated delta rule (module docstring); returns ``o [num_tokens, value_heads, value_dim]``.

        Args:
            q, k: ``[num_tokens, key_heads, key_dim]``, ``key_heads`` dividing ``value_heads``.
            v: ``[num_tokens, value_heads, value_dim]``.
            g: ``float32 [num_tokens, value_heads]``, the log of each step's decay (``<= 0``).
            beta: ``[num_tokens, value_heads]``, the write strength (``sigmoid`` of a projection).
            state: ``float32 [num_slots, value_heads, key_dim, value_dim]``.
            metadata, layer: as :meth:`short_conv`.
            scale: the factor on the output (``key_dim ** -0.5``).
        """
        raise self._missing("gated_delta")

    def mla(self, q_nope: torch.Tensor, q_pe: torch.Tensor, latent: torch.Tensor, k_pe: torch.Tensor,
            w_uk: torch.Tensor, w_uv: torch.Tensor, cache: torch.Tensor, metadata: AttentionMetadata, layer: int,
            scale: float) -> torch.Tensor:
        """Multi-head latent attention (module docstring); returns ``[num_tokens, heads, v_head_dim]``.

        Args:
            q_nope: ``[num_tokens, heads, nope_dim]``, the queries' unrotated part.
            q_pe: ``[num_tokens, heads, rope_dim]``, the queries' rotated part.
            latent: ``[num_tokens, latent_size]``, the new tokens' normalized latents.
            k_pe: ``[num_tokens, rope_dim]``, the new tokens' rotated shared keys.
            w_uk: ``[heads, nope_dim, latent_size]``, each head's key up-projection.
            w_uv: ``[heads, v_head_dim, latent_size]``, each head's value up-projection.
            cache: ``[num_blocks, block_size, latent_size + rope_dim]``, ``q_nope``'s dtype; the new
                rows are written at ``metadata.slot_mapping``, no other row changes.
            metadata, layer: the batch layout (block tables, slots), the layer index.
            scale: the factor on the scores.
        """
        raise self._missing("mla")

    # --- checks the families share -----------------------------------------------------------------

    @staticmethod
    def check_batch(metadata: AttentionMetadata, num_tokens: int, state: torch.Tensor | None) -> None:
        """Raise ``ValueError`` when the metadata does not fit a call on ``num_tokens`` new tokens (with
        ``state``: a state family, which needs ``state_slots`` inside the state and no tree mask)."""
        metadata.check_shapes()
        _expect(metadata.num_tokens == num_tokens,
                f"the inputs hold {num_tokens} tokens but metadata.slot_mapping {metadata.num_tokens}")
        _expect(metadata.tree_mask is None, "mixers cannot verify draft trees: metadata.tree_mask must be None "
                "(a tree's branches would need a state each); verify drafts as a chain")
        if state is None:
            return
        import torch

        slots = metadata.state_slots
        _expect(slots is not None, "a state mixer needs metadata.state_slots (int64 [num_seqs]), got None")
        assert slots is not None
        _expect(state.dtype == torch.float32, f"state must be torch.float32, got {state.dtype}")
        _expect(state.is_contiguous(), f"state must be contiguous (strides {list(state.stride())})")
        if slots.numel():
            low, high = int(slots.min()), int(slots.max())
            _expect(low >= 0 and high < state.shape[0],
                    f"metadata.state_slots must lie in [0, {state.shape[0]}) (the state's slots), got {low}..{high}")
            _expect(slots.unique().numel() == slots.numel(),
                    "metadata.state_slots must give each sequence its own slot")

    @staticmethod
    def check_same_dtype(dtype: torch.dtype, **tensors: torch.Tensor | None) -> None:
        """Raise ``ValueError`` naming the first tensor whose dtype is not ``dtype``."""
        for name, tensor in tensors.items():
            _expect(tensor is None or tensor.dtype == dtype, f"{name} has dtype "
                    f"{None if tensor is None else tensor.dtype} but the inputs have {dtype}; use one dtype")

    def check_short_conv(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                         state: torch.Tensor, metadata: AttentionMetadata, activation: str | None) -> None:
        """The standard ``ValueError`` s for :meth:`short_conv`'s arguments."""
        _expect(x.dim() == 2, f"x must be [num_tokens, channels], got {list(x.shape)}")
        tokens, channels = x.shape
        _expect(weight.dim() == 2 and weight.shape[0] == channels and weight.shape[1] >= 2,
                f"weight must be [{channels}, width >= 2], got {list(weight.shape)}")
        width = weight.shape[1]
        if bias is not None:
            _shape("bias", bias, (channels,), "[channels]")
        self.check_same_dtype(x.dtype, weight=weight, bias=bias)
        _expect(activation in CONV_ACTIVATIONS, f"activation must be one of {CONV_ACTIVATIONS}, got {activation!r}")
        _expect(state.dim() == 3 and tuple(state.shape[1:]) == (channels, width - 1),
                f"state must be [num_slots, {channels}, {width - 1}], got {list(state.shape)}")
        self.check_batch(metadata, tokens, state)

    def check_ssd(self, x: torch.Tensor, dt: torch.Tensor, A: torch.Tensor, B: torch.Tensor, C: torch.Tensor,
                  D: torch.Tensor, dt_bias: torch.Tensor, state: torch.Tensor, metadata: AttentionMetadata) -> None:
        """The standard ``ValueError`` s for :meth:`ssd`'s arguments."""
        import torch

        _expect(x.dim() == 3, f"x must be [num_tokens, heads, head_dim], got {list(x.shape)}")
        tokens, heads, head_dim = x.shape
        _expect(B.dim() == 3 and B.shape[0] == tokens and B.shape[1] > 0 and heads % B.shape[1] == 0,
                f"B must be [{tokens}, groups, state_size] with groups dividing {heads}, got {list(B.shape)}")
        groups, size = B.shape[1], B.shape[2]
        _shape("C", C, (tokens, groups, size), "like B")
        _shape("dt", dt, (tokens, heads), "[num_tokens, heads]")
        for name, vector in (("A", A), ("D", D), ("dt_bias", dt_bias)):
            _shape(name, vector, (heads,), "[heads]")
        _expect(A.dtype == torch.float32, f"A must be torch.float32, got {A.dtype}")
        self.check_same_dtype(x.dtype, dt=dt, B=B, C=C, D=D, dt_bias=dt_bias)
        _expect(state.dim() == 4 and tuple(state.shape[1:]) == (heads, head_dim, size),
                f"state must be [num_slots, {heads}, {head_dim}, {size}], got {list(state.shape)}")
        self.check_batch(metadata, tokens, state)

    def check_gated_delta(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor,
                          beta: torch.Tensor, state: torch.Tensor, metadata: AttentionMetadata) -> None:
        """The standard ``ValueError`` s for :meth:`gated_delta`'s arguments."""
        import torch

        _expect(v.dim() == 3, f"v must be [num_tokens, value_heads, value_dim], got {list(v.shape)}")
        tokens, value_heads, value_dim = v.shape
        _expect(q.dim() == 3 and q.shape[0] == tokens and q.shape[1] > 0 and value_heads % q.shape[1] == 0,
                f"q must be [{tokens}, key_heads, key_dim] with key_heads dividing {value_heads}, got {list(q.shape)}")
        _shape("k", k, tuple(q.shape), "like q")
        _shape("g", g, (tokens, value_heads), "[num_tokens, value_heads]")
        _shape("beta", beta, (tokens, value_heads), "[num_tokens, value_heads]")
        _expect(g.dtype == torch.float32, f"g must be torch.float32, got {g.dtype}")
        self.check_same_dtype(v.dtype, q=q, k=k, beta=beta)
        _expect(state.dim() == 4 and tuple(state.shape[1:]) == (value_heads, q.shape[2], value_dim),
                f"state must be [num_slots, {value_heads}, {q.shape[2]}, {value_dim}], got {list(state.shape)}")
        self.check_batch(metadata, tokens, state)

    def check_mla(self, q_nope: torch.Tensor, q_pe: torch.Tensor, latent: torch.Tensor, k_pe: torch.Tensor,
                  w_uk: torch.Tensor, w_uv: torch.Tensor, cache: torch.Tensor, metadata: AttentionMetadata) -> None:
        """The standard ``ValueError`` s for :meth:`mla`'s arguments."""
        _expect(q_nope.dim() == 3, f"q_nope must be [num_tokens, heads, nope_dim], got {list(q_nope.shape)}")
        tokens, heads, nope = q_nope.shape
        _expect(q_pe.dim() == 3 and tuple(q_pe.shape[:2]) == (tokens, heads),
                f"q_pe must be [{tokens}, {heads}, rope_dim], got {list(q_pe.shape)}")
        rope = q_pe.shape[2]
        _expect(latent.dim() == 2 and latent.shape[0] == tokens,
                f"latent must be [{tokens}, latent_size], got {list(latent.shape)}")
        size = latent.shape[1]
        _shape("k_pe", k_pe, (tokens, rope), "[num_tokens, rope_dim]")
        _shape("w_uk", w_uk, (heads, nope, size), "[heads, nope_dim, latent_size]")
        _expect(w_uv.dim() == 3 and w_uv.shape[0] == heads and w_uv.shape[2] == size,
                f"w_uv must be [{heads}, v_head_dim, {size}], got {list(w_uv.shape)}")
        self.check_same_dtype(q_nope.dtype, q_pe=q_pe, latent=latent, k_pe=k_pe, w_uk=w_uk, w_uv=w_uv, cache=cache)
        _expect(cache.dim() == 3 and cache.shape[2] == size + rope and cache.is_contiguous(),
                f"cache must be a contiguous [num_blocks, block_size, {size + rope}], got {list(cache.shape)}")
        self.check_batch(metadata, tokens, None)
