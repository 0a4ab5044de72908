"""paged_attention: C kernel (every ISA variant) and torch fallback vs the conformance kit's reference,
also with sliding windows (the kit's position-by-position mask) and capped scores."""

from __future__ import annotations

from typing import Any

import attrs
import pytest
import torch

import pyagent_kernels
from pyagent_core.testing.attention import TOLERANCES, Batch, Shape, make_batch, reference_attention
from pyagent_kernels import Backend, KernelArgumentError, run_prepared
from pyagent_kernels.attention import PagedBatch, PagedLayout, paged_attention, prepare_paged_attention
from pyagent_kernels.program import Program

COMPILED = bool(pyagent_kernels.status()["compiled"])
needs_c = pytest.mark.skipif(not COMPILED, reason="pyagent_kernels._C is not built")
BACKENDS = ["c", "torch"] if COMPILED else ["torch"]

SHAPES = {
    "decode": Shape((37, 0, 16, 5), (1, 1, 1, 1)),
    "prefill": Shape((0, 0), (1, 45)),
    "chunked": Shape((33, 7, 0), (17, 1, 2)),
    "long": Shape((300,), (70,)),
}


def run(batch: Batch, backend: Backend, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """``(output, cache after the call)`` of paged_attention on a clone of the batch's cache."""
    md, cache = batch.metadata, batch.kv_cache.clone()
    out = paged_attention(
        batch.q, batch.k, batch.v, cache, block_tables=md.block_tables, slot_mapping=md.slot_mapping,
        seq_lens=md.seq_lens, query_start_loc=md.query_start_loc, scale=batch.scale,
        tree_mask=md.tree_mask, window=batch.window, soft_cap=batch.soft_cap, backend=backend, **kwargs,
    )
    return out, cache


def windowed(batch: Batch, window: int | None, soft_cap: float | None = None) -> Batch:
    """``batch`` attended with ``window`` (one layer) and ``soft_cap``."""
    return attrs.evolve(batch, sliding_windows=(window,), soft_cap=soft_cap)


def check_against_reference(batch: Batch, backend: Backend, **kwargs: Any) -> None:
    out, cache = run(batch, backend, **kwargs)
    expected_out, expected_cache = reference_attention(batch)
    assert torch.equal(cache, expected_cache)
    assert out.dtype == batch.q.dtype
    atol, rtol = TOLERANCES[batch.q.dtype]
    torch.testing.assert_close(out.float(), expected_out, atol=atol, rtol=rtol)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("tree", [False, True])
def test_matches_reference(backend: Backend, shape: str, dtype: torch.dtype, tree: bool) -> None:
    batch = make_batch(SHAPES[shape], block_size=5, num_heads=6, num_kv_heads=2, head_size=32,
                       dtype=dtype, seed=len(shape), tree=tree)
    check_against_reference(batch, backend)


@needs_c
@pytest.mark.parametrize(("window", "soft_cap"), [(None, None), (50, 20.0)])
def test_threads_give_the_same_bits(window: int | None, soft_cap: float | None) -> None:
    batch = windowed(make_batch(Shape((700, 300, 5), (1, 90, 1)), block_size=16, num_heads=8, num_kv_heads=2,
                                head_size=64, dtype=torch.float32, seed=3), window, soft_cap)
    one, _ = run(batch, "c", threads=1)
    four, _ = run(batch, "c", threads=4)
    assert torch.equal(one, four)


@needs_c
@pytest.mark.parametrize("head_size", [64, 40, 8])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_every_isa_matches_reference(c_isa: str, head_size: int, dtype: torch.dtype) -> None:
    batch = make_batch(SHAPES["chunked"], block_size=16, num_heads=9, num_kv_heads=3, head_size=head_size,
                       dtype=dtype, seed=head_size, tree=True)
    check_against_reference(batch, "c")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(("shape", "window"), [("decode", 6), ("prefill", 1), ("chunked", 6), ("long", 21),
                                               ("long", 1)])
@pytest.mark.parametrize("tree", [False, True])
def test_sliding_window_matches_reference(backend: Backend, shape: str, window: int, tree: bool) -> None:
    batch = make_batch(SHAPES[shape], block_size=5, num_heads=6, num_kv_heads=2, head_size=32,
                       dtype=torch.float32, seed=window, tree=tree)
    check_against_reference(windowed(batch, window), backend)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(("dtype", "window"), [(torch.float32, None), (torch.bfloat16, 9)])
def test_soft_cap_matches_reference(backend: Backend, dtype: torch.dtype, window: int | None) -> None:
    batch = make_batch(SHAPES["chunked"], block_size=16, num_heads=4, num_kv_heads=4, head_size=64,
                       dtype=dtype, seed=4, tree=True)
    batch = attrs.evolve(batch, q=batch.q * 4)  # scores of about N(0, 16): the cap of 2 changes them a lot
    check_against_reference(windowed(batch, window, soft_cap=2.0), backend)


@needs_c
@pytest.mark.parametrize("head_size", [64, 40])
def test_every_isa_matches_reference_with_window_and_cap(c_isa: str, head_size: int) -> None:
    for tree in (False, True):
        batch = make_batch(SHAPES["long"], block_size=16, num_heads=9, num_kv_heads=3, head_size=head_size,
                           dtype=torch.float32, seed=head_size, tree=tree)
        check_against_reference(windowed(batch, 37, soft_cap=1.5), "c")


@needs_c
@pytest.mark.parametrize("window", [None, 1, 13, 40])
def test_a_token_gets_the_same_bits_alone_or_in_a_prefill(window: int | None) -> None:
    """Decoding the last token of a prompt gives the bits its row of the whole prompt's prefill has:
    every row scores its keys in the same chunks whatever the work item, window or not."""
    prompt = make_batch(Shape((0,), (70,)), block_size=16, num_heads=4, num_kv_heads=2, head_size=64,
                        dtype=torch.float32, seed=5)
    md = prompt.metadata
    full, cache = run(windowed(prompt, window), "c")
    last = paged_attention(
        prompt.q[-1:], prompt.k[-1:], prompt.v[-1:], cache, block_tables=md.block_tables,
        slot_mapping=md.slot_mapping[-1:], seq_lens=md.seq_lens,
        query_start_loc=torch.tensor([0, 1], dtype=torch.int32), scale=prompt.scale, window=window, backend="c",
    )
    assert torch.equal(last[0], full[-1])


@pytest.mark.parametrize("backend", BACKENDS)
def test_token_that_sees_nothing_gets_zeros(backend: Backend) -> None:
    batch = make_batch(Shape((0,), (3,)), block_size=4, num_heads=2, num_kv_heads=1, head_size=16,
                       dtype=torch.float32, seed=0, tree=True)
    mask = batch.metadata.tree_mask
    assert mask is not None
    mask[1] = False
    out, _ = run(batch, backend)
    assert torch.equal(out[1], torch.zeros_like(out[1]))


@pytest.mark.parametrize("backend", BACKENDS)
def test_empty_batch(backend: Backend) -> None:
    batch = make_batch(Shape((3,), (1,)), block_size=4, num_heads=2, num_kv_heads=1, head_size=16,
                       dtype=torch.float32, seed=0)
    md = batch.metadata
    cache = batch.kv_cache.clone()
    out = paged_attention(
        batch.q[:0], batch.k[:0], batch.v[:0], cache, block_tables=md.block_tables[:0],
        slot_mapping=md.slot_mapping[:0], seq_lens=md.seq_lens[:0],
        query_start_loc=md.query_start_loc[:1], scale=1.0, backend=backend,
    )
    assert out.shape == (0, 2, 16)
    assert torch.equal(cache, batch.kv_cache)


def _bad_metadata(batch: Batch) -> dict[str, tuple[str, dict[str, torch.Tensor]]]:
    md = batch.metadata
    tables, slots = md.block_tables.clone(), md.slot_mapping.clone()
    tables[1, 0] = batch.kv_cache.shape[1]
    slots[-1] = -1
    seq_lens = md.seq_lens.clone()
    seq_lens[0] = 0
    starts = md.query_start_loc.clone()
    starts[1] = 8
    too_long = md.seq_lens.clone()
    too_long[0] = 1000
    return {
        "block id": ("block_tables row 1", {"block_tables": tables}),
        "slot": ("slot_mapping[", {"slot_mapping": slots}),
        "short sequence": ("seq_lens[0] is smaller", {"seq_lens": seq_lens}),
        "query_start_loc": ("query_start_loc decreases at sequence 1", {"query_start_loc": starts}),
        "past the block table": ("seq_lens[0] needs more", {"seq_lens": too_long}),
    }


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", ["block id", "slot", "short sequence", "query_start_loc", "past the block table"])
def test_bad_metadata_raises_before_writing(backend: Backend, case: str) -> None:
    batch = make_batch(Shape((3, 9), (2, 5)), block_size=4, num_heads=2, num_kv_heads=1, head_size=16,
                       dtype=torch.float32, seed=1)
    message, change = _bad_metadata(batch)[case]
    md = batch.metadata
    fields = dict(block_tables=md.block_tables, slot_mapping=md.slot_mapping, seq_lens=md.seq_lens,
                  query_start_loc=md.query_start_loc) | change
    cache = batch.kv_cache.clone()
    with pytest.raises(KernelArgumentError, match=message.replace("[", r"\[")):
        paged_attention(batch.q, batch.k, batch.v, cache, scale=batch.scale, backend=backend, **fields)
    assert torch.equal(cache, batch.kv_cache)


@pytest.mark.parametrize(
    ("what", "change", "message"),
    [
        ("q dtype", {"q": "double"}, "q has dtype"),
        ("cache dtype", {"kv_cache": "half"}, "kv_cache has dtype"),
        ("heads", {"q": "drop_head"}, "not a multiple"),
        ("k shape", {"k": "drop_token"}, "k has shape"),
        ("non-contiguous cache", {"kv_cache": "transpose"}, "not contiguous"),
        ("slot dtype", {"slot_mapping": "int"}, "slot_mapping has dtype"),
        ("tree rows", {"tree_mask": "one_row"}, "tree_mask has shape"),
        ("scale", {"scale": float("nan")}, "scale"),
        ("window", {"window": 0}, "window=0 must be a positive int"),
        ("window type", {"window": 2.5}, "window=2.5 must be a positive int"),
        ("soft_cap", {"soft_cap": -1.0}, "soft_cap=-1.0 must be a positive finite number"),
        ("soft_cap inf", {"soft_cap": float("inf")}, "soft_cap=inf must be"),
        ("threads", {"threads": 0}, "threads"),
        ("backend", {"backend": "cuda"}, "backend"),
    ],
)
def test_bad_arguments(what: str, change: dict[str, Any], message: str) -> None:
    batch = make_batch(Shape((3,), (2,)), block_size=4, num_heads=4, num_kv_heads=2, head_size=16,
                       dtype=torch.float32, seed=2)
    md = batch.metadata
    edits = {
        "double": lambda t: t.double(), "half": lambda t: t.half(), "drop_head": lambda t: t[:, :3].contiguous(),
        "drop_token": lambda t: t[:1], "transpose": lambda t: t.transpose(1, 2).contiguous().transpose(1, 2),
        "int": lambda t: t.int(), "one_row": lambda t: t[:1],
    }
    kwargs: dict[str, Any] = dict(
        q=batch.q, k=batch.k, v=batch.v, kv_cache=batch.kv_cache.clone(), block_tables=md.block_tables,
        slot_mapping=md.slot_mapping, seq_lens=md.seq_lens, query_start_loc=md.query_start_loc,
        scale=batch.scale, tree_mask=torch.ones(2, 2, dtype=torch.bool),
    )
    for key, value in change.items():
        kwargs[key] = edits[value](kwargs[key]) if isinstance(value, str) and key not in ("backend",) else value
    with pytest.raises(KernelArgumentError, match=message):
        paged_attention(**kwargs)


def layout_of(batch: Batch) -> PagedLayout:
    md = batch.metadata
    return PagedLayout(block_tables=md.block_tables, slot_mapping=md.slot_mapping, seq_lens=md.seq_lens,
                       query_start_loc=md.query_start_loc, tree_mask=md.tree_mask)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_prepared_call_reads_each_bound_layout(backend: Backend) -> None:
    """One call on fixed buffers, bound to steps of different layouts (decode batch, prefill, tree),
    alone and inside a program: each run writes paged_attention's output and cache."""
    shapes = [(Shape((5, 16, 33, 9), (1, 1, 1, 1)), False), (Shape((6,), (4,)), False), (Shape((4,), (4,)), True)]
    config = dict(block_size=4, num_heads=8, num_kv_heads=2, head_size=64, dtype=torch.float32)
    batches = [make_batch(shape, seed=i, tree=tree, num_blocks=40, **config) for i, (shape, tree) in enumerate(shapes)]
    first = batches[0]
    q, k, v, cache = (torch.zeros_like(t) for t in (first.q, first.k, first.v, first.kv_cache))
    out, bound = torch.zeros_like(q), PagedBatch()
    call = prepare_paged_attention(q, k, v, out, cache, bound, scale=first.scale, window=3, soft_cap=2.0,
                                   backend=backend)
    program = Program([call])
    for index, batch in enumerate(batches * 2):
        batch = attrs.evolve(batch, sliding_windows=(3,), soft_cap=2.0)
        want, want_cache = run(batch, backend)
        for buffer, values in ((q, batch.q), (k, batch.k), (v, batch.v), (cache, batch.kv_cache)):
            buffer.copy_(values)
        bound.bind(layout_of(batch))
        if index < len(batches):
            run_prepared([call])
        else:
            program.run()
        assert torch.equal(out, want) and torch.equal(cache, want_cache), (index, backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_prepared_call_refuses_what_does_not_fit(backend: Backend) -> None:
    config = dict(block_size=4, num_heads=4, num_kv_heads=2, head_size=16, dtype=torch.float32)
    batch = make_batch(Shape((5, 3), (1, 1)), seed=0, num_blocks=8, **config)
    out, bound = torch.zeros_like(batch.q), PagedBatch()
    with pytest.raises(KernelArgumentError, match="out has shape"):
        prepare_paged_attention(batch.q, batch.k, batch.v, out[:1], batch.kv_cache, bound, scale=1.0, backend=backend)
    with pytest.raises(KernelArgumentError, match="shares memory"):
        prepare_paged_attention(batch.q, batch.k, batch.v, batch.q, batch.kv_cache, bound, scale=1.0, backend=backend)
    call = prepare_paged_attention(batch.q, batch.k, batch.v, out, batch.kv_cache, bound, scale=1.0, backend=backend)
    with pytest.raises(KernelArgumentError, match="no batch layout is bound"):
        run_prepared([call])
    bound.bind(layout_of(make_batch(Shape((5,), (1,)), seed=1, num_blocks=8, **config)))
    with pytest.raises(KernelArgumentError, match="has 1 new tokens, but this call was prepared for 2"):
        Program([call]).run()
    md = batch.metadata
    bad = attrs.evolve(md, block_tables=torch.full_like(md.block_tables, 99))
    bound.bind(layout_of(attrs.evolve(batch, metadata=bad)))
    cache = batch.kv_cache.clone()
    with pytest.raises(KernelArgumentError, match="block_tables row 0 names a block outside"):
        Program([call]).run()
    assert torch.equal(batch.kv_cache, cache), "a refused call wrote into the cache"
