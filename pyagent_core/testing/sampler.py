"""Conformance kit for samplers: batch-level logits processors and token selectors.

A plugin's tests subclass :class:`SamplerConformance` once per sampler::

    from pyagent_core.testing.sampler import SamplerConformance

    class TestTopK(SamplerConformance):
        impl = TopKProcessor
        spec = TOP_K_SPEC                          # the record the plugin registers
        request_params = ({"top_k": 5}, {"top_k": 1000})
        disabled_params = ({"top_k": 0},)
        invalid_request_params = ({"top_k": -1},)

Every per-request parameter the spec declares (an option with ``request=True``) must be accepted at
its default. Processors (``spec.selects_token`` false) are checked for shape, dtype, NaN, a finite logit left in
every row, rows left unchanged where their parameters disable the processor, and argmax invariance as
the spec declares it; a processor that implements
:class:`~pyagent_core.interfaces.sampler.FusableMaskStep` is checked to give, through its own
``apply``, the fused-mask step it declares (:func:`mask_step_reference`) for its ``row_values()``.
Selectors are checked for ``int64 [num_rows]`` token ids within the vocabulary
whose logits are finite. Both are checked for batch bookkeeping (a request's result does not depend
on its row or on the other requests, through additions, removals, moves and swaps), an empty batch,
and a ``ValueError`` for malformed logits or invalid per-request parameters.

Inputs are random logits with ties, ``-inf`` entries, rows with a single finite logit and large
magnitudes, generated from fixed seeds so every run checks the same cases.
"""

from __future__ import annotations

import functools
import math
import random
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

import attrs
import pytest
import torch

from pyagent_core.interfaces.sampler import (
    MASK_STEPS,
    AddedRequest,
    BatchUpdate,
    FusableMaskStep,
    LogitsProcessor,
    MovedRequest,
    MoveKind,
    Sampler,
    SamplerContext,
    TokenSelector,
)
from pyagent_core.testing.base import BackendConformance
from pyagent_core.types import SamplerSpec

ROW_PATTERNS = ("spread", "ties", "masked", "one_finite", "large")
SCENARIO_STEPS = 6
QUIET_STEP = 3  # the step at which nothing changes and update_state receives None


def make_row(vocab_size: int, seed: int, pattern: str) -> torch.Tensor:
    """A ``float32`` logits row of one of :data:`ROW_PATTERNS`, always with a finite logit.

    ``spread``: normal values with standard deviation 3; ``ties``: integers in [-2, 2], so many
    equal logits; ``masked``: about 30% ``-inf``; ``one_finite``: a single finite logit; ``large``:
    standard deviation 3000.
    """
    generator = torch.Generator().manual_seed(seed)
    if pattern == "ties":
        return torch.randint(-2, 3, (vocab_size,), generator=generator).float()
    row = torch.randn(vocab_size, generator=generator) * 3
    if pattern == "large":
        return row * 1000
    if pattern in ("masked", "one_finite"):
        keep = int(torch.randint(vocab_size, (1,), generator=generator))
        share = 0.3 if pattern == "masked" else 1.0
        mask = torch.rand(vocab_size, generator=generator) < share
        mask[keep] = False
        row[mask] = float("-inf")
    return row


def make_logits(vocab_size: int, num_rows: int, seed: int) -> torch.Tensor:
    """``float32 [num_rows, vocab_size]`` logits; row ``r`` has pattern ``ROW_PATTERNS[r % 5]``."""
    rows = [
        make_row(vocab_size, seed * 1000 + row, ROW_PATTERNS[row % len(ROW_PATTERNS)])
        for row in range(num_rows)
    ]
    return torch.stack(rows) if rows else torch.empty(0, vocab_size)


def expect_value_error(action: Callable[[], object], what: str) -> ValueError:
    """Run ``action`` and return the ``ValueError`` it raises; fail if it raises nothing or another error."""
    try:
        action()
    except ValueError as error:
        return error
    except Exception as error:
        raise AssertionError(
            f"{what}: raised {type(error).__name__} ({error}); expected a ValueError subclass"
        ) from error
    raise AssertionError(f"{what}: nothing was raised; expected a ValueError")


@attrs.define
class ScenarioRequest:
    """A request of the batch-bookkeeping scenario: its params, when it joins, and its logits."""

    key: int
    params: Mapping[str, Any]
    tracked: bool
    joins: int
    outputs: list[int] = attrs.field(factory=list)

    @property
    def prompt(self) -> tuple[int, ...]:
        """A short prompt that differs between requests."""
        return (self.key, self.key + 1, 2 * self.key + 3)

    def logits(self, vocab_size: int, step: int) -> torch.Tensor:
        """This request's logits row at ``step``."""
        pattern = ROW_PATTERNS[(self.key + step) % len(ROW_PATTERNS)]
        return make_row(vocab_size, self.key * 1009 + step, pattern)

    def added_at(self, row: int, outputs: list[int]) -> AddedRequest:
        """The :class:`AddedRequest` placing this request at ``row`` with the live ``outputs`` list."""
        return AddedRequest(index=row, params=dict(self.params), prompt_token_ids=self.prompt,
                            output_token_ids=outputs)


class SamplerConformance(BackendConformance):
    """Checks a sampler against the sampler contract; subclass it as ``Test<Name>``.

    Attributes:
        request_params: per-request parameter dicts to exercise (each one is checked on every row
            pattern, and each is tracked through the batch-bookkeeping scenario).
        filler_params: parameters of the other requests that fill the scenario's batch; their own
            results are not compared (for a seeded selector, leave them unseeded).
        disabled_params: parameter dicts under which a processor must leave a row unchanged.
        invalid_request_params: parameter dicts that must be rejected with a ``ValueError`` that
            names the parameter, when the request is added or at the latest when sampling.
        vocab_size: vocabulary size the sampler is built for.
        eos_token_ids: end-of-sequence ids of the :class:`SamplerContext` the sampler is built with.
        dtypes: logits dtypes the shape/dtype and selector checks run with.
        device: the device logits are placed on.
    """

    kind: ClassVar[str] = "sampler"
    spec: ClassVar[SamplerSpec]
    request_params: ClassVar[Sequence[Mapping[str, Any]]] = ({},)
    filler_params: ClassVar[Sequence[Mapping[str, Any]]] = ({},)
    disabled_params: ClassVar[Sequence[Mapping[str, Any]]] = ()
    invalid_request_params: ClassVar[Sequence[Mapping[str, Any]]] = ()
    vocab_size: ClassVar[int] = 64
    eos_token_ids: ClassVar[tuple[int, ...]] = ()
    dtypes: ClassVar[tuple[torch.dtype, ...]] = (torch.float32, torch.bfloat16)
    device: ClassVar[str] = "cpu"

    # --- helpers -------------------------------------------------------------------------------

    @property
    def is_selector(self) -> bool:
        """True when the spec declares a token selector."""
        return self.spec.selects_token

    def make_context(self) -> SamplerContext:
        """The context the sampler is built with: :attr:`vocab_size` and :attr:`eos_token_ids`."""
        return SamplerContext(self.vocab_size, self.eos_token_ids)

    def make_sampler(self, **option_overrides: Any) -> Sampler:
        """Build the sampler as a host does, ``impl(options, context)``, with validated options."""
        return self.impl(self.make_options(**option_overrides), self.make_context())

    def add_requests(self, sampler: Sampler, params: Sequence[Mapping[str, Any]]) -> None:
        """Place one request per params dict at rows ``0..len(params)-1`` of an empty batch."""
        added = tuple(
            AddedRequest(index=row, params=dict(p), prompt_token_ids=(1, 2, 3))
            for row, p in enumerate(params)
        )
        sampler.update_state(BatchUpdate(batch_size=len(params), added=added))

    def run_sampler(self, sampler: Sampler, logits: torch.Tensor) -> torch.Tensor:
        """``select`` (selector) or ``apply`` (processor) on a copy of ``logits``."""
        copy = logits.clone()
        if self.is_selector:
            return sampler.select(copy)  # type: ignore[attr-defined]
        return sampler.apply(copy)  # type: ignore[attr-defined]

    def sample(
        self, params: Sequence[Mapping[str, Any]], dtype: torch.dtype = torch.float32, seed: int = 0
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Run a fresh sampler on a batch of ``params``; return ``(logits, result)``."""
        sampler = self.make_sampler()
        self.add_requests(sampler, params)
        logits = make_logits(self.vocab_size, len(params), seed).to(dtype=dtype, device=self.device)
        return logits, self.run_sampler(sampler, logits)

    @staticmethod
    def on_every_pattern(params: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
        """Each params dict repeated once per row pattern, so that it meets every pattern."""
        return [p for p in params for _ in ROW_PATTERNS]

    def require_processor(self) -> None:
        """Skip the check unless the sampler is a logits processor."""
        if self.is_selector:
            pytest.skip(f"{self.spec.name!r} is a token selector; this check is for processors")

    def require_selector(self) -> None:
        """Skip the check unless the sampler is a token selector."""
        if not self.is_selector:
            pytest.skip(f"{self.spec.name!r} is a logits processor; this check is for selectors")

    # --- both kinds ----------------------------------------------------------------------------

    def test_impl_is_processor_or_selector_as_declared(self) -> None:
        """The class subclasses TokenSelector when ``spec.selects_token``, else LogitsProcessor."""
        base = TokenSelector if self.is_selector else LogitsProcessor
        assert issubclass(self.impl, base), (
            f"spec {self.spec.name!r} has selects_token={self.is_selector} but {self.impl.__name__} "
            f"is not a {base.__name__}"
        )

    def test_declared_request_params_are_accepted_at_their_defaults(self) -> None:
        """Every option declared ``request=True`` is a parameter a request may set: a request setting
        each one to its default (the ones with a default) joins the batch without an error, and a
        request with all of them at once too (hosts offer them as flags and request fields)."""
        declared = {name: option.default for name, option in self.spec.request_params().items()
                    if option.default is not None}
        for name, value in declared.items():
            sampler = self.make_sampler()
            try:
                self.add_requests(sampler, [{name: value}])
            except ValueError as error:
                raise AssertionError(f"spec {self.spec.name!r} declares the per-request parameter {name!r} "
                                     f"(request=True), but a request with {name}={value!r}, its default, is "
                                     f"refused: {error}") from error
        self.add_requests(self.make_sampler(), [declared])

    def test_results_do_not_depend_on_row_or_batch(self) -> None:
        """Each tracked request gets the same result in a changing batch as alone, step by step."""
        tracked, batched = self._run_scenario_batched()
        for request in tracked:
            sampler = self.make_sampler()
            outputs: list[int] = []
            for step in range(request.joins, SCENARIO_STEPS):
                joining = step == request.joins
                update = BatchUpdate(1, added=(request.added_at(0, outputs),)) if joining else None
                sampler.update_state(update)
                logits = request.logits(self.vocab_size, step).unsqueeze(0).to(self.device)
                alone = self.run_sampler(sampler, logits)[0]
                outputs.append(self._token(logits[0], alone))
                row, batch_size, in_batch = batched[request.key][step - request.joins]
                what = (
                    f"request {dict(request.params)} at step {step}: row {row} of a batch of "
                    f"{batch_size} gave a different result than the request alone; results must not "
                    "depend on the row or on the other requests"
                )
                if self.is_selector:
                    assert int(in_batch) == int(alone), f"{what} (token {int(in_batch)} vs {int(alone)})"
                else:
                    torch.testing.assert_close(in_batch, alone, msg=functools.partial(_with_context, what))

    def test_empty_batch(self) -> None:
        """A batch of zero requests gives ``[0, vocab]`` logits or ``[0]`` ids."""
        sampler = self.make_sampler()
        sampler.update_state(BatchUpdate(batch_size=0))
        result = self.run_sampler(sampler, torch.empty(0, self.vocab_size, device=self.device))
        expected = (0,) if self.is_selector else (0, self.vocab_size)
        assert tuple(result.shape) == expected, f"empty batch gave shape {tuple(result.shape)}"

    def test_rejects_logits_of_wrong_ndim(self) -> None:
        """1-D and 3-D logits raise a ValueError."""
        sampler = self.make_sampler()
        self.add_requests(sampler, self.request_params[:1])
        row = make_logits(self.vocab_size, 1, 0).to(self.device)
        for bad in (row[0], row.unsqueeze(0)):
            expect_value_error(
                functools.partial(self.run_sampler, sampler, bad),
                f"logits of shape {tuple(bad.shape)} (expected [1, {self.vocab_size}])",
            )

    def test_rejects_logits_of_wrong_vocab_size(self) -> None:
        """Logits one token narrower or wider than the vocabulary raise a ValueError."""
        sampler = self.make_sampler()
        self.add_requests(sampler, self.request_params[:1])
        for vocab_size in (self.vocab_size - 1, self.vocab_size + 1):
            bad = make_logits(vocab_size, 1, 0).to(self.device)
            expect_value_error(
                functools.partial(self.run_sampler, sampler, bad),
                f"logits of vocab size {vocab_size} for a sampler built for {self.vocab_size}",
            )

    def test_rejects_invalid_request_params(self) -> None:
        """Each of ``invalid_request_params`` raises a ValueError that names the parameter."""
        if not self.invalid_request_params:
            pytest.skip("the test class lists no invalid_request_params")
        for params in self.invalid_request_params:
            sampler = self.make_sampler()

            def add_and_sample(sampler: Sampler = sampler, params: Mapping[str, Any] = params) -> None:
                self.add_requests(sampler, [self.filler_params[0], params])
                self.run_sampler(sampler, make_logits(self.vocab_size, 2, 0).to(self.device))

            error = expect_value_error(add_and_sample, f"a request with params {dict(params)}")
            assert any(key in str(error) for key in params), (
                f"the error for params {dict(params)} does not name the parameter: {error}"
            )

    # --- processors ----------------------------------------------------------------------------

    def test_processor_keeps_shape_and_dtype(self) -> None:
        """apply returns a tensor of the input's shape, dtype and device, for every dtype."""
        self.require_processor()
        for dtype in self.dtypes:
            logits, result = self.sample(self.on_every_pattern(self.request_params), dtype)
            assert isinstance(result, torch.Tensor), f"apply returned {type(result).__name__}"
            assert result.shape == logits.shape, (
                f"apply changed the shape {tuple(logits.shape)} to {tuple(result.shape)}"
            )
            assert result.dtype == dtype, f"apply turned {dtype} logits into {result.dtype}"
            assert result.device == logits.device, f"apply moved logits to {result.device}"

    def test_processor_output_has_no_nan(self) -> None:
        """apply produces no NaN."""
        self.require_processor()
        for dtype in self.dtypes:
            _, result = self.sample(self.on_every_pattern(self.request_params), dtype)
            rows = torch.isnan(result).any(dim=1).nonzero().flatten().tolist()
            assert not rows, f"apply produced NaN in rows {rows} ({dtype})"

    def test_processor_keeps_a_finite_logit_per_row(self) -> None:
        """apply leaves at least one finite logit in every row."""
        self.require_processor()
        for dtype in self.dtypes:
            _, result = self.sample(self.on_every_pattern(self.request_params), dtype)
            rows = (~torch.isfinite(result).any(dim=1)).nonzero().flatten().tolist()
            assert not rows, f"apply left no finite logit in rows {rows} ({dtype})"

    def test_processor_leaves_disabled_rows_unchanged(self) -> None:
        """Rows whose params disable the processor come out bit for bit unchanged."""
        self.require_processor()
        if not self.disabled_params:
            pytest.skip("the test class lists no disabled_params")
        rows = [(p, True) for p in self.on_every_pattern(self.disabled_params)]
        rows += [(p, False) for p in self.on_every_pattern(self.request_params)]
        random.Random(0).shuffle(rows)
        logits, result = self.sample([p for p, _ in rows])
        for row, (params, disabled) in enumerate(rows):
            if disabled:
                assert torch.equal(result[row], logits[row]), (
                    f"row {row} with params {dict(params)} (which disable the processor) was changed"
                )

    def test_processor_reports_disabled_batches_as_unchanged(self) -> None:
        """A batch whose every row has disabled params reports ``leaves_batch_unchanged()``, so the
        engine can skip the call."""
        self.require_processor()
        if not self.disabled_params:
            pytest.skip("the test class lists no disabled_params")
        sampler = self.make_sampler()
        self.add_requests(sampler, self.on_every_pattern(self.disabled_params))
        assert sampler.leaves_batch_unchanged(), (  # type: ignore[attr-defined]
            f"a batch of rows with params {[dict(p) for p in self.disabled_params]} (which disable the processor) "
            "is not reported by leaves_batch_unchanged()"
        )

    def test_processor_claims_unchanged_only_when_it_is(self) -> None:
        """Whenever ``leaves_batch_unchanged()`` is True, apply returns the batch bit for bit."""
        self.require_processor()
        mixed = [*self.disabled_params, *self.request_params]
        for params in (self.request_params, self.disabled_params, mixed):
            if not params:
                continue
            sampler = self.make_sampler()
            self.add_requests(sampler, self.on_every_pattern(params))
            if sampler.leaves_batch_unchanged():  # type: ignore[attr-defined]
                logits = make_logits(self.vocab_size, len(sampler.rows), seed=3)
                assert torch.equal(self.run_sampler(sampler, logits), logits), (
                    f"leaves_batch_unchanged() is True for params {[dict(p) for p in params]} but apply changed "
                    "the logits"
                )

    def test_processor_argmax_invariance_matches_spec(self) -> None:
        """``is_argmax_invariant()`` agrees with ``spec.argmax_invariant``."""
        self.require_processor()
        claimed = self.make_sampler().is_argmax_invariant()  # type: ignore[attr-defined]
        assert claimed == self.spec.argmax_invariant, (
            f"is_argmax_invariant() returns {claimed} but the spec declares "
            f"argmax_invariant={self.spec.argmax_invariant}"
        )

    def test_processor_keeps_argmax_when_declared_invariant(self) -> None:
        """When declared invariant, each row's largest input logit is still the largest (and finite)."""
        self.require_processor()
        if not self.spec.argmax_invariant:
            pytest.skip("the spec does not declare the processor argmax invariant")
        params = self.on_every_pattern([*self.request_params, *self.disabled_params])
        for seed in range(3):
            logits, result = self.sample(params, seed=seed)
            top = logits.argmax(dim=1, keepdim=True)
            kept = result.gather(1, top).squeeze(1)
            bad = ((kept != result.max(dim=1).values) | ~torch.isfinite(kept)).nonzero().flatten()
            assert not bad.tolist(), (
                f"argmax-invariant processor demoted the largest logit in rows {bad.tolist()} "
                f"(params {[dict(params[r]) for r in bad.tolist()]})"
            )

    def test_processor_fusable_mask_step_matches_apply(self) -> None:
        """A :class:`FusableMaskStep` declares one of ``MASK_STEPS``, gives one value per row, and its
        ``apply`` equals that step of the fused mask for those values (float32 logits without ties),
        before and after the batch changes."""
        self.require_processor()
        sampler = self.make_sampler()
        if not isinstance(sampler, FusableMaskStep):
            pytest.skip(f"{self.impl.__name__} does not implement FusableMaskStep")
        step = sampler.mask_step
        assert step in MASK_STEPS, (
            f"{self.impl.__name__} declares mask_step={step!r}; a fused-mask step is one of {', '.join(MASK_STEPS)}"
        )
        params = self.on_every_pattern([*self.request_params, *self.disabled_params])
        batches = (params, list(reversed(params[: len(params) // 2 + 1])))
        for seed, batch in enumerate(batches):
            if seed == 0:
                self.add_requests(sampler, batch)
            else:  # every request leaves; others take their rows
                added = tuple(AddedRequest(index=row, params=dict(p)) for row, p in enumerate(batch))
                sampler.update_state(BatchUpdate(batch_size=len(batch), removed=tuple(range(len(params))),
                                                 added=added))
            values = list(sampler.row_values())
            assert len(values) == len(batch), (
                f"row_values() gave {len(values)} values for a batch of {len(batch)} rows"
            )
            logits = untied_logits(self.vocab_size, len(batch), seed).to(self.device)
            expected = mask_step_reference(step, logits, values)
            result = self.run_sampler(sampler, logits)
            wrong = (~((result == expected) | (torch.isnan(result) & torch.isnan(expected)))).any(dim=1)
            rows = wrong.nonzero().flatten().tolist()
            assert not rows, (
                f"apply differs from the {step} step of the fused mask with row_values() {values} in rows {rows} "
                f"(params {[dict(batch[r]) for r in rows[:4]]}); a host that fuses this processor would give "
                "other results than apply"
            )

    # --- selectors -----------------------------------------------------------------------------

    def test_selector_returns_int64_ids_in_vocab(self) -> None:
        """select returns ``int64 [num_rows]`` ids in the vocabulary whose logits are finite."""
        self.require_selector()
        params = self.on_every_pattern(self.request_params)
        for dtype in self.dtypes:
            for seed in range(3):
                logits, ids = self.sample(params, dtype, seed)
                assert isinstance(ids, torch.Tensor), f"select returned {type(ids).__name__}"
                assert ids.dtype == torch.int64, f"select returned {ids.dtype} ids, expected int64"
                assert tuple(ids.shape) == (len(params),), (
                    f"select returned shape {tuple(ids.shape)} for {len(params)} rows"
                )
                assert bool(((ids >= 0) & (ids < self.vocab_size)).all()), (
                    f"select returned ids outside [0, {self.vocab_size}): {ids.tolist()}"
                )
                chosen = logits.gather(1, ids.unsqueeze(1)).squeeze(1)
                rows = (~torch.isfinite(chosen)).nonzero().flatten().tolist()
                assert not rows, f"select chose tokens with non-finite logits in rows {rows} ({dtype})"

    def test_selector_chooses_the_only_finite_logit(self) -> None:
        """A row with a single finite logit selects that token."""
        self.require_selector()
        params = self.on_every_pattern(self.request_params)
        sampler = self.make_sampler()
        self.add_requests(sampler, params)
        logits = torch.full((len(params), self.vocab_size), float("-inf"), device=self.device)
        rows = torch.arange(len(params), device=self.device)
        only = rows * 7 % self.vocab_size
        logits[rows, only] = 0.5
        ids = self.run_sampler(sampler, logits)
        assert ids.tolist() == only.tolist(), (
            f"rows with a single finite logit at {only.tolist()} selected {ids.tolist()}"
        )

    # --- the batch-bookkeeping scenario --------------------------------------------------------

    def _token(self, logits_row: torch.Tensor, result: torch.Tensor) -> int:
        """The token appended to a request's outputs: the selected one, or the input's argmax."""
        return int(result) if self.is_selector else int(logits_row.argmax())

    def _run_scenario_batched(
        self,
    ) -> tuple[list[ScenarioRequest], dict[int, list[tuple[int, int, torch.Tensor]]]]:
        """Run the tracked requests through a changing batch, recording their results.

        Returns the tracked requests and, per request key, the ``(row, batch_size, result row)``
        of every step since it joined. Each step but :data:`QUIET_STEP` removes some fillers, adds
        new fillers and the tracked requests that join then (into freed rows or past the end), moves
        the last rows into the holes, and swaps random rows.
        """
        rng = random.Random(1234)
        tracked = [
            ScenarioRequest(key=i, params=p, tracked=True, joins=i % 3)
            for i, p in enumerate(self.request_params)
        ]
        next_key = len(tracked)
        sampler = self.make_sampler()
        layout: list[ScenarioRequest | None] = []
        results: dict[int, list[tuple[int, int, torch.Tensor]]] = {r.key: [] for r in tracked}
        for step in range(SCENARIO_STEPS):
            if step == QUIET_STEP:
                sampler.update_state(None)
            else:
                removed = [
                    row for row, r in enumerate(layout)
                    if r is not None and not r.tracked and rng.random() < 0.5
                ]
                for row in removed:
                    layout[row] = None
                joining = [r for r in tracked if r.joins == step]
                for _ in range(rng.randint(1, 3)):
                    params = self.filler_params[next_key % len(self.filler_params)]
                    joining.append(ScenarioRequest(key=next_key, params=params, tracked=False, joins=step))
                    next_key += 1
                rng.shuffle(joining)
                added = []
                for request in joining:
                    holes = [row for row, r in enumerate(layout) if r is None]
                    if holes and rng.random() < 0.7:
                        row = rng.choice(holes)
                        layout[row] = request
                    else:
                        row = len(layout)
                        layout.append(request)
                    added.append(request.added_at(row, request.outputs))
                moved = _condense(layout)
                for _ in range(rng.randint(1, 2) if len(layout) >= 2 else 0):
                    a, b = rng.sample(range(len(layout)), 2)
                    layout[a], layout[b] = layout[b], layout[a]
                    moved.append(MovedRequest(a, b, MoveKind.SWAP))
                sampler.update_state(BatchUpdate(
                    batch_size=len(layout), removed=tuple(removed), added=tuple(added), moved=tuple(moved)
                ))
            requests = [r for r in layout if r is not None]
            logits = torch.stack([r.logits(self.vocab_size, step) for r in requests]).to(self.device)
            result = self.run_sampler(sampler, logits)
            for row, request in enumerate(requests):
                request.outputs.append(self._token(logits[row], result[row]))
                if request.tracked:
                    results[request.key].append((row, len(requests), result[row]))
        return tracked, results


def _with_context(context: str, detail: str) -> str:
    """An assertion message: ``context`` followed by the comparison's ``detail``."""
    return f"{context}\n{detail}"


def _condense(layout: list[ScenarioRequest | None]) -> list[MovedRequest]:
    """Move the last requests into the holes of ``layout`` (in place); return the moves."""
    moved: list[MovedRequest] = []
    while None in layout:
        if layout[-1] is None:
            layout.pop()
            continue
        hole = layout.index(None)
        moved.append(MovedRequest(len(layout) - 1, hole, MoveKind.MOVE))
        layout[hole] = layout.pop()
    return moved


def untied_logits(vocab_size: int, num_rows: int, seed: int) -> torch.Tensor:
    """``float32 [num_rows, vocab_size]`` logits without equal finite values: N(0, 3^2), with about a
    quarter of every other row ``-inf`` (each row keeps at least two finite logits)."""
    generator = torch.Generator().manual_seed(seed)
    logits = torch.randn(num_rows, vocab_size, generator=generator) * 3
    masked = torch.rand(num_rows, vocab_size, generator=generator) < 0.25
    masked[::2] = False
    masked[:, :2] = False
    return logits.masked_fill_(masked, float("-inf"))


def mask_step_reference(step: str, logits: torch.Tensor, values: Sequence[float]) -> torch.Tensor:
    """One step of the fused mask applied alone, per row, with the semantics
    :class:`~pyagent_core.interfaces.sampler.FusableMaskStep` states (an oracle, written for
    clarity, one row at a time): ``temperature``, ``top_k``, ``top_p`` or ``min_p`` with row ``r``'s
    value ``values[r]``. Returns new float32 logits; rows of only ``-inf`` are left as they are.

    Top-p's probabilities are a float64 softmax here, so on logits where a cumulative probability
    falls within float rounding of ``p`` it may differ from the kernel's: compare on random logits.
    """
    out = logits.float().clone()
    vocab = out.shape[1]
    for row, value in enumerate(values):
        x = out[row]
        if not bool(torch.isfinite(x).any()):
            continue
        if step == "temperature":
            if value > 0 and value != 1:
                out[row] = x / torch.tensor(float(value), dtype=torch.float32)
        elif step == "top_k":
            if 0 < int(value) < vocab:
                kth = torch.topk(x, int(value)).values[-1]
                out[row] = x.masked_fill(x < kth, float("-inf"))
        elif step == "top_p":
            p = float(torch.tensor(float(value), dtype=torch.float32))
            if p < 1:
                probs = torch.softmax(x.double(), dim=0)
                order = torch.argsort(x, descending=True, stable=True)
                reached = (torch.cumsum(probs[order], dim=0) >= p).nonzero().flatten()
                if reached.numel():
                    last = x[order[int(reached[0]) if p > 0 else 0]]
                    out[row] = x.masked_fill(x < last, float("-inf"))
        elif step == "min_p":
            q = float(torch.tensor(float(value), dtype=torch.float32))
            if q > 0:
                keep = x.double() - x.max().double() >= math.log(q)
                out[row] = x.masked_fill(~keep, float("-inf"))
        else:
            raise ValueError(f"unknown fused-mask step {step!r}; choose one of {', '.join(MASK_STEPS)}")
    return out


def registered_sampler_specs(register_hook: Callable[..., None]) -> dict[str, SamplerSpec]:
    """The specs a plugin's ``pyagent_register_samplers`` hook registers, by name."""
    specs: list[SamplerSpec] = []
    register_hook(register=specs.append)
    return {spec.name: spec for spec in specs}


def run_processor(
    impl: type[LogitsProcessor], logits: torch.Tensor, params: Sequence[Mapping[str, Any]],
    options: Mapping[str, Any] | None = None, contexts: Sequence[Sequence[int]] | None = None,
) -> torch.Tensor:
    """A fresh processor applied once to a copy of ``logits``, with one request per row.

    Row ``i`` holds a request with ``params[i]`` whose prompt is ``contexts[i]`` (empty when not
    given); ``options`` are the engine-level options (none: the processor's own defaults).
    """
    processor = impl(dict(options or {}), SamplerContext(int(logits.shape[1])))
    added = tuple(
        AddedRequest(index=i, params=dict(p), prompt_token_ids=tuple(contexts[i]) if contexts else ())
        for i, p in enumerate(params)
    )
    processor.update_state(BatchUpdate(batch_size=len(params), added=added))
    return processor.apply(logits.clone())
