"""Conformance kit for attention backends: random paged batches against a naive torch reference.

Each check builds batches of one shape family (decode, prefill, block boundaries, many blocks,
mixed), runs them for every dtype, block size and head layout (MHA, GQA, MQA) the spec allows, and
compares the output and the updated cache with :func:`reference_attention`. Backends whose spec
declares ``sliding_window`` or ``logits_soft_cap`` also get those batches with windows shorter than
the context (the visible positions listed one by one, :func:`visible_positions`) and capped scores.
"""

from __future__ import annotations

import gc
import itertools
import math
import weakref
from collections.abc import Callable, Iterator
from typing import Any, ClassVar

import attrs
import pytest
import torch

from pyagent_core.interfaces.attention import AttentionBackend, AttentionContext, AttentionMetadata, cache_slots
from pyagent_core.testing.base import BackendConformance
from pyagent_core.testing.support import expect_raises
from pyagent_core.types import AttentionSpec

TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float32: (1e-4, 1e-4),
    torch.float16: (2e-2, 2e-2),
    torch.bfloat16: (5e-2, 5e-2),
}
"""(atol, rtol) per dtype for outputs compared with the float32 reference."""

HEAD_LAYOUTS = ((4, 4), (8, 2), (4, 1))
"""(num_heads, num_kv_heads): plain multi-head, grouped-query (4 per group), multi-query."""


@attrs.frozen
class Shape:
    """A batch shape: cached tokens and new tokens of each sequence."""

    context_lens: tuple[int, ...]
    query_lens: tuple[int, ...]


@attrs.frozen(eq=False)
class Batch:
    """One random batch: the inputs of ``forward`` plus the scale.

    ``sliding_windows`` and ``soft_cap`` are the model's (:class:`AttentionContext`), ``layer`` the
    layer ``forward`` is called for: the batch attends with ``sliding_windows[layer]``.
    """

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    kv_cache: torch.Tensor
    metadata: AttentionMetadata
    scale: float
    sliding_windows: tuple[int | None, ...] = ()
    soft_cap: float | None = None
    layer: int = 0

    @property
    def window(self) -> int | None:
        """The sliding window of the layer the batch is attended for (``None``: none)."""
        return self.sliding_windows[self.layer] if self.sliding_windows else None

    def args(self) -> tuple[Any, ...]:
        """Positional arguments of ``forward``, the cache cloned so retries start clean."""
        return self.q, self.k, self.v, self.kv_cache.clone(), self.metadata, self.layer

    def context(self) -> AttentionContext:
        """The :class:`AttentionContext` of a backend built for this batch's heads, cache, dtype,
        windows and cap."""
        _, num_heads, head_size = self.q.shape
        return AttentionContext(num_heads=num_heads, head_size=head_size, num_kv_heads=self.k.shape[1],
                                scale=self.scale, block_size=self.kv_cache.shape[2],
                                dtype=str(self.q.dtype).removeprefix("torch."),
                                sliding_windows=self.sliding_windows, logits_soft_cap=self.soft_cap)


def _tree_mask(query_lens: tuple[int, ...], gen: torch.Generator) -> torch.Tensor:
    """Random draft trees: token ``i`` of a sequence may see itself and its ancestors only."""
    rows = []
    width = max(query_lens)
    for n in query_lens:
        ancestors: list[set[int]] = []
        for i in range(n):
            parent = int(torch.randint(-1, i, (1,), generator=gen)) if i else -1
            ancestors.append({i} | (ancestors[parent] if parent >= 0 else set()))
        for seen in ancestors:
            rows.append([j in seen for j in range(width)])
    return torch.tensor(rows, dtype=torch.bool)


def make_batch(
    shape: Shape,
    *,
    block_size: int,
    num_heads: int,
    num_kv_heads: int,
    head_size: int,
    dtype: torch.dtype,
    seed: int,
    tree: bool = False,
    num_blocks: int = 0,
) -> Batch:
    """Build a random batch of ``shape`` over shuffled, non-contiguous cache blocks.

    The cache holds random keys/values for the context; block-table padding points at valid blocks
    of other sequences, so a backend that reads past a sequence's end gets wrong numbers. The cache
    has ``num_blocks`` blocks, or more when the batch needs them.
    """
    gen = torch.Generator().manual_seed(seed)
    seq_lens = [c + q for c, q in zip(shape.context_lens, shape.query_lens, strict=True)]
    blocks_needed = [math.ceil(n / block_size) for n in seq_lens]
    num_blocks = max(num_blocks, sum(blocks_needed) + 2)
    order = torch.randperm(num_blocks, generator=gen).tolist()
    max_blocks = max(blocks_needed)
    tables, slots, start = [], [], 0
    for need, ctx, n in zip(blocks_needed, shape.context_lens, seq_lens, strict=True):
        own = order[start:start + need]
        start += need
        tables.append(own + [order[(start + i) % num_blocks] for i in range(max_blocks - need)])
        slots += cache_slots(own, range(ctx, n), block_size)
    num_tokens = sum(shape.query_lens)

    def randn(*size: int) -> torch.Tensor:
        return torch.randn(*size, generator=gen).to(dtype)

    metadata = AttentionMetadata(
        block_tables=torch.tensor(tables, dtype=torch.int32),
        slot_mapping=torch.tensor(slots, dtype=torch.int64),
        seq_lens=torch.tensor(seq_lens, dtype=torch.int32),
        query_start_loc=torch.tensor([0, *itertools.accumulate(shape.query_lens)], dtype=torch.int32),
        max_query_len=max(shape.query_lens),
        max_seq_len=max(seq_lens),
        tree_mask=_tree_mask(shape.query_lens, gen) if tree else None,
    )
    return Batch(
        q=randn(num_tokens, num_heads, head_size),
        k=randn(num_tokens, num_kv_heads, head_size),
        v=randn(num_tokens, num_kv_heads, head_size),
        kv_cache=randn(2, num_blocks, block_size, num_kv_heads, head_size),
        metadata=metadata,
        scale=head_size**-0.5,
    )


def visible_positions(metadata: AttentionMetadata, seq: int, window: int | None) -> torch.Tensor:
    """``bool [query_len, seq_len]``: which positions each new token of sequence ``seq`` sees, decided
    one (token, position) pair at a time from the contract's words (no vectorised shortcut).

    Causal: every position up to the token's own; with a tree mask, every cached position and the
    new tokens its row sets. With a window ``w``, of those only the positions ``j`` of the text with
    ``p - w < j <= p`` (``p`` the token's): a new token's text position is its cache position, or
    with a tree mask ``ctx`` plus the number of new tokens its row sets, minus one.
    """
    lo, hi = (int(x) for x in metadata.query_start_loc[seq:seq + 2])
    seq_len, n = int(metadata.seq_lens[seq]), hi - lo
    ctx = seq_len - n
    tree = None if metadata.tree_mask is None else metadata.tree_mask[lo:hi, :n].tolist()

    text_positions = [ctx + (i if tree is None else sum(tree[i]) - 1) for i in range(n)]  # of the new tokens

    def sees(i: int, j: int) -> bool:  # new token i, position j
        if j < ctx:
            seen, key = True, j
        else:
            seen, key = (j - ctx <= i if tree is None else tree[i][j - ctx]), text_positions[j - ctx]
        return seen and (window is None or text_positions[i] - window < key)

    return torch.tensor([[sees(i, j) for j in range(seq_len)] for i in range(n)], dtype=torch.bool).view(n, seq_len)


def reference_attention(batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
    """Naive paged attention in float32: ``(output, cache after the write)``.

    Writes the new keys/values at their slots, gathers each sequence's keys/values position by
    position through its block table, expands key/value heads for grouped-query attention, caps
    the scores (``soft_cap * tanh(score / soft_cap)``) when the batch has a cap and applies
    :func:`visible_positions` before the softmax; a token that sees nothing gets zeros.
    """
    md = batch.metadata
    cache = batch.kv_cache.clone()
    _, _, block_size, num_kv_heads, head_size = cache.shape
    flat = cache.view(2, -1, num_kv_heads, head_size)
    flat[0, md.slot_mapping] = batch.k
    flat[1, md.slot_mapping] = batch.v
    group = batch.q.shape[1] // num_kv_heads
    out = torch.empty(batch.q.shape, dtype=torch.float32)
    starts = md.query_start_loc.tolist()
    for s, seq_len in enumerate(md.seq_lens.tolist()):
        lo, hi = starts[s], starts[s + 1]
        slots = torch.tensor(cache_slots(md.block_tables[s].tolist(), range(seq_len), block_size))
        keys = flat[0, slots].float().repeat_interleave(group, dim=1)
        values = flat[1, slots].float().repeat_interleave(group, dim=1)
        scores = torch.einsum("qhd,khd->hqk", batch.q[lo:hi].float(), keys) * batch.scale
        if batch.soft_cap is not None:
            scores = batch.soft_cap * torch.tanh(scores / batch.soft_cap)
        allowed = visible_positions(md, s, batch.window)
        weights = scores.masked_fill(~allowed, float("-inf")).softmax(dim=-1).nan_to_num(0.0)
        out[lo:hi] = torch.einsum("hqk,khd->qhd", weights, values)
    return out, cache


def _shapes_decode_single(_bs: int) -> list[Shape]:
    return [Shape((37,), (1,)), Shape((0,), (1,))]


def _shapes_decode_batch(bs: int) -> list[Shape]:
    return [Shape((5, bs, 33, 3 * bs + 1), (1, 1, 1, 1))]


def _shapes_prefill(_bs: int) -> list[Shape]:
    return [Shape((0, 0, 0), (1, 7, 33)), Shape((0,), (2,))]


def _shapes_block_boundary(bs: int) -> list[Shape]:
    return [Shape((bs, 2 * bs - 1, bs - 1, 0), (bs, 1, 2, 2 * bs))]


def _shapes_many_blocks(bs: int) -> list[Shape]:
    return [Shape((20 * bs + 3, 0), (3, 9 * bs - 1))]


def _shapes_mixed(bs: int) -> list[Shape]:
    return [Shape((20, 0, 45, 9, bs), (5, 11, 1, 1, bs + 3))]


def _shapes_tree(bs: int) -> list[Shape]:
    return [Shape((10, 0, bs), (6, 4, 1))]


def _shapes_prefix_hit(bs: int) -> list[Shape]:
    """Prefills after whole cached blocks (a prefix-cache hit) and after a partial one (chunked)."""
    return [Shape((2 * bs, 3 * bs + 2), (bs + 5, 9))]


def _shapes_of_four_tokens(spec: AttentionSpec, bs: int) -> list[tuple[Shape, bool]]:
    """Steps of four new tokens each, in every layout the spec handles: ``(shape, tree)``."""
    shapes = []
    if spec.decode:
        shapes.append((Shape((5, bs, 33, 3 * bs + 1), (1, 1, 1, 1)), False))
    if spec.prefill:
        shapes.append((Shape((bs + 2,), (4,)), False))
    if spec.prefill and spec.decode:
        shapes.append((Shape((0, 2 * bs - 1), (3, 1)), False))
    if spec.tree_mask:
        shapes.append((Shape((bs,), (4,)), True))
    return shapes


def _windows(bs: int) -> tuple[int, ...]:
    """Windows shorter than the kit's contexts: just the token, across chunk and block borders."""
    return (1, 5, bs + 3)


SOFT_CAP = 1.5
"""The kit's score cap: small enough that capping changes the kit's scores (about N(0, 1)) a lot."""


class AttentionConformance(BackendConformance):
    """Kit for :class:`AttentionBackend` s. Set ``impl`` and ``spec``; override hooks as needed.

    Dtypes, head size and block sizes come from the spec (``head_sizes``/``block_sizes`` empty
    means any: the kit uses 64 and both 4 and 16). Prefill, decode, tree-mask, sliding-window and
    soft-cap checks are skipped when the spec says the backend does not handle them.
    """

    kind = "attention"
    spec: ClassVar[AttentionSpec]
    default_head_size: ClassVar[int] = 64
    default_block_sizes: ClassVar[tuple[int, ...]] = (4, 16)

    def make_backend(self, context: AttentionContext) -> AttentionBackend:
        """Construct the backend under test for ``context`` (override to pass extra setup)."""
        backend: AttentionBackend = self.impl(self.make_options(), context)
        return backend

    def configurations(self) -> Iterator[dict[str, Any]]:
        """Every (dtype, block size, head layout) combination the spec allows, with the head size."""
        head_size = self.spec.head_sizes[0] if self.spec.head_sizes else self.default_head_size
        for dtype_name in self.spec.dtypes:
            dtype = getattr(torch, dtype_name)
            for block_size in self.spec.block_sizes or self.default_block_sizes:
                for num_heads, num_kv_heads in HEAD_LAYOUTS:
                    yield dict(dtype=dtype, block_size=block_size, num_heads=num_heads,
                               num_kv_heads=num_kv_heads, head_size=head_size)

    def run_shapes(self, shapes: Callable[[int], list[Shape]], tree: bool = False, windowed: bool = False,
                   soft_cap: float | None = None) -> None:
        """Run every shape of ``shapes(block_size)`` in every configuration against the reference.

        ``windowed``: at layer 1 of a model whose layer 0 has no window (``sliding_windows=(None,
        w)``), the configurations taking the windows of :func:`_windows` in turn. ``soft_cap``:
        with the scores capped.
        """
        for seed, config in enumerate(self.configurations()):
            windows = _windows(config["block_size"])
            turn = seed + seed // len(HEAD_LAYOUTS)  # so that each head layout meets every window
            window = windows[turn % len(windows)] if windowed else None
            for shape in shapes(config["block_size"]):
                batch = make_batch(shape, seed=seed, tree=tree, **config)
                if window is not None or soft_cap is not None:
                    batch = attrs.evolve(batch, sliding_windows=() if window is None else (None, window),
                                         soft_cap=soft_cap, layer=0 if window is None else 1)
                self.check_batch(batch, f"{shape} {config} window={window} soft_cap={soft_cap}")

    def check_batch(self, batch: Batch, label: str, backend: AttentionBackend | None = None) -> None:
        """Compare the backend's output and cache with :func:`reference_attention` on ``batch``
        (``backend``: one already built for the batch's context; default: a new one)."""
        backend = backend or self.make_backend(batch.context())
        q, k, v, cache, metadata, layer = batch.args()
        out = backend.forward(q, k, v, cache, metadata, layer)
        expected_out, expected_cache = reference_attention(batch)
        assert out.shape == q.shape, f"{label}: output shape {list(out.shape)}, want {list(q.shape)}"
        assert out.dtype == q.dtype, f"{label}: output dtype {out.dtype}, want {q.dtype}"
        assert torch.equal(cache, expected_cache), (
            f"{label}: kv_cache after forward differs from writing k/v at slot_mapping (and nothing else)"
        )
        atol, rtol = TOLERANCES[batch.q.dtype]
        torch.testing.assert_close(
            out.float(), expected_out, atol=atol, rtol=rtol, msg=lambda m: f"{label}: {m}"
        )

    def _require(self, flag: str) -> None:
        if not getattr(self.spec, flag):
            pytest.skip(f"spec says {flag}=False")

    def test_decode_single_token(self) -> None:
        self._require("decode")
        self.run_shapes(_shapes_decode_single)

    def test_decode_batch(self) -> None:
        self._require("decode")
        self.run_shapes(_shapes_decode_batch)

    def test_prefill_odd_lengths(self) -> None:
        self._require("prefill")
        self.run_shapes(_shapes_prefill)

    def test_block_boundaries(self) -> None:
        self._require("prefill")
        self.run_shapes(_shapes_block_boundary)

    def test_many_blocks(self) -> None:
        self._require("prefill")
        self.run_shapes(_shapes_many_blocks)

    def test_mixed_prefill_and_decode(self) -> None:
        self._require("prefill")
        self._require("decode")
        self.run_shapes(_shapes_mixed)

    def test_tree_mask(self) -> None:
        self._require("tree_mask")
        self.run_shapes(_shapes_tree, tree=True)

    def test_sliding_window_decode(self) -> None:
        self._require("sliding_window")
        self._require("decode")
        self.run_shapes(_shapes_decode_batch, windowed=True)

    def test_sliding_window_prefill(self) -> None:
        self._require("sliding_window")
        self._require("prefill")
        self.run_shapes(_shapes_prefill, windowed=True)

    def test_sliding_window_prefix_hit(self) -> None:
        self._require("sliding_window")
        self._require("prefill")
        self.run_shapes(_shapes_prefix_hit, windowed=True)

    def test_sliding_window_mixed(self) -> None:
        self._require("sliding_window")
        self._require("prefill")
        self._require("decode")
        self.run_shapes(_shapes_mixed, windowed=True)

    def test_sliding_window_tree(self) -> None:
        self._require("sliding_window")
        self._require("tree_mask")
        self.run_shapes(_shapes_tree, tree=True, windowed=True)

    def test_sliding_window_per_layer(self) -> None:
        """One backend, a model with windows on some layers: each layer attends with its own."""
        self._require("sliding_window")
        self._require("prefill")
        config = next(self.configurations())
        batch = make_batch(_shapes_mixed(config["block_size"])[0], seed=7, **config)
        windows = (7, None, 2)
        backend = self.make_backend(attrs.evolve(batch, sliding_windows=windows).context())
        for layer in range(len(windows)):
            batch = attrs.evolve(batch, sliding_windows=windows, layer=layer)
            self.check_batch(batch, f"layer {layer} of windows {windows}", backend)

    def test_soft_cap(self) -> None:
        self._require("logits_soft_cap")
        self.run_shapes(_shapes_mixed, soft_cap=SOFT_CAP)

    def test_soft_cap_with_window_and_tree(self) -> None:
        self._require("logits_soft_cap")
        self._require("sliding_window")
        self._require("tree_mask")
        self.run_shapes(_shapes_tree, tree=True, windowed=True, soft_cap=SOFT_CAP)

    def test_prepared_calls_match_forward(self) -> None:
        """A backend that prepares calls (:meth:`AttentionBackend.prepare`): one call per layer on fixed
        buffers, run after :meth:`~AttentionBackend.begin_step` over steps of different layouts, writes
        what ``forward`` returns and changes the cache as ``forward`` does, at every layer's window and
        the cap; a step of another token count fails instead of running; the calls do not keep the
        backend alive (hosts keep them per backend)."""
        for seed, config in enumerate(self.configurations()):
            bs, dtype = config["block_size"], config["dtype"]
            window = _windows(bs)[seed % len(_windows(bs))] if self.spec.sliding_window else None
            cap = SOFT_CAP if self.spec.logits_soft_cap else None
            first = make_batch(Shape((1,), (1,)), seed=seed, **config)
            layers = (None, window) if window is not None else (None,)
            backend = self.make_backend(attrs.evolve(first, sliding_windows=layers, soft_cap=cap).context())
            num_blocks = 96
            cache = torch.zeros(2, num_blocks, bs, config["num_kv_heads"], config["head_size"], dtype=dtype)
            q = torch.zeros(4, config["num_heads"], config["head_size"], dtype=dtype)
            k = torch.zeros(4, config["num_kv_heads"], config["head_size"], dtype=dtype)
            v, out = torch.zeros_like(k), torch.zeros_like(q)
            calls = [backend.prepare(q, k, v, out, cache, layer) for layer in range(len(layers))]
            if any(call is None for call in calls):
                assert all(call is None for call in calls), "prepare returned a call for some layers only"
                pytest.skip("the backend prepares no calls (hosts call forward)")
            for shape, tree in _shapes_of_four_tokens(self.spec, bs):
                batch = make_batch(shape, seed=seed, tree=tree, num_blocks=num_blocks, **config)
                for layer, call in enumerate(calls):
                    label = f"{shape} tree={tree} layer {layer} (window {layers[layer]}) {config}"
                    expected_cache = batch.kv_cache.clone()
                    want = backend.forward(batch.q, batch.k, batch.v, expected_cache, batch.metadata, layer)
                    for buffer, values in ((q, batch.q), (k, batch.k), (v, batch.v), (cache, batch.kv_cache)):
                        buffer.copy_(values)
                    backend.begin_step(batch.metadata)
                    assert call is not None and call.function(*call.arguments) == 0, f"{label}: the call failed"
                    assert torch.equal(out, want), f"{label}: the prepared call wrote other values than forward"
                    assert torch.equal(cache, expected_cache), f"{label}: the cache differs from forward's"
            if self.spec.decode:
                other = make_batch(Shape((3,), (1,)), seed=seed, num_blocks=num_blocks, **config)
                backend.begin_step(other.metadata)
                call = calls[0]
                assert call is not None and call.function(*call.arguments) != 0, (
                    "a call prepared for 4 tokens ran on a step of 1 token"
                )
            alive = weakref.ref(backend)
            del backend
            gc.collect()
            assert alive() is None, "the prepared calls keep the backend alive; hosts keep them per backend"

    def test_rejects_mismatched_inputs(self) -> None:
        config = next(self.configurations())
        batch = make_batch(Shape((3, 0), (2, 5)), seed=0, **config)
        backend = self.make_backend(batch.context())
        md = batch.metadata
        t = md.num_tokens
        bad_inputs: dict[str, dict[str, Any]] = {
            "q with one head too many": dict(q=torch.cat([batch.q, batch.q[:, :1]], dim=1)),
            "k with one token fewer than q": dict(k=batch.k[:-1]),
            "v with a smaller head size": dict(v=batch.v[..., :-1]),
            "k in another dtype than the cache": dict(k=batch.k.double()),
            "kv_cache without the leading k/v dimension": dict(kv_cache=batch.kv_cache[0]),
            "slot_mapping as int32": dict(slot_mapping=md.slot_mapping.int()),
            "slot_mapping of the wrong length": dict(slot_mapping=md.slot_mapping[:-1]),
            "query_start_loc missing its last entry": dict(query_start_loc=md.query_start_loc[:-1]),
            "seq_lens of the wrong length": dict(seq_lens=md.seq_lens[:1]),
            "block_tables as int64": dict(block_tables=md.block_tables.long()),
            "tree_mask of the wrong shape": dict(tree_mask=torch.ones(t, 1, dtype=torch.bool)),
        }
        tensor_fields = {f.name for f in attrs.fields(Batch)}
        for what, change in bad_inputs.items():
            inputs = {k: v for k, v in change.items() if k in tensor_fields}
            md_fields = {k: v for k, v in change.items() if k not in tensor_fields}
            args = attrs.evolve(batch, metadata=attrs.evolve(md, **md_fields), **inputs).args()
            expect_raises(ValueError, backend.forward, *args, what=f"forward with {what}")
            assert torch.equal(args[3], change.get("kv_cache", batch.kv_cache)), (
                f"forward with {what} raised but changed the cache"
            )
