"""Token indexes and drafting: C and the Python fallback against brute-force oracles, and bad arguments."""

from __future__ import annotations

from array import array
from typing import Any, NamedTuple

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pyagent_kernels
from pyagent_kernels.errors import KernelArgumentError
from pyagent_kernels.spec_decode import (
    Draft,
    Drafter,
    DraftParams,
    TokenIndex,
    draft_params,
    suffix_match,
)

needs_c = pytest.mark.skipif(not pyagent_kernels.status()["compiled"], reason="C extension not built")
BACKENDS = [pytest.param("c", marks=needs_c), "python"]
tokens = st.lists(st.integers(-1, 3), min_size=0, max_size=60)
words = st.lists(st.integers(0, 3), min_size=1, max_size=12)


def oracle(text: list[int], pattern: list[int], min_len: int, max_len: int, max_hits: int) -> tuple[int, list[int]]:
    """Longest m whose pattern suffix ends at some e < len(text); hits by descending e (slices only)."""
    for m in range(min(max_len, len(pattern)), min_len - 1, -1):
        suffix = pattern[len(pattern) - m:]
        if any(t < 0 for t in suffix):
            continue
        hits = [e for e in range(len(text) - 1, m - 1, -1) if text[e - m:e] == suffix]
        if hits:
            return m, hits[:max_hits]
    return 0, []


def store_oracle(sequences: list[list[int]], capacity: int) -> list[int]:
    """The live tokens of a store: the newest whole sequences (each cut to its last capacity - 1
    tokens, plus a -1) that fit, evicting from the oldest, replayed one sequence at a time."""
    kept: list[list[int]] = []
    for sequence in sequences:
        if capacity < 2 or not sequence:
            continue
        entry = [*sequence[-(capacity - 1):], -1]
        while kept and sum(map(len, kept)) + len(entry) > capacity:
            kept.pop(0)
        kept.append(entry)
    return [t for entry in kept for t in entry]


class Request(NamedTuple):
    """What a drafter reads of a request."""

    request_id: str
    prompt_token_ids: list[int]
    output_token_ids: list[int]


BUCKET_UPPER = (1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 16, 24, 32, 48, 64)


def bucket_oracle(length: int) -> int:
    """The first bucket whose upper bound holds ``length`` (the last one holds everything longer)."""
    return next((b for b, upper in enumerate(BUCKET_UPPER) if length <= upper), len(BUCKET_UPPER))


class OracleRequest:
    """A request's tokens and its last draft as prefixes: {prefix: (draft index, bucket, share)}."""

    def __init__(self, tokens: list[int]) -> None:
        self.tokens = tokens
        self.draft: dict[tuple[int, ...], tuple[int, int, float]] = {}
        self.draft_at = 0


def calibrate_oracle(request: OracleRequest, accepted: list[float], tried: list[float]) -> None:
    """Walk the last draft with the tokens that followed it (children in draft order)."""
    path: tuple[int, ...] = ()
    for token in request.tokens[request.draft_at:] if request.draft else ():
        children = sorted((i, p) for p, (i, _, _) in request.draft.items() if p[:-1] == path)
        for _, child in children:
            tried[request.draft[child][1]] += request.draft[child][2]
        if (*path, token) not in request.draft:
            break
        path = (*path, token)
        accepted[request.draft[path][1]] += 1.0
    request.draft = {}


def draft_oracle(request: OracleRequest, text: list[int], hits: list[int], budget: int, params: DraftParams,
                 match_len: int, accepted: list[float], tried: list[float]) -> Draft | None:
    """The draft from its definition (``pyagent/spec_decode.h``), over distinct continuation prefixes:
    a prefix is numbered when first seen (hits newest first, shorter first) and counted by how many
    continuations start with it."""
    continuations: list[tuple[int, ...]] = []
    for e in hits:
        cut = [i for i, token in enumerate(text[e:e + budget]) if token < 0]
        continuations.append(tuple(text[e:e + (cut[0] if cut else budget)]))
    number: dict[tuple[int, ...], int] = {}
    for continuation in continuations:
        for k in range(1, len(continuation) + 1):
            number.setdefault(continuation[:k], len(number))
    count = {p: sum(c[:len(p)] == p for c in continuations) for p in number}
    share: dict[tuple[int, ...], float] = {}
    bucket: dict[tuple[int, ...], int] = {}
    score: dict[tuple[int, ...], float] = {}
    chosen: list[tuple[int, ...]] = []
    for p in sorted(number, key=number.__getitem__):
        share[p] = count[p] / float(count[p[:-1]] if len(p) > 1 else len(hits))
        bucket[p] = bucket_oracle(match_len + len(p) - 1)
        chance = share[p] * (accepted[bucket[p]] / tried[bucket[p]])
        score[p] = (score[p[:-1]] if len(p) > 1 else 1.0) * min(chance, 1.0)
    threshold = params.min_prob * len(hits)
    if params.tree:
        ranked = sorted((p for p in number if count[p] >= threshold), key=lambda p: (-score[p], len(p), number[p]))
        chosen = sorted(ranked[:budget], key=number.__getitem__)
    else:
        current: tuple[int, ...] = ()
        while len(chosen) < budget:
            children = [p for p in number if len(p) == len(current) + 1 and p[:-1] == current]
            if not children:
                break
            best = max(children, key=lambda p: (count[p], -number[p]))
            if count[best] < threshold:
                break
            chosen.append(best)
            current = best
    request.draft = {p: (i, bucket[p], share[p]) for i, p in enumerate(chosen)}
    request.draft_at = len(request.tokens)
    if not chosen:
        return None
    where = {p: i for i, p in enumerate(chosen)}
    return Draft(tuple(p[-1] for p in chosen), tuple(where[p[:-1]] if len(p) > 1 else -1 for p in chosen),
                 tuple(score[p] for p in chosen))


def propose_oracle(request: OracleRequest, store: list[int], limit: int, params: DraftParams,
                   accepted: list[float], tried: list[float]) -> Draft | None:
    """One request's step: calibrate with its last draft, then draft from its own match, or the
    store's when strictly longer."""
    calibrate_oracle(request, accepted, tried)
    history = request.tokens
    length, hits = oracle(history, history, params.min_len, params.max_len, params.max_hits)
    text = history
    if store:
        store_length, store_hits = oracle(store, history, params.min_len, params.max_len, params.max_hits)
        if store_length > length:
            length, hits, text = store_length, store_hits, store
    if not hits or limit <= 0:
        return None
    budget = min(limit, -int(-params.spec_factor * length // 1)) if params.cap_by_match else limit
    return draft_oracle(request, text, hits, budget, params, length, accepted, tried) if budget > 0 else None


@settings(max_examples=150, deadline=None)
@given(text=tokens, pattern=tokens, min_len=st.integers(1, 4), extra=st.integers(0, 5), max_hits=st.integers(1, 4),
       same=st.booleans())
def test_python_matches_oracle(text: list[int], pattern: list[int], min_len: int, extra: int, max_hits: int,
                               same: bool) -> None:
    pattern = text if same else pattern
    expected = oracle(text, pattern, min_len, min_len + extra, max_hits)
    assert suffix_match(text, pattern, min_len=min_len, max_len=min_len + extra, max_hits=max_hits,
                        backend="python") == expected


@needs_c
@settings(max_examples=150, deadline=None)
@given(text=tokens, pattern=tokens, min_len=st.integers(1, 4), extra=st.integers(0, 5), max_hits=st.integers(1, 4),
       same=st.booleans())
def test_c_matches_python(text: list[int], pattern: list[int], min_len: int, extra: int, max_hits: int,
                          same: bool) -> None:
    pattern = text if same else pattern
    args = {"min_len": min_len, "max_len": min_len + extra, "max_hits": max_hits}
    assert suffix_match(array("i", text), array("i", pattern), backend="c", **args) == suffix_match(
        text, pattern, backend="python", **args)


@pytest.mark.parametrize("backend", BACKENDS)
@settings(max_examples=80, deadline=None)
@given(chunks=st.lists(tokens, min_size=1, max_size=6), min_len=st.integers(1, 3), max_hits=st.integers(1, 4))
def test_appended_history_matches_like_a_fresh_scan(backend: Any, chunks: list[list[int]], min_len: int,
                                                    max_hits: int) -> None:
    history = TokenIndex(backend=backend)
    seen: list[int] = []
    for chunk in chunks:
        history.extend(chunk)
        seen += chunk
        assert len(history) == len(seen) and history.tokens() == seen
        assert history.match(history, min_len=min_len, max_len=min_len + 4, max_hits=max_hits) == oracle(
            seen, seen, min_len, min_len + 4, max_hits)


@pytest.mark.parametrize("backend", BACKENDS)
@settings(max_examples=80, deadline=None)
@given(sequences=st.lists(st.lists(st.integers(0, 3), max_size=9), max_size=12), capacity=st.integers(1, 20),
       pattern=st.lists(st.integers(0, 3), min_size=1, max_size=8))
def test_store_keeps_the_newest_sequences_and_matches_them(backend: Any, sequences: list[list[int]], capacity: int,
                                                          pattern: list[int]) -> None:
    store = TokenIndex(capacity, backend=backend)
    query = TokenIndex(backend=backend)
    query.extend(pattern)
    for i, sequence in enumerate(sequences):
        store.add_sequence(sequence)
        live = store_oracle(sequences[:i + 1], capacity)
        assert store.tokens() == live and len(store) <= capacity
        assert store.match(query, min_len=1, max_len=6, max_hits=3) == oracle(live, pattern, 1, 6, 3)


params_strategy = st.builds(
    lambda min_len, extra, max_hits, spec_factor, min_prob, tree, cap: draft_params(
        min_len=min_len, max_len=min_len + extra, max_hits=max_hits, spec_factor=spec_factor, min_prob=min_prob,
        tree=tree, cap_by_match=cap),
    st.integers(1, 3), st.integers(0, 6), st.integers(1, 6), st.sampled_from([0.0, 0.5, 1.0, 2.5]),
    st.sampled_from([0.0, 0.2, 0.5, 1.0]), st.booleans(), st.booleans())


@pytest.mark.parametrize("backend", BACKENDS)
@settings(max_examples=120, deadline=None)
@given(prompts=st.lists(words, min_size=1, max_size=3), steps=st.lists(st.lists(words, min_size=3, max_size=3),
       max_size=4), earlier=st.lists(words, max_size=4), capacity=st.integers(0, 30),
       limits=st.lists(st.integers(0, 7), min_size=3, max_size=3), params=params_strategy,
       priors=st.lists(st.sampled_from([0.1, 0.5, 0.9, 1.0]), min_size=16, max_size=16))
def test_drafts_match_the_brute_force_oracle(backend: Any, prompts: list[list[int]], steps: list[list[list[int]]],
                                             earlier: list[list[int]], capacity: int, limits: list[int],
                                             params: DraftParams, priors: list[float]) -> None:
    drafter = Drafter(params, store_capacity=capacity, backend=backend, prior_rates=priors, prior_weight=2.0)
    for i, sequence in enumerate(earlier):  # earlier requests: prompt [0], the sequence as output
        drafter.propose([Request(f"old{i}", [0], sequence)], 0)
        drafter.finish(f"old{i}")
    live = store_oracle(earlier, capacity) if capacity else []
    assert (drafter.store.tokens() if drafter.store is not None else []) == live
    accepted, tried = [2.0 * r for r in priors], [2.0] * 16
    views = [Request(f"r{i}", list(p), []) for i, p in enumerate(prompts)]
    oracles = [OracleRequest(list(p)) for p in prompts]
    for step in [None, *steps]:
        for view, oracle_request, new in zip(views, oracles, step or [[]] * len(views), strict=False):
            view.output_token_ids.extend(new)
            oracle_request.tokens += new
        for view, oracle_request, limit in zip(views, oracles, limits, strict=False):  # one at a time: own limits
            (draft,) = drafter.propose([view], limit)
            assert draft == propose_oracle(oracle_request, live, limit, params, accepted, tried)
        assert drafter.rates() == [a / t for a, t in zip(accepted, tried, strict=True)]
    for view in views:
        index = drafter.history(view.request_id)
        assert index is not None and index.tokens() == view.prompt_token_ids + view.output_token_ids


def test_self_match_excludes_the_trivial_occurrence() -> None:
    history = array("i", [5, 6, 7])
    assert suffix_match(history, history, backend="python") == (0, [])
    history = array("i", [5, 6, 7, 5, 6])
    assert suffix_match(history, history, max_hits=3) == (2, [2])


@pytest.mark.parametrize(("kwargs", "word"), [
    ({"min_len": 0}, "min_len"), ({"min_len": 3, "max_len": 2}, "max_len"), ({"max_hits": 0}, "max_hits"),
])
def test_bad_bounds_raise(kwargs: dict[str, Any], word: str) -> None:
    with pytest.raises(KernelArgumentError, match=word):
        suffix_match([1, 2], [1, 2], **kwargs)


@pytest.mark.parametrize(("kwargs", "word"), [
    ({"min_prob": 1.5}, "min_prob"), ({"spec_factor": -1.0}, "spec_factor"), ({"spec_factor": float("nan")},
                                                                              "spec_factor"),
])
def test_bad_draft_params_raise(kwargs: dict[str, Any], word: str) -> None:
    with pytest.raises(KernelArgumentError, match=word):
        draft_params(min_len=1, max_len=4, max_hits=2, **kwargs)


@pytest.mark.parametrize("backend", BACKENDS)
def test_misused_indexes_raise(backend: Any) -> None:
    history, store = TokenIndex(backend=backend), TokenIndex(8, backend=backend)
    params = draft_params(min_len=1, max_len=4, max_hits=2)
    with pytest.raises(KernelArgumentError, match="store"):
        store.extend([1])
    with pytest.raises(KernelArgumentError, match="history"):
        history.add_sequence([1])
    with pytest.raises(KernelArgumentError, match="same backend"):
        history.match(TokenIndex(backend="python" if backend == "c" else "c"))
    with pytest.raises(KernelArgumentError, match="capacity"):
        TokenIndex(-1, backend=backend)
    with pytest.raises(KernelArgumentError, match="capacity"):
        Drafter(params, store_capacity=-1, backend=backend)
    with pytest.raises(KernelArgumentError, match="prior_rates"):
        Drafter(params, backend=backend, prior_rates=[0.5] * 3)
    with pytest.raises(KernelArgumentError, match="prior_weight"):
        Drafter(params, backend=backend, prior_weight=0.0)


def test_token_outside_int32_raises() -> None:
    with pytest.raises(KernelArgumentError, match="int32"):
        suffix_match([2**40, 1], [1], backend="python")
    with pytest.raises(KernelArgumentError, match="int32"):
        Drafter(draft_params(min_len=1, max_len=2, max_hits=1)).propose([Request("r", [2**40], [])], 1)


@pytest.mark.parametrize("backend", BACKENDS)
def test_drafter_appends_only_new_tokens_and_restarts_shrunk_requests(backend: Any) -> None:
    drafter = Drafter(draft_params(min_len=1, max_len=4, max_hits=2), backend=backend)
    request = Request("a", [1, 2], [])
    drafter.propose([request], 2)
    index = drafter.history("a")
    request.output_token_ids.extend([3, 4])
    drafter.propose([request], 2)
    assert drafter.history("a") is index and index is not None and index.tokens() == [1, 2, 3, 4]
    drafter.propose([Request("a", [1, 2], [3])], 2)  # fewer tokens than held: a new history
    fresh = drafter.history("a")
    assert fresh is not index and fresh is not None and fresh.tokens() == [1, 2, 3]
    drafter.finish("a")
    assert drafter.history("a") is None and len(drafter) == 0


@pytest.mark.parametrize("backend", BACKENDS)
@settings(max_examples=60, deadline=None)
@given(prompts=st.lists(words, min_size=2, max_size=4), steps=st.lists(st.lists(words, min_size=4, max_size=4),
       max_size=4), limit=st.integers(0, 6), params=params_strategy)
def test_a_batch_drafts_as_its_requests_do_alone(backend: Any, prompts: list[list[int]],
                                                 steps: list[list[list[int]]], limit: int,
                                                 params: DraftParams) -> None:
    def make(tokens: tuple[int, ...], parents: tuple[int, ...], scores: tuple[float, ...]) -> tuple[Any, ...]:
        return "made", tokens, parents, scores

    batched = Drafter(params, backend=backend, make_draft=make)
    alone = Drafter(params, backend=backend)  # the same requests, one call each: the same calibration updates
    views = [Request(f"r{i}", list(p), []) for i, p in enumerate(prompts)]
    for step in [None, *steps]:
        for view, new in zip(views, step or [[]] * len(views), strict=False):
            view.output_token_ids.extend(new)
        expected = [alone.propose([view], limit)[0] for view in views]
        assert batched.propose(views, limit) == [None if d is None else ("made", *d) for d in expected]


@pytest.mark.parametrize("backend", BACKENDS)
def test_history_follows_shrunk_outputs_and_failed_calls(backend: Any) -> None:
    drafter = Drafter(draft_params(min_len=1, max_len=4, max_hits=2), backend=backend)
    request = Request("r", [1, 2, 3], [1, 2])
    drafter.propose([request], 2)
    request.output_token_ids[:] = [4]  # shrunk: the history starts over
    drafter.propose([request], 2)
    assert drafter.history("r").tokens() == [1, 2, 3, 4]  # type: ignore[union-attr]
    request.output_token_ids.extend([2**40, 5])
    with pytest.raises(KernelArgumentError, match="int32"):
        drafter.propose([request], 2)
    request.output_token_ids[1] = 6
    drafter.propose([request], 2)
    assert drafter.history("r").tokens() == [1, 2, 3, 4, 6, 5]  # type: ignore[union-attr]
    fresh = Request("new", [2**40], [])  # its prompt never got in: it starts over
    with pytest.raises(KernelArgumentError, match="int32"):
        drafter.propose([fresh], 2)
    fresh.prompt_token_ids[0] = 7
    drafter.propose([fresh], 2)
    assert drafter.history("new").tokens() == [7]  # type: ignore[union-attr]
