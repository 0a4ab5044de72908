"""Chooses the grammar backend of each request, falls back when one refuses, compiles off the engine loop.

A request names a backend or ``"auto"``. ``"auto"`` walks the fallback order: the
:class:`StructuredConfig` order, else ``PYAGENT_GRAMMAR_FALLBACK_ORDER`` (comma-separated names),
else the selected grammar backend (``--grammar-backend`` / ``PYAGENT_GRAMMAR`` / config files)
followed by the other available ones by priority. A backend is skipped, with the reason
recorded, when its spec does not declare the constraint kind or grammar dialect, when it is not
available here or fails to start, when its ``supports()`` refuses, or when its ``compile()``
raises. The first backend that compiles serves the request. For a JSON schema, ``auto`` first
passes over the backends whose spec says they ignore or refuse a keyword the schema uses
(``ignored_keywords``, ``refused_keywords``, ``enforced_formats``); only when none of the others
serves does it try those, in order, and the report names the keywords the serving backend leaves
unenforced.

Compiled grammars are cached (LRU) by backend, options, constraint and tokenizer, so a repeated
constraint costs nothing and concurrent requests for the same one compile it once. Compilation
runs in a thread pool: :meth:`GrammarOrchestrator.submit` checks the input, returns a
:class:`CompileTicket` at once, and the engine polls the ticket each step; a ticket past its time
limit fails its request only (the worker thread itself cannot be interrupted and finishes in the
background; its result is still cached).
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import json
import threading
import time
from collections.abc import Hashable, Sequence
from functools import partial
from typing import Any

import attrs

from pyagent_core.errors import (
    ConstraintError,
    GrammarBackendError,
    GrammarTimeoutError,
    SelectionError,
    UnsatisfiableConstraintError,
    UnsupportedConstraintError,
)
from pyagent_core.interfaces.grammar import (
    UNKNOWN_GRAMMAR_BYTES,
    CompiledGrammar,
    ConstraintSpec,
    GrammarBackend,
    GrammarContext,
    TokenizerInfo,
)
from pyagent_core.interfaces.json_schema import keywords, subschemas
from pyagent_core.kinds import GRAMMAR
from pyagent_core.registry import Backend, Registry
from pyagent_core.types import GrammarSpec
from pyagent_engine.requests.structured_params import AUTO, StructuredOutputParams
from pyagent_engine.requests.structured_report import Skip
from pyagent_engine.structured.cache import LRUCache
from pyagent_engine.structured.checks import check_constraint, constraint_size

ORDER_ENV = "PYAGENT_GRAMMAR_FALLBACK_ORDER"
DEFAULT_CACHE_BYTES = 256 * 2**20
"""The compile cache's default bound: about 90 JSON-schema grammars of xgrammar over a 49k vocabulary."""


def _positive(_instance: object, attribute: attrs.Attribute[Any], value: float) -> None:
    if not value > 0:
        raise ConstraintError(f"{attribute.name} must be positive, got {value!r}")


def _names(value: Sequence[str] | str) -> tuple[str, ...]:
    items = value.split(",") if isinstance(value, str) else value
    return tuple(name.strip() for name in items if name.strip())


def tokenizer_fingerprint(info: TokenizerInfo) -> str:
    """A digest of everything in ``info``, so that caches key compiled grammars by tokenizer."""
    digest = hashlib.sha256()
    for token in info.vocab:
        digest.update(len(token).to_bytes(4, "little"))
        digest.update(token)
    digest.update(repr((info.eos_token_ids, info.special_token_ids, info.vocab_size)).encode())
    return digest.hexdigest()[:16]


@attrs.frozen(kw_only=True)
class StructuredConfig:
    """Engine-wide settings of structured output.

    Attributes:
        fallback_order: backend names ``"auto"`` walks, in order (empty: see the module doc).
        cache_bytes: the most bytes of compiled grammars kept (least recently used dropped first; 0 keeps
            none), as each grammar's :meth:`~pyagent_core.interfaces.grammar.CompiledGrammar.memory_bytes`
            counts them (:data:`~pyagent_core.interfaces.grammar.UNKNOWN_GRAMMAR_BYTES` when it cannot tell),
            plus the constraint's own size.
        compile_timeout_s: a request whose constraint is not compiled this long after submission fails.
        compile_threads: worker threads compiling constraints.
        max_constraint_bytes: larger constraints are refused before compiling.
        jump_forward: append a token without sampling where it is the only one the grammar allows.
    """

    fallback_order: tuple[str, ...] = attrs.field(default=(), converter=_names)
    cache_bytes: int = attrs.field(default=DEFAULT_CACHE_BYTES, validator=attrs.validators.ge(0))
    compile_timeout_s: float = attrs.field(default=30.0, validator=_positive)
    compile_threads: int = attrs.field(default=2, validator=_positive)
    max_constraint_bytes: int = attrs.field(default=64 * 1024, validator=_positive)
    jump_forward: bool = True


@attrs.frozen
class CompiledConstraint:
    """A constraint ready to serve: the compiled grammar, the backend that compiled it, what was skipped.

    Attributes:
        grammar: make each request's matcher with ``grammar.matcher()``.
        backend: name of the backend that compiled it.
        spec: that backend's spec record (``rollback``, ``jump_forward`` capabilities).
        skipped: backends tried before it, with their reasons.
        cache_hit: the grammar came from the cache.
        compile_s: seconds from the start of the walk to the compiled grammar.
        unenforced: keywords of the JSON schema the backend does not enforce (``format:NAME`` for a format).
    """

    grammar: CompiledGrammar
    backend: str
    spec: GrammarSpec
    skipped: tuple[Skip, ...]
    cache_hit: bool
    compile_s: float
    unenforced: tuple[str, ...] = ()


@attrs.frozen
class _Verdict:
    """What one backend made of one constraint (cached): a grammar, or why not; and the constraint's size."""

    grammar: CompiledGrammar | None
    reason: str | None = None
    unsatisfiable: bool = False
    constraint_bytes: int = 0

    def weight(self) -> int:
        """The bytes this verdict holds in the cache: the grammar's (its backend's count, else
        :data:`UNKNOWN_GRAMMAR_BYTES`) and the constraint's."""
        held = 0 if self.grammar is None else self.grammar.memory_bytes()
        return (UNKNOWN_GRAMMAR_BYTES if held is None else held) + self.constraint_bytes


class CompileTicket:
    """A constraint being compiled in the pool; :meth:`poll` until it is ready or has failed."""

    def __init__(self, future: concurrent.futures.Future[CompiledConstraint], constraint: ConstraintSpec,
                 timeout_s: float) -> None:
        self.future = future
        self.constraint = constraint
        self.timeout_s = timeout_s
        self.deadline = time.monotonic() + timeout_s

    def poll(self) -> CompiledConstraint | None:
        """The compiled constraint, ``None`` while compiling; raises the request's ConstraintError."""
        if self.future.done():
            return self.future.result()
        if time.monotonic() >= self.deadline:
            raise GrammarTimeoutError(
                f"compiling the {self.constraint.kind} constraint took more than {self.timeout_s:g} s; "
                "simplify the constraint or raise compile_timeout_s (--grammar-timeout)"
            )
        return None

    def result(self) -> CompiledConstraint:
        """Block until :meth:`poll` has an answer (or the time limit passes) and return it."""
        try:
            return self.future.result(timeout=max(0.0, self.deadline - time.monotonic()))
        except concurrent.futures.TimeoutError:
            result = self.poll()
            assert result is not None
            return result


def schema_keywords(constraint: ConstraintSpec) -> tuple[set[str], set[str]]:
    """The keywords a JSON schema constraint uses and the values of its ``format`` (empty otherwise)."""
    if constraint.json_schema is None:
        return set(), set()
    schema = json.loads(constraint.json_schema)
    formats = {s["format"] for s in subschemas(schema) if isinstance(s.get("format"), str)}
    return keywords(schema), formats


class GrammarOrchestrator:
    """Compiles requests' constraints for one tokenizer with the grammar backends of ``registry``.

    Args:
        registry: where grammar backends are found and selected.
        tokenizer_info: the tokenizer the bitmasks refer to.
        config: fallback order, cache, time and size limits, pool size.
    """

    def __init__(self, registry: Registry, tokenizer_info: TokenizerInfo,
                 config: StructuredConfig | None = None) -> None:
        self.registry = registry
        self.tokenizer_info = tokenizer_info
        self.config = config or StructuredConfig()
        self.fingerprint = tokenizer_fingerprint(tokenizer_info)
        self.cache: LRUCache[_Verdict] = LRUCache(self.config.cache_bytes, _Verdict.weight)
        self._instances: dict[str, GrammarBackend | str] = {}
        self._instance_lock = threading.Lock()
        self._build_locks: dict[str, threading.Lock] = {}
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None

    # --- which backends --------------------------------------------------------------------------

    def order(self) -> list[Backend[GrammarSpec]]:
        """The backends ``"auto"`` walks, in order (see the module doc)."""
        names = self.config.fallback_order or _names(self.registry.environ.get(ORDER_ENV, ""))
        if names:
            return [self._get(name) for name in names]
        available = sorted(self.registry.available(GRAMMAR), key=lambda b: (-b.spec.priority, b.name))
        if not available:
            raise GrammarBackendError(
                "no grammar backend is available, so constraints cannot be served; install one "
                "(pyagent-grammar-xgrammar, -guidance or -lmfe, not on PyPI: in a pyagent checkout, `make wheels`, "
                "then `pip install --find-links dist pyagent-grammar-xgrammar`) and see `pyagent list grammar`"
            )
        try:
            first = self.registry.select(GRAMMAR).backend
        except SelectionError as exc:
            raise GrammarBackendError(f"the configured grammar backend cannot be used: {exc}") from None
        return [first, *(b for b in available if b.qualified_name != first.qualified_name)]

    def chain(self, params: StructuredOutputParams) -> list[Backend[GrammarSpec]]:
        """The backends that may serve ``params``: the named one, or the order (its head without fallback)."""
        if params.backend != AUTO:
            return [self._get(params.backend)]
        order = self.order()
        return order if params.fallback else order[:1]

    def _get(self, name: str) -> Backend[GrammarSpec]:
        try:
            return self.registry.get(GRAMMAR, name)
        except SelectionError as exc:
            raise GrammarBackendError(str(exc)) from None

    # --- compiling -------------------------------------------------------------------------------

    def submit(self, params: StructuredOutputParams) -> CompileTicket:
        """Check the constraint now (raising its :class:`ConstraintError`) and compile it in the pool."""
        check_constraint(params.constraint, self.config.max_constraint_bytes)
        chain = self.chain(params)
        if self._pool is None:
            self._pool = concurrent.futures.ThreadPoolExecutor(self.config.compile_threads,
                                                               thread_name_prefix="pyagent-grammar")
        future = self._pool.submit(self.compile_chain, params.constraint, chain)
        return CompileTicket(future, params.constraint, self.config.compile_timeout_s)

    def compile(self, params: StructuredOutputParams) -> CompiledConstraint:
        """Check and compile ``params`` in the calling thread's wait (pool, time limit and cache apply)."""
        return self.submit(params).result()

    def compile_chain(self, constraint: ConstraintSpec, chain: Sequence[Backend[GrammarSpec]]) -> CompiledConstraint:
        """Walk ``chain`` until a backend compiles ``constraint``; raise when none does.

        With several backends, those that would leave a keyword of a JSON schema unenforced are
        tried last (see the module doc).
        """
        started = time.perf_counter()
        skipped: list[Skip] = []
        used, formats = schema_keywords(constraint)
        deferred: list[tuple[Backend[GrammarSpec], tuple[str, ...]]] = []
        for backend in chain:
            unenforced = backend.spec.unenforced(used, formats)
            if unenforced and len(chain) > 1:
                deferred.append((backend, unenforced))
                continue
            served = self._serve(backend, constraint, skipped, unenforced, started)
            if served is not None:
                passed = [Skip(b.name, f"does not enforce {', '.join(u)} of this schema; a backend that enforces "
                                       "every keyword was preferred") for b, u in deferred]
                return attrs.evolve(served, skipped=(*passed, *served.skipped))
        for backend, unenforced in deferred:
            served = self._serve(backend, constraint, skipped, unenforced, started)
            if served is not None:
                return served
        tried = "; ".join(f"{s.backend}: {s.reason}" for s in skipped)
        raise UnsupportedConstraintError(
            f"no grammar backend can serve this {constraint.kind} constraint ({tried}); "
            "simplify the constraint or install a backend that supports it (`pyagent list grammar`)"
        )

    def _serve(self, backend: Backend[GrammarSpec], constraint: ConstraintSpec, skipped: list[Skip],
               unenforced: tuple[str, ...], started: float) -> CompiledConstraint | None:
        """``backend``'s compiled constraint, or ``None`` with the reason appended to ``skipped``."""
        reason = self._static_refusal(backend.spec, constraint)
        if reason is None:
            verdict, hit = self.cache.get_or_compute(self._key(backend, constraint),
                                                     partial(self._compile_one, backend, constraint))
            if verdict.grammar is not None:
                return CompiledConstraint(verdict.grammar, backend.name, backend.spec, tuple(skipped), hit,
                                          time.perf_counter() - started, unenforced)
            if verdict.unsatisfiable:
                raise UnsatisfiableConstraintError(
                    f"the {constraint.kind} constraint admits no output (backend {backend.name!r} allows no "
                    "first token); check it for contradictions"
                )
            reason = verdict.reason
        skipped.append(Skip(backend.name, reason or "refused"))
        return None

    def _key(self, backend: Backend[GrammarSpec], constraint: ConstraintSpec) -> Hashable:
        options = tuple(sorted((k, repr(v)) for k, v in self._options(backend).items()))
        return backend.qualified_name, options, constraint, self.fingerprint

    def _options(self, backend: Backend[GrammarSpec]) -> dict[str, object]:
        try:
            return dict(self.registry.select(GRAMMAR, backend.qualified_name).options)
        except SelectionError:
            return {}

    def _static_refusal(self, spec: GrammarSpec, constraint: ConstraintSpec) -> str | None:
        if constraint.kind not in spec.constraint_kinds:
            return f"does not support {constraint.kind} constraints (supports {', '.join(spec.constraint_kinds)})"
        if constraint.kind == "grammar" and constraint.grammar_dialect not in spec.grammar_dialects:
            accepted = ", ".join(spec.grammar_dialects) or "none"
            return f"does not accept {constraint.grammar_dialect} grammars (accepts {accepted})"
        return None

    def _compile_one(self, backend: Backend[GrammarSpec], constraint: ConstraintSpec) -> _Verdict:
        size = constraint_size(constraint)
        instance = self.instance(backend)
        if isinstance(instance, str):
            return _Verdict(None, instance, constraint_bytes=size)
        try:
            reason = instance.supports(constraint)
            if reason is not None:
                return _Verdict(None, f"unsupported: {reason}", constraint_bytes=size)
            grammar = instance.compile(constraint)
            if not self._allows_a_first_token(grammar):
                return _Verdict(None, unsatisfiable=True, constraint_bytes=size)
        except Exception as exc:  # a backend's failure is a reason to fall back, never fatal
            return _Verdict(None, f"compile failed: {type(exc).__name__}: {exc}", constraint_bytes=size)
        return _Verdict(grammar, constraint_bytes=size)

    def _allows_a_first_token(self, grammar: CompiledGrammar) -> bool:
        from pyagent_core.interfaces.grammar import allocate_bitmask

        bitmask = allocate_bitmask(1, self.tokenizer_info.vocab_size)
        bitmask.zero_()
        grammar.matcher().fill_bitmask(bitmask, 0)
        return bool(bitmask.any())

    def instance(self, backend: Backend[GrammarSpec]) -> GrammarBackend | str:
        """The backend built for this tokenizer (once), or the reason it cannot be used here.

        Each backend is built under its own lock, so a slow one does not hold up the others.
        """
        key = backend.qualified_name
        with self._instance_lock:
            lock = self._build_locks.setdefault(key, threading.Lock())
        with lock:
            if key not in self._instances:
                self._instances[key] = self._build(backend)
            return self._instances[key]

    def _build(self, backend: Backend[GrammarSpec]) -> GrammarBackend | str:
        verdict = self.registry.availability(backend)
        if not verdict.available:
            return f"not available: {verdict.reason}"
        try:
            selection = self.registry.select(GRAMMAR, backend.qualified_name)
            context = GrammarContext(tokenizer_info=self.tokenizer_info)
            instance: GrammarBackend = self.registry.load(backend)(selection.options, context)
        except Exception as exc:  # a backend that cannot start is skipped, the others still serve
            return f"failed to start: {type(exc).__name__}: {exc}"
        return instance

    def close(self) -> None:
        """Stop the pool; compiles already running finish in the background."""
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
