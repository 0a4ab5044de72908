"""Attention interface: causal attention over a paged KV cache.

The KV cache of one layer is a single tensor laid out as
``[2, num_blocks, block_size, num_kv_heads, head_size]``: index 0 of the first dimension holds keys,
index 1 values. A *slot* is a flat position in the cache, ``slot = block_id * block_size + offset``;
token ``pos`` of sequence ``s`` lives at block ``block_tables[s, pos // block_size]``, offset
``pos % block_size`` (:func:`cache_slots` computes the slots of a sequence's positions). The block
size is ``kv_cache.shape[2]``.

A batch mixes sequences freely: a prefill (many new tokens, maybe after cached context: chunked
prefill or a prefix-cache hit), a decode step (one new token) or a draft tree being verified. The
new tokens of all sequences are concatenated along the token dimension; sequence ``s`` owns tokens
``query_start_loc[s]:query_start_loc[s + 1]``, which sit at positions ``seq_lens[s] - query_len``
to ``seq_lens[s] - 1``.

Two per-model variations, fixed when the backend is built (:class:`AttentionContext`):

- **Sliding window** (Mistral, Gemma 2/3 local layers): a layer with window ``w`` lets the token at
  position ``p`` see only the positions ``j`` with ``p - w < j <= p`` (the ``w`` latest ones, itself
  included), as transformers' ``sliding_window_overlay`` masks them. With a tree mask the positions
  are the tokens' positions in the text, not in the cache: new token ``t`` of a sequence with
  ``ctx`` cached positions sits at ``ctx + n - 1``, ``n`` being how many of its sequence's new
  tokens ``tree_mask[t]`` lets it see (itself and its ancestors: its depth in the draft tree).
- **Logit soft-capping** (Gemma 2): with cap ``c``, each score ``s = scale * q . k`` becomes
  ``c * tanh(s / c)`` before the mask and the softmax.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import attrs

if TYPE_CHECKING:
    import torch


def _expect(condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(message)


def _windows(windows: Iterable[int | None]) -> tuple[int | None, ...]:
    return tuple(windows)


def cache_slots(block_table: Sequence[int], positions: Iterable[int], block_size: int) -> list[int]:
    """The cache slot of each of ``positions`` of a sequence whose blocks are ``block_table``.

    Position ``pos`` lives at offset ``pos % block_size`` of block ``block_table[pos // block_size]``,
    so its slot (the flat index into a layer's cache, see the module docstring) is
    ``block_table[pos // block_size] * block_size + pos % block_size``. Hosts build
    :attr:`AttentionMetadata.slot_mapping` with it; ``block_table`` must cover every position.
    """
    return [block_table[pos // block_size] * block_size + pos % block_size for pos in positions]


def visible_mask(
    query_len: int,
    seq_len: int,
    tree: torch.Tensor | None = None,
    window: int | None = None,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """``bool [query_len, seq_len]``: the positions each new token of one sequence sees.

    Args:
        query_len: the sequence's new tokens (its last ``query_len`` positions).
        seq_len: its length, cached positions and new tokens together.
        tree: its rows of :attr:`AttentionMetadata.tree_mask` (``[query_len, >= query_len]``), or
            ``None`` for causal attention.
        window: the layer's sliding window, or ``None``.
        device: where the mask goes (default: the tree's device, else the CPU).

    Row ``i`` is new token ``i``, column ``j`` position ``j``, as the module docstring says.
    """
    import torch

    device = device if device is not None else tree.device if tree is not None else None
    context = seq_len - query_len
    mask = torch.ones(query_len, seq_len, dtype=torch.bool, device=device).tril(diagonal=context)
    if tree is not None:
        mask[:, context:] = tree[:, :query_len]
    if window is not None:
        query_pos = torch.arange(context, seq_len, device=device)
        key_pos = torch.arange(seq_len, device=device)
        if tree is not None:  # positions in the text: the context plus the depth in the draft tree
            query_pos = context + mask[:, context:].sum(dim=1) - 1
            key_pos = torch.cat((key_pos[:context], query_pos))
        mask &= key_pos.unsqueeze(0) > (query_pos - window).unsqueeze(1)
    return mask


@attrs.frozen(eq=False)
class AttentionMetadata:
    """Where the batch's tokens sit in the paged cache; shared by every layer of one step.

    Attributes:
        block_tables: ``int32 [num_seqs, max_blocks]``; row ``s`` lists the cache blocks of sequence
            ``s`` in order. Entries past ``ceil(seq_lens[s] / block_size)`` are padding (any valid
            block id) and must not be read.
        slot_mapping: ``int64 [num_tokens]``; the cache slot each new token's key and value go to.
        seq_lens: ``int32 [num_seqs]``; total tokens of each sequence including the new ones.
        query_start_loc: ``int32 [num_seqs + 1]``; cumulative new-token counts, starting at 0 and
            ending at ``num_tokens``.
        max_query_len: the largest number of new tokens of one sequence (a host integer).
        max_seq_len: the largest entry of ``seq_lens`` (a host integer).
        tree_mask: ``None`` for plain causal attention, or ``bool [num_tokens, max_query_len]`` for
            draft-tree verification: ``tree_mask[t, j]`` says whether new token ``t`` may attend to
            the ``j``-th new token of its own sequence. Cached context (positions before the new
            tokens) is always visible; columns past the sequence's query length are ignored.
        state_slots: ``None`` for a model without recurrent state, or ``int64 [num_seqs]``: the slot
            of each sequence in every :class:`~pyagent_core.interfaces.cache.RecurrentState` tensor
            (the same index in every state layer). A sequence whose context is empty
            (``seq_lens[s] == query_len``) starts from a zero state whatever its slot holds; otherwise
            its slot holds the state after its context. After the forward the slot holds the state
            after all ``seq_lens[s]`` tokens; no other slot changes
            (:mod:`pyagent_core.interfaces.mixer`).
    """

    block_tables: torch.Tensor
    slot_mapping: torch.Tensor
    seq_lens: torch.Tensor
    query_start_loc: torch.Tensor
    max_query_len: int
    max_seq_len: int
    tree_mask: torch.Tensor | None = None
    state_slots: torch.Tensor | None = None

    @property
    def num_seqs(self) -> int:
        """Number of sequences in the batch."""
        return int(self.seq_lens.shape[0])

    @property
    def num_tokens(self) -> int:
        """Number of new tokens in the batch (all sequences together)."""
        return int(self.slot_mapping.shape[0])

    def check_shapes(self) -> None:
        """Raise ``ValueError`` naming the field when a shape or dtype breaks the layout above.

        Reads no tensor values, so it never synchronises with a device.
        """
        import torch

        n, t = self.num_seqs, self.num_tokens
        for name, tensor, dtype, shape in (
            ("seq_lens", self.seq_lens, torch.int32, (n,)),
            ("slot_mapping", self.slot_mapping, torch.int64, (t,)),
            ("query_start_loc", self.query_start_loc, torch.int32, (n + 1,)),
        ):
            _expect(tensor.dtype == dtype, f"metadata.{name} must be {dtype}, got {tensor.dtype}")
            _expect(tuple(tensor.shape) == shape,
                    f"metadata.{name} must have shape {list(shape)}, got {list(tensor.shape)}")
        tables = self.block_tables
        _expect(tables.dtype == torch.int32, f"metadata.block_tables must be torch.int32, got {tables.dtype}")
        _expect(tables.dim() == 2 and tables.shape[0] == n,
                f"metadata.block_tables must have shape [{n}, max_blocks], got {list(tables.shape)}")
        if self.tree_mask is not None:
            mask = self.tree_mask
            _expect(mask.dtype == torch.bool, f"metadata.tree_mask must be torch.bool, got {mask.dtype}")
            _expect(tuple(mask.shape) == (t, self.max_query_len),
                    f"metadata.tree_mask must have shape [{t}, {self.max_query_len}], got {list(mask.shape)}")
        if self.state_slots is not None:
            slots = self.state_slots
            _expect(slots.dtype == torch.int64, f"metadata.state_slots must be torch.int64, got {slots.dtype}")
            _expect(tuple(slots.shape) == (n,), f"metadata.state_slots must have shape [{n}], got {list(slots.shape)}")


@attrs.frozen(kw_only=True)
class AttentionContext:
    """What an attention backend is built for: the model's heads and the engine's KV cache.

    Attributes:
        num_heads: number of query heads.
        head_size: size of each head (of queries, keys and values alike).
        num_kv_heads: number of key/value heads; divides ``num_heads`` (query head ``h`` reads
            key/value head ``h // (num_heads // num_kv_heads)``: grouped-query attention).
        scale: factor applied to ``q @ k.T`` before the softmax, usually ``head_size ** -0.5``.
        block_size: tokens per block of the KV caches the engine allocates (their ``shape[2]``), for
            backends that plan work or workspaces by block.
        dtype: name of the torch dtype the engine runs attention in (``"float32"``, ``"bfloat16"``):
            the dtype of ``q``, ``k``, ``v`` and the caches; one of the spec's ``dtypes``.
        sliding_windows: the sliding window of each layer (``None``: that layer attends to every
            earlier position), one entry per layer; empty (the default): no layer has a window.
            Semantics in the module docstring; a backend whose spec lacks ``sliding_window`` is never
            built with a window.
        logits_soft_cap: the cap ``c`` of every layer's scores (``c * tanh(score / c)``), or
            ``None`` (the default) for plain scores; a backend whose spec lacks ``logits_soft_cap``
            is never built with one.

    Raises:
        ValueError: when ``num_heads`` is not a positive multiple of ``num_kv_heads``, or
            ``head_size`` or ``block_size`` is not positive, or a window or the cap is not a
            positive number.
    """

    num_heads: int
    head_size: int
    num_kv_heads: int
    scale: float
    block_size: int
    dtype: str
    sliding_windows: tuple[int | None, ...] = attrs.field(default=(), converter=_windows)
    logits_soft_cap: float | None = None

    def __attrs_post_init__(self) -> None:
        _expect(self.num_heads > 0 and self.num_kv_heads > 0 and self.num_heads % self.num_kv_heads == 0,
                f"num_heads ({self.num_heads}) must be a positive multiple of num_kv_heads ({self.num_kv_heads})")
        _expect(self.head_size > 0, f"head_size must be positive, got {self.head_size}")
        _expect(self.block_size > 0, f"block_size must be positive, got {self.block_size}")
        for layer, window in enumerate(self.sliding_windows):
            _expect(window is None or (type(window) is int and window > 0),
                    f"sliding_windows[{layer}] must be a positive int or None (no window), got {window!r}")
        cap = self.logits_soft_cap
        _expect(cap is None or (isinstance(cap, (int, float)) and not isinstance(cap, bool) and 0 < cap < math.inf),
                f"logits_soft_cap must be a positive finite number or None (no capping), got {cap!r}")

    def window(self, layer: int) -> int | None:
        """The sliding window of ``layer``, or ``None`` when it attends to every earlier position."""
        return self.sliding_windows[layer] if self.sliding_windows else None

    @property
    def has_window(self) -> bool:
        """Whether any layer has a sliding window."""
        return any(window is not None for window in self.sliding_windows)


class AttentionBackend(ABC):
    """Computes attention for one layer at a time over the paged KV cache.

    Constructed once per model (shared by its layers). Shape and dtype problems raise
    ``ValueError`` naming the offending tensor; call :meth:`check_inputs` at the top of
    :meth:`forward` to get that behaviour.

    Args:
        options: the backend's validated options (defaults filled in).
        context: the model's heads and the engine's cache layout, see :class:`AttentionContext`;
            ``num_heads``, ``head_size``, ``num_kv_heads`` and ``scale`` are also attributes of the
            backend.
    """

    def __init__(self, options: Mapping[str, Any], context: AttentionContext) -> None:
        self.options = dict(options)
        self.context = context
        self.num_heads = context.num_heads
        self.head_size = context.head_size
        self.num_kv_heads = context.num_kv_heads
        self.scale = context.scale

    @classmethod  # noqa: B027 - optional hook
    def check_available(cls) -> None:
        """Raise with a reason if this backend cannot run here (deep check, ``--check``)."""

    def check_inputs(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        kv_cache: torch.Tensor,
        metadata: AttentionMetadata,
    ) -> None:
        """Raise ``ValueError`` if the arguments of :meth:`forward` do not fit each other.

        The metadata, shared by every layer of a step, is checked once: again only when another
        metadata object arrives. Arguments that fit cost a few attribute reads.
        """
        checked = getattr(self, "_checked_metadata", None)
        if checked is None or checked[0] is not metadata:
            metadata.check_shapes()
            t, d, kvh = metadata.num_tokens, self.head_size, self.num_kv_heads
            checked = self._checked_metadata = (metadata, (t, self.num_heads, d), (t, kvh, d), (kvh, d))
        _, q_shape, kv_shape, cache_heads = checked
        dtype = kv_cache.dtype
        if (q.shape == q_shape and k.shape == kv_shape and v.shape == kv_shape and q.dtype is dtype
                and k.dtype is dtype and v.dtype is dtype and kv_cache.dim() == 5 and kv_cache.shape[0] == 2
                and kv_cache.shape[3:] == cache_heads and kv_cache.is_contiguous()):
            return
        for name, tensor, shape in (("q", q, q_shape), ("k", k, kv_shape), ("v", v, kv_shape)):
            _expect(tuple(tensor.shape) == shape,
                    f"{name} must have shape {list(shape)} [num_tokens, heads, head_size], "
                    f"got {list(tensor.shape)}")
            _expect(tensor.dtype == dtype,
                    f"{name} has dtype {tensor.dtype} but kv_cache has {dtype}; use one dtype")
        kvh, d = cache_heads
        cache_ok = kv_cache.dim() == 5 and kv_cache.shape[0] == 2 and tuple(kv_cache.shape[3:]) == (kvh, d)
        _expect(cache_ok, f"kv_cache must have shape [2, num_blocks, block_size, {kvh}, {d}], "
                f"got {list(kv_cache.shape)}")
        _expect(kv_cache.is_contiguous(),  # slots are flat positions: the layout must be dense
                f"kv_cache must be contiguous (strides {list(kv_cache.stride())}); allocate it with "
                "torch.zeros/torch.empty in the [2, num_blocks, block_size, kv_heads, head_size] layout")

    @abstractmethod
    def forward(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        kv_cache: torch.Tensor,
        metadata: AttentionMetadata,
        layer: int,
    ) -> torch.Tensor:
        """Store the new keys/values in the cache, then attend; return ``[num_tokens, num_heads, head_size]``.

        Args:
            q: ``[num_tokens, num_heads, head_size]`` queries of the new tokens.
            k: ``[num_tokens, num_kv_heads, head_size]`` keys of the new tokens.
            v: ``[num_tokens, num_kv_heads, head_size]`` values of the new tokens.
            kv_cache: this layer's cache (layout in the module docstring), same dtype as ``q``.
                ``k[t]`` and ``v[t]`` are written at ``metadata.slot_mapping[t]``; no other slot
                changes.
            metadata: the batch layout, see :class:`AttentionMetadata`.
            layer: index of the layer, for backends that keep per-layer state.

        Each new token attends to every earlier position of its sequence and to itself (causal),
        or as ``metadata.tree_mask`` says, within ``context.window(layer)`` positions of itself,
        scores capped by ``context.logits_soft_cap`` (module docstring); the output has ``q``'s
        dtype.
        """

    def prepare(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        out: torch.Tensor,
        kv_cache: torch.Tensor,
        layer: int,
    ) -> PreparedAttention | None:
        """Optional: :meth:`forward` of ``layer`` on these fixed buffers as a prepared call, for a host
        that runs the same layers on the same buffers step after step (a decode plan).

        Each time the call runs it does what ``out.copy_(forward(q, k, v, kv_cache, metadata, layer))``
        does, with the tensors' current values and the ``metadata`` last given to :meth:`begin_step`
        (the same values: hosts may switch between the two paths at any step). ``out`` has ``q``'s
        shape and dtype; the buffers keep their storage while the call is in use. Returns ``None``
        (the default) when the backend has no such call; the host then calls :meth:`forward`.
        Shape and dtype problems raise ``ValueError`` here, once.
        """
        return None

    def begin_step(self, metadata: AttentionMetadata) -> None:  # noqa: B027 - optional hook
        """Called by a host that runs :meth:`prepare`'s calls, once per step before they run, with the
        step's batch layout (its tensors stay unchanged until the step's calls have run). Raises
        ``ValueError`` naming the field when the metadata breaks the layout."""


class PreparedAttention(Protocol):
    """What :meth:`AttentionBackend.prepare` returns: ``function(*arguments)`` runs the call and
    returns 0, or a non-zero status for which ``explain(status)`` (when not ``None``) raises the
    specific error. ``pyagent_kernels.PreparedCall`` is one: a host may then run it inside a kernel
    program (``pyagent_kernels.program.Program``), with no Python between the layers' calls."""

    @property
    def function(self) -> Callable[..., int]:
        """The callable that runs the call."""

    @property
    def arguments(self) -> tuple[Any, ...]:
        """Its arguments."""

    @property
    def kernel(self) -> str:
        """Its name, for errors and profiles."""

    @property
    def explain(self) -> Callable[[int], None] | None:
        """Raises the error of a failing status, or ``None``."""
