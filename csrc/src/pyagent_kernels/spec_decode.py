"""Token indexes and drafting for model-free speculative proposers (prompt lookup, suffix decoding).

A :class:`TokenIndex` holds a request's history (prompt then output, appended to step by step) or a
bounded store of earlier sequences (oldest evicted first). In C, every position links to the
previous position of the same token, so appending costs O(1) and looking for earlier occurrences of
a context's end visits only the occurrences of its last token. A :class:`Drafter` keeps a
proposer's histories and store and, per request, appends its new tokens and builds its draft in
one C call that allocates nothing once warm, the draft coming back as the caller's own object
(``make_draft``: the proposers build their ``DraftTree`` directly); :func:`suffix_match` is the
stateless match. The semantics are in
``pyagent/spec_decode.h``; the pure-Python fallback (``backend="python"``) gives identical results.
Imports neither torch nor numpy.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Sequence
from typing import Any, Literal, Protocol

from pyagent_kernels import _extension
from pyagent_kernels._spec_decode_py import (
    NUM_BUCKETS,
    Calibration,
    Draft,
    DraftParams,
    MakeDraft,
    PyTokenIndex,
    match_py,
    propose_py,
)
from pyagent_kernels.errors import KernelArgumentError

__all__ = ["PRIOR_RATES", "Draft", "DraftParams", "Drafter", "MakeDraft", "RequestTokens", "TokenIndex",
           "draft_params", "suffix_match"]

PRIOR_RATES = (0.35, 0.49, 0.65, 0.72, 0.75, 0.78, 0.82, 0.85, 0.87, 0.88, 0.9, 0.93, 0.95, 0.96, 0.97, 0.97)
"""Prior chance that a drafted token is accepted when its parent was, per bucket of the match
length it extends (1..8, 9-10, 11-12, 13-16, 17-24, 25-32, 33-48, 49-64, more): greedy SmolLM2-135M
on the Spec-Bench categories and code editing. A :class:`Drafter` starts from these and learns."""

Backend = Literal["auto", "c", "python"]


def _int32_buffer(tokens: Sequence[int], name: str) -> array:
    if isinstance(tokens, array) and tokens.typecode == "i" and tokens.itemsize == 4:
        return tokens
    try:
        return array("i", tokens)
    except (TypeError, OverflowError) as exc:
        raise KernelArgumentError(f"{name} must be a sequence of int32 token ids ({exc})") from None


def _check(rc: int, kernel: str) -> None:
    if rc < 0:
        _, lib = _extension.require()
        if rc == lib.PAK_ENOMEM:
            raise MemoryError(f"{kernel}: out of memory; lower the store's capacity or the batch")
        _extension.check_status(rc, kernel)


class TokenIndex:
    """A token sequence indexed for suffix matching (see the module docstring).

    Args:
        capacity: 0 for a history (unbounded, :meth:`extend`), or the most tokens a store keeps
            (separators included; :meth:`add_sequence`).
        backend: "auto" (C if built, else Python with a one-time warning), "c" or "python".

    Raises:
        KernelArgumentError: a negative capacity or an unknown backend.
    """

    def __init__(self, capacity: int = 0, *, backend: Backend = "auto") -> None:
        if not (isinstance(capacity, int) and capacity >= 0):
            raise KernelArgumentError(f"TokenIndex: capacity must be an integer >= 0, got {capacity!r}")
        self.capacity = capacity
        self._c: Any = None
        self._py: PyTokenIndex | None = None
        if backend not in ("auto", "c", "python"):
            raise KernelArgumentError(f"TokenIndex: backend={backend!r} is not one of auto, c, python")
        if _extension.resolve("torch" if backend == "python" else backend, "TokenIndex") == "torch":
            self._py = PyTokenIndex(capacity)
            self.backend = "python"
            """``"c"`` or ``"python"``: the implementation behind this index."""
        else:
            self.backend = "c"
            ffi, lib = _extension.require()
            handle = lib.pak_token_index_new(capacity)
            if handle == ffi.NULL:
                raise MemoryError("TokenIndex: out of memory")
            self._c = ffi.gc(handle, lib.pak_token_index_free)

    def __len__(self) -> int:
        if self._py is not None:
            return len(self._py)
        return int(_extension.require()[1].pak_token_index_len(self._c))

    def extend(self, tokens: Sequence[int]) -> None:
        """Append ``tokens`` to a history.

        Raises:
            KernelArgumentError: this is a store, or a token does not fit int32.
        """
        if self.capacity:
            raise KernelArgumentError("TokenIndex.extend: this index is a store; use add_sequence")
        buffer = _int32_buffer(tokens, "tokens")
        if self._py is not None:
            self._py.extend(buffer)
            return
        if len(buffer):
            ffi, lib = _extension.require()
            _check(lib.pak_token_index_extend(self._c, ffi.from_buffer("int32_t[]", buffer), len(buffer)),
                   "TokenIndex.extend")

    def add_sequence(self, tokens: Sequence[int]) -> None:
        """Add one sequence (and its separator) to a store, evicting the oldest ones to fit.

        Raises:
            KernelArgumentError: this is a history, or a token does not fit int32.
        """
        if not self.capacity:
            raise KernelArgumentError("TokenIndex.add_sequence: this index is a history; use extend")
        buffer = _int32_buffer(tokens, "tokens")
        if self._py is not None:
            self._py.add_sequence(list(buffer))
        elif len(buffer):
            ffi, lib = _extension.require()
            _check(lib.pak_token_index_add_sequence(self._c, ffi.from_buffer("int32_t[]", buffer), len(buffer)),
                   "TokenIndex.add_sequence")

    def tokens(self, start: int = 0, stop: int | None = None) -> list[int]:
        """The live tokens ``[start, stop)`` (oldest live token at 0)."""
        length = len(self)
        stop = length if stop is None else min(stop, length)
        if self._py is not None:
            return self._py.tokens[start:stop]
        if stop <= start:
            return []
        ffi, lib = _extension.require()
        out = ffi.new("int32_t[]", stop - start)
        count = lib.pak_token_index_read(self._c, start, stop - start, out)
        _check(count, "TokenIndex.tokens")
        return ffi.unpack(out, count)

    def match(self, pattern: TokenIndex, *, min_len: int = 1, max_len: int = 64,
              max_hits: int = 1) -> tuple[int, list[int]]:
        """Where the longest suffix of ``pattern`` occurred in this index; see :func:`suffix_match`."""
        _check_bounds(min_len, max_len, max_hits, "TokenIndex.match")
        if self.backend != pattern.backend:
            raise KernelArgumentError("TokenIndex.match: both indexes must use the same backend")
        if self._py is not None:
            assert pattern._py is not None
            return match_py(self._py.tokens, pattern._py.tokens, min_len, max_len, max_hits)
        ffi, lib = _extension.require()
        hits = ffi.new("int64_t[]", max_hits)
        match_len = ffi.new("int64_t *")
        count = lib.pak_token_index_match(self._c, pattern._c, min_len, max_len, max_hits, hits, match_len)
        _check(count, "TokenIndex.match")
        return int(match_len[0]), [int(hits[i]) for i in range(count)]


def _check_bounds(min_len: object, max_len: object, max_hits: object, where: str) -> None:
    if not (isinstance(min_len, int) and min_len >= 1):
        raise KernelArgumentError(f"{where}: min_len must be an integer >= 1, got {min_len!r}")
    if not (isinstance(max_len, int) and max_len >= min_len):
        raise KernelArgumentError(f"{where}: max_len must be an integer >= min_len ({min_len}), got {max_len!r}")
    if not (isinstance(max_hits, int) and max_hits >= 1):
        raise KernelArgumentError(f"{where}: max_hits must be an integer >= 1, got {max_hits!r}")


def suffix_match(
    text: Sequence[int],
    pattern: Sequence[int],
    *,
    min_len: int = 1,
    max_len: int = 64,
    max_hits: int = 1,
    backend: Backend = "auto",
) -> tuple[int, list[int]]:
    """Where the longest suffix of ``pattern`` occurred in ``text`` followed by another token.

    Looks for the largest ``m`` in ``[min_len, max_len]`` such that the last ``m`` tokens of
    ``pattern`` equal ``text[e - m:e]`` for some ``1 <= e <= len(text) - 1`` (so ``text[e]``, the
    first token of the continuation, exists). Passing the same sequence as ``text`` and
    ``pattern`` searches a history for earlier occurrences of its own end. Negative ids never match
    (use -1 to separate concatenated sequences). Builds throwaway indexes: a proposer keeps
    :class:`TokenIndex` objects instead.

    Returns:
        ``(match_len, hits)``: the match length (0 when nothing matched) and up to ``max_hits``
        end positions ``e`` of matches of that length, most recent first.

    Raises:
        KernelArgumentError: a length bound is out of range or a token does not fit int32.
    """
    _check_bounds(min_len, max_len, max_hits, "suffix_match")
    text_index = TokenIndex(backend=backend)
    text_index.extend(text)
    pattern_index = text_index
    if pattern is not text:
        pattern_index = TokenIndex(backend=backend)
        pattern_index.extend(pattern)
    return text_index.match(pattern_index, min_len=min_len, max_len=max_len, max_hits=max_hits)


def draft_params(*, min_len: int, max_len: int, max_hits: int, spec_factor: float = 1.0, min_prob: float = 0.0,
                 tree: bool = False, cap_by_match: bool = False) -> DraftParams:
    """Checked :class:`DraftParams` (see ``pyagent/spec_decode.h`` for each field).

    Raises:
        KernelArgumentError: a bound is out of range, ``min_prob`` is outside [0, 1] or
            ``spec_factor`` is negative.
    """
    _check_bounds(min_len, max_len, max_hits, "draft_params")
    if not (isinstance(min_prob, int | float) and 0.0 <= min_prob <= 1.0):
        raise KernelArgumentError(f"draft_params: min_prob must be in [0, 1], got {min_prob!r}")
    if not (isinstance(spec_factor, int | float) and spec_factor >= 0.0 and not math.isnan(spec_factor)):
        raise KernelArgumentError(f"draft_params: spec_factor must be >= 0, got {spec_factor!r}")
    return DraftParams(min_len, max_len, max_hits, float(spec_factor), float(min_prob), bool(tree),
                       bool(cap_by_match))


class RequestTokens(Protocol):
    """What :meth:`Drafter.propose` reads of a request (``pyagent_core``'s ``ProposerRequest`` fits)."""

    @property
    def request_id(self) -> str:
        """The request's id."""

    @property
    def prompt_token_ids(self) -> Sequence[int]:
        """The prompt's token ids."""

    @property
    def output_token_ids(self) -> Sequence[int]:
        """The output's token ids so far."""


class _History:
    """A request's index (and its C handle or Python state), its prompt length, and how many of its
    output tokens the index holds after the whole prompt."""

    __slots__ = ("handle", "index", "prompt_length", "taken")

    def __init__(self, index: TokenIndex, prompt_length: int) -> None:
        self.index = index
        self.handle: Any = index._py if index._c is None else index._c
        self.prompt_length = prompt_length
        self.taken = 0


class Drafter:
    """A proposer's drafting state: every request's history, a store of finished outputs, the
    calibration of scores, and the drafting itself.

    :meth:`propose` appends the tokens each request gained since the previous call to its history
    (O(new tokens): nothing is rebuilt or rescanned), matches the history against itself and, when
    the store holds tokens, against the store (the longer match wins, the history on a tie), counts
    the winning hits' continuations into a trie and returns its best part, scored with the
    probability that each node is accepted (``pyagent/spec_decode.h`` has the exact rules). The C
    path reuses its buffers, so a drafter serves one caller at a time.

    Args:
        params: from :func:`draft_params`.
        store_capacity: tokens of finished outputs kept for matching (0: no store).
        backend: "auto" (C if built, else Python with a one-time warning), "c" or "python".
        prior_rates: each bucket's prior acceptance rate (default :data:`PRIOR_RATES`).
        prior_weight: how many observations the prior is worth per bucket.
        make_draft: builds each draft from its tokens, parents and scores (tuples that already
            satisfy a draft tree's rules); default :class:`Draft`.

    Raises:
        KernelArgumentError: a negative store capacity, a bad backend or bad priors.
    """

    def __init__(self, params: DraftParams, *, store_capacity: int = 0, backend: Backend = "auto",
                 prior_rates: Sequence[float] = PRIOR_RATES, prior_weight: float = 4.0,
                 make_draft: MakeDraft = Draft) -> None:
        if len(prior_rates) != NUM_BUCKETS or not all(0.0 <= r <= 1.0 for r in prior_rates):
            raise KernelArgumentError(f"Drafter: prior_rates must be {NUM_BUCKETS} probabilities, got {prior_rates!r}")
        if not prior_weight > 0:
            raise KernelArgumentError(f"Drafter: prior_weight must be > 0, got {prior_weight!r}")
        self.params = params
        self.backend = backend
        self.store = TokenIndex(store_capacity, backend=backend) if store_capacity else None
        """Finished outputs (a :class:`TokenIndex` with a capacity), or ``None``."""
        self.calibration = Calibration([prior_weight * r for r in prior_rates], [float(prior_weight)] * NUM_BUCKETS)
        """Acceptance counts per bucket (the C path keeps its own copy: read :meth:`rates`)."""
        self._make = make_draft
        self._histories: dict[str, _History] = {}
        self._c: tuple[Any, ...] | None = None
        self._room = 0
        if TokenIndex(backend=backend).backend == "c":
            ffi, lib = _extension.require()
            scratch = lib.pak_draft_scratch_new()
            if scratch == ffi.NULL:
                raise MemoryError("Drafter: out of memory")
            self._c = (lib.pak_propose_draft, ffi.NULL if self.store is None else self.store._c,
                       ffi.new("pak_draft_params *", params._asdict()),
                       ffi.new("pak_draft_calibration *", {"accepted": self.calibration.accepted,
                                                           "tried": self.calibration.tried}),
                       ffi.gc(scratch, lib.pak_draft_scratch_free), ffi.unpack)
            self._grow(16)

    def _grow(self, room: int) -> None:
        """Output buffers for drafts of up to ``room`` nodes."""
        ffi, _ = _extension.require()
        self._room = room
        self._out = (ffi.new("int32_t[]", room), ffi.new("int32_t[]", room), ffi.new("double[]", room))

    def rates(self) -> list[float]:
        """The current estimate of each bucket's acceptance rate (accepted / tried)."""
        if self._c is not None:
            self.calibration = Calibration(list(self._c[3].accepted), list(self._c[3].tried))
        return [a / t for a, t in zip(self.calibration.accepted, self.calibration.tried, strict=True)]

    def history(self, request_id: str) -> TokenIndex | None:
        """The request's history index (``None`` before its first draft or after :meth:`finish`)."""
        entry = self._histories.get(request_id)
        return None if entry is None else entry.index

    def __len__(self) -> int:
        return len(self._histories)

    def finish(self, request_id: str) -> None:
        """Forget a request; its output (the history past its prompt) goes into the store."""
        entry = self._histories.pop(request_id, None)
        if entry is not None and self.store is not None:
            self.store.add_sequence(entry.index.tokens(entry.prompt_length))

    def propose(self, requests: Sequence[RequestTokens], limit: int) -> list[Any]:
        """Bring every request's history up to date, then draft at most ``limit`` nodes for each.

        A request seen for the first time, or whose output shrank, starts a new history.

        Returns:
            One draft (built by ``make_draft``) per request, or ``None`` where nothing matched or
            no node qualified.

        Raises:
            KernelArgumentError: a token does not fit int32.
        """
        histories, make, c = self._histories, self._make, self._c
        if c is not None:
            if limit > self._room:
                self._grow(limit)
            propose_draft, store, c_params, c_calibration, scratch, unpack = c
            tokens, parents, scores = self._out
        drafts = []
        for request in requests:
            output = request.output_token_ids
            size = len(output)
            entry = histories.get(request.request_id)
            if entry is None or entry.taken > size:
                entry = histories[request.request_id] = _History(TokenIndex(backend=self.backend),
                                                                 len(request.prompt_token_ids))
                new = [*request.prompt_token_ids, *output]
            else:
                new = output[entry.taken:]
            try:
                if c is None:
                    drafts.append(propose_py(entry.handle, array("i", new), limit, self.params,
                                             None if self.store is None else self.store._py, self.calibration, make))
                    entry.taken = size
                    continue
                count = propose_draft(entry.handle, new if type(new) is list else list(new), len(new), store,
                                      c_params, c_calibration, limit, scratch, tokens, parents, scores)
            except (TypeError, OverflowError) as exc:
                self._resynchronise(request.request_id, entry)
                raise KernelArgumentError(f"Drafter.propose: tokens must be int32 token ids ({exc})") from None
            if count < 0:
                self._resynchronise(request.request_id, entry)
                _check(count, "Drafter.propose")
            entry.taken = size
            drafts.append(make(tuple(unpack(tokens, count)), tuple(unpack(parents, count)),
                               tuple(unpack(scores, count))) if count else None)
        return drafts

    def _resynchronise(self, request_id: str, entry: _History) -> None:
        """After a failed call: count what the index holds (it may have taken the new tokens); a
        request whose prompt is not all in starts over."""
        held = len(entry.index) - entry.prompt_length
        if held < 0:
            del self._histories[request_id]
        entry.taken = held
