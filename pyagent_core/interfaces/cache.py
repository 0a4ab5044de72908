"""What each layer of a model keeps between steps, so that one cache manager can budget and allocate it.

A model declares one record per layer (:meth:`~pyagent_core.interfaces.model.CausalLM.cache_layout`),
frozen and torch-free, of one of three kinds:

- :class:`PagedKV`: the keys and values of every token, in paged blocks laid out as the attention
  interface reads them, ``[2, num_blocks, block_size, num_kv_heads, head_size]``. With a sliding
  window ``w`` only a token's ``w`` latest positions are ever read again (a manager may free older
  blocks).
- :class:`LatentKV`: multi-head latent attention's compressed cache (DeepSeek-V2/V3's MLA): per
  token one row of ``latent_size`` (the normalized ``kv_lora_rank`` latent) followed by
  ``rope_size`` (the rotated key shared by every head), in paged blocks ``[num_blocks, block_size,
  latent_size + rope_size]``.
- :class:`RecurrentState`: a fixed-size state per sequence (Mamba2's convolution and SSM states,
  Gated DeltaNet's convolution and recurrent states, a short convolution's window): one float32
  tensor ``[num_slots, *shape]`` per entry of ``shapes``, whatever the model's working dtype (a
  recurrent state sums over the whole sequence; rounding it to bfloat16 each token would drift).

Paged records cost bytes per token, state records bytes per sequence. A host gives every sequence
one block table, read by all paged layers alike (a block id means the same positions in each
layer's tensor), and one state slot, the same index in every state tensor of every layer
(:attr:`~pyagent_core.interfaces.attention.AttentionMetadata.state_slots`). :class:`CacheLayout`
holds a model's records and answers what a budget buys.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import attrs

if TYPE_CHECKING:
    import torch

#: The size in bytes of one element of a recurrent state (float32).
STATE_ITEMSIZE = 4

#: A CPU cache tensor of at least this many bytes is mapped fresh from the operating system (see :func:`zeros`).
FRESH_MAP_BYTES = 1 << 20

#: Engine features a model whose layers keep a recurrent state cannot use, and why: shown by ``pyagent
#: list model`` and ``pyagent doctor --model``, and said by the error a host raises when one is asked for.
STATE_LIMITS = {
    "prefix caching": "a cached prefix's blocks hold keys and values but not the recurrent state after the "
                      "prefix, so every prompt is computed from its first token",
    "speculative decoding": "rejecting draft tokens would need the recurrent state rolled back to before them, "
                            "and the state mixers cannot verify draft trees",
}

#: Why a model whose layers call mixer families (MLA's included) cannot use speculative decoding.
MIXER_DRAFT_LIMIT = "its mixer layers cannot verify draft trees (a mixer call refuses a tree mask)"


def zeros(shape: Sequence[int], dtype: torch.dtype, device: torch.device | str = "cpu") -> torch.Tensor:
    """A zeroed tensor of ``shape``. On the CPU one of at least :data:`FRESH_MAP_BYTES` is fresh private
    anonymous memory, which Linux maps to its zero page until a page is first written: allocating a
    cache of a gibibyte touches none of it (``torch.zeros`` writes every byte at start-up and makes all of
    it resident). Elsewhere, and for smaller tensors, ``torch.zeros``."""
    import mmap

    import torch

    nbytes = math.prod(shape) * dtype.itemsize
    if torch.device(device).type != "cpu" or nbytes < FRESH_MAP_BYTES:
        return torch.zeros(tuple(shape), dtype=dtype, device=device)
    region = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    return torch.frombuffer(region, dtype=dtype).view(tuple(shape))  # the tensor holds the region


def _positive(_inst: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if type(value) is not int or value <= 0:
        raise ValueError(f"{attribute.name} must be a positive int, got {value!r}")


def _shapes(value: Iterable[Iterable[int]]) -> tuple[tuple[int, ...], ...]:
    return tuple(tuple(shape) for shape in value)


def _layers(value: Iterable[LayerCache]) -> tuple[LayerCache, ...]:
    return tuple(value)


class LayerCache(ABC):
    """What one layer keeps: bytes per token (paged) or per sequence (state), and how to allocate it."""

    @abstractmethod
    def bytes_per_token(self, itemsize: int) -> int:
        """Bytes one token costs in this layer's paged cache (``itemsize``: the working dtype's); 0 for a state."""

    @abstractmethod
    def bytes_per_sequence(self) -> int:
        """Bytes one sequence's state slot costs in this layer; 0 for a paged cache."""

    @abstractmethod
    def allocate(self, num_blocks: int, block_size: int, num_slots: int, dtype: torch.dtype,
                 device: torch.device | str = "cpu") -> torch.Tensor | tuple[torch.Tensor, ...]:
        """This layer's zeroed cache: a tensor (paged records, ``dtype``) or a tuple of float32 state
        tensors ``[num_slots, *shape]``, as the model's forward receives it in ``kv_caches[layer]``."""


@attrs.frozen
class PagedKV(LayerCache):
    """Keys and values of every token, ``[2, num_blocks, block_size, num_kv_heads, head_size]``.

    Attributes:
        num_kv_heads: key/value heads.
        head_size: size of each head (keys and values alike).
        sliding_window: the layer attends to its ``w`` latest positions only (``None``: all).
    """

    num_kv_heads: int = attrs.field(validator=_positive)
    head_size: int = attrs.field(validator=_positive)
    sliding_window: int | None = attrs.field(default=None)

    @sliding_window.validator
    def _window(self, _attr: attrs.Attribute[Any], value: int | None) -> None:
        if value is not None:
            _positive(self, _attr, value)

    def bytes_per_token(self, itemsize: int) -> int:
        """``2 * num_kv_heads * head_size * itemsize``."""
        return 2 * self.num_kv_heads * self.head_size * itemsize

    def bytes_per_sequence(self) -> int:
        """0: a paged cache costs per token."""
        return 0

    def allocate(self, num_blocks: int, block_size: int, num_slots: int, dtype: torch.dtype,
                 device: torch.device | str = "cpu") -> torch.Tensor:
        """A zeroed ``[2, num_blocks, block_size, num_kv_heads, head_size]`` tensor of ``dtype``."""
        return zeros((2, num_blocks, block_size, self.num_kv_heads, self.head_size), dtype, device)


@attrs.frozen
class LatentKV(LayerCache):
    """MLA's compressed cache, ``[num_blocks, block_size, latent_size + rope_size]``.

    Attributes:
        latent_size: the normalized key/value latent per token (``kv_lora_rank``).
        rope_size: the rotated key shared by every head (``qk_rope_head_dim``), stored after the latent.
    """

    latent_size: int = attrs.field(validator=_positive)
    rope_size: int = attrs.field(validator=_positive)

    @property
    def width(self) -> int:
        """Values per token: ``latent_size + rope_size``."""
        return self.latent_size + self.rope_size

    def bytes_per_token(self, itemsize: int) -> int:
        """``(latent_size + rope_size) * itemsize``."""
        return self.width * itemsize

    def bytes_per_sequence(self) -> int:
        """0: a paged cache costs per token."""
        return 0

    def allocate(self, num_blocks: int, block_size: int, num_slots: int, dtype: torch.dtype,
                 device: torch.device | str = "cpu") -> torch.Tensor:
        """A zeroed ``[num_blocks, block_size, latent_size + rope_size]`` tensor of ``dtype``."""
        return zeros((num_blocks, block_size, self.width), dtype, device)


@attrs.frozen
class RecurrentState(LayerCache):
    """A fixed-size float32 state per sequence: one tensor ``[num_slots, *shape]`` per entry of ``shapes``.

    Attributes:
        mixer: what keeps it (``"mamba2"``, ``"gated_deltanet"``, ``"short_conv"``), for listings.
        names: one name per tensor (``("conv", "ssm")``), in the order the forward receives them.
        shapes: the shape of one sequence's entry of each tensor.
    """

    mixer: str
    names: tuple[str, ...] = attrs.field(converter=tuple)
    shapes: tuple[tuple[int, ...], ...] = attrs.field(converter=_shapes)

    def __attrs_post_init__(self) -> None:
        if not self.shapes or len(self.names) != len(self.shapes):
            raise ValueError(f"a recurrent state names each of its tensors once: names {self.names}, "
                             f"shapes {self.shapes}")
        for name, shape in zip(self.names, self.shapes, strict=True):
            if not shape or any(type(size) is not int or size <= 0 for size in shape):
                raise ValueError(f"state {name!r} must have a shape of positive ints, got {shape}")

    def bytes_per_token(self, itemsize: int) -> int:
        """0: a state costs per sequence."""
        return 0

    def bytes_per_sequence(self) -> int:
        """float32 elements of every tensor of one slot, times 4."""
        return sum(math.prod(shape) for shape in self.shapes) * STATE_ITEMSIZE

    def allocate(self, num_blocks: int, block_size: int, num_slots: int, dtype: torch.dtype,
                 device: torch.device | str = "cpu") -> tuple[torch.Tensor, ...]:
        """Zeroed float32 tensors ``[num_slots, *shape]``, one per entry of ``shapes``."""
        import torch

        return tuple(zeros((num_slots, *shape), torch.float32, device) for shape in self.shapes)


@attrs.frozen
class CacheLayout:
    """A model's per-layer cache records, and what a memory budget buys with them.

    Attributes:
        layers: one record per layer, in layer order.
    """

    layers: tuple[LayerCache, ...] = attrs.field(converter=_layers)

    @property
    def paged(self) -> bool:
        """Whether some layer keeps a paged cache (block tables are needed)."""
        return any(layer.bytes_per_token(1) for layer in self.layers)

    @property
    def stateful(self) -> bool:
        """Whether some layer keeps a state per sequence (state slots are needed)."""
        return any(isinstance(layer, RecurrentState) for layer in self.layers)

    def limits(self, mixer_families: Sequence[str] = ()) -> dict[str, str]:
        """Engine features a model of this layout calling ``mixer_families`` cannot use, and why:
        :data:`STATE_LIMITS` with state layers; speculative decoding (:data:`MIXER_DRAFT_LIMIT`) with
        mixer layers alone."""
        if self.stateful:
            return dict(STATE_LIMITS)
        return {"speculative decoding": MIXER_DRAFT_LIMIT} if mixer_families else {}

    def bytes_per_token(self, itemsize: int) -> int:
        """Bytes one token costs across the paged layers."""
        return sum(layer.bytes_per_token(itemsize) for layer in self.layers)

    def bytes_per_sequence(self) -> int:
        """Bytes one state slot costs across the state layers."""
        return sum(layer.bytes_per_sequence() for layer in self.layers)

    def num_blocks(self, budget: int, block_size: int, num_slots: int, itemsize: int) -> int:
        """How many blocks of ``block_size`` tokens fit in ``budget`` bytes once ``num_slots`` state
        slots are set aside (0 when the model keeps no paged cache).

        Raises ``ValueError`` when the slots alone exceed the budget, saying how much they need.
        """
        states = num_slots * self.bytes_per_sequence()
        if states > budget:
            raise ValueError(f"{num_slots} state slots need {states} bytes ({self.bytes_per_sequence()} per "
                             f"sequence), more than the cache budget of {budget} bytes; raise the budget or "
                             "lower the number of sequences")
        per_block = block_size * self.bytes_per_token(itemsize)
        return (budget - states) // per_block if per_block else 0

    def allocate(self, num_blocks: int, block_size: int, num_slots: int, dtype: torch.dtype,
                 device: torch.device | str = "cpu") -> list[torch.Tensor | tuple[torch.Tensor, ...]]:
        """Every layer's zeroed cache, in layer order (the ``kv_caches`` a forward takes)."""
        return [layer.allocate(num_blocks, block_size, num_slots, dtype, device) for layer in self.layers]


def paged_layout(num_layers: int, num_kv_heads: int, head_size: int,
                 windows: Sequence[int | None] = ()) -> CacheLayout:
    """The layout of an attention-only model: :class:`PagedKV` on every layer, with its window."""
    return CacheLayout(PagedKV(num_kv_heads, head_size, windows[i] if windows else None) for i in range(num_layers))
