"""Chain-level fusion: consecutive temperature / top-k / top-p / min-p processors as one kernel call.

A processor takes part when it implements :class:`pyagent_core.interfaces.sampler.FusableMaskStep`
(its ``mask_step``, one of ``MASK_STEPS``, and its per-row ``row_values()``), whichever plugin it
comes from. A run of two or more such processors in the kernel's order (``top_k < top_p < min_p``,
with ``temperature`` either first or last) becomes a single call of the fused mask kernel
(``pyagent_kernels.sampling``), which never sorts the whole vocabulary. Fusion needs the compiled C
extension and float32 CPU logits; otherwise, and for processors that do not take part, each
processor's own ``apply`` runs.

The per-row parameters of a run are built into a ``pyagent_kernels.sampling.SamplingParams`` once
per batch composition. Given a ``KeptTokens``, the last run records which tokens each row kept
when it ends the chain, so that a selector can skip the rest of the row.

The fused call has the kernel's semantics: the same temperature scaling, top-k and min-p results
(min-p as ``logit - max >= log(min_p)`` in double precision), and top-p equal to the separate
processor's except that tokens tied with the last kept one are all kept and a cumulative
probability within float rounding of ``top_p`` may round the other way (the kernel sums float32
probabilities in double, descending; the processor sums a float32 softmax ascending).
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Sequence
from typing import Any, cast

import torch

from pyagent_core.interfaces.sampler import MASK_STEPS, FusableMaskStep, LogitsProcessor, fusable_step


@functools.cache
def _mask_kernel() -> Any:
    """``pyagent_kernels.sampling.SamplingParams`` when the compiled kernels are importable, else
    None (``auto`` fuses only then)."""
    try:
        import pyagent_kernels
        from pyagent_kernels.sampling import SamplingParams
    except ImportError:
        return None
    return SamplingParams if pyagent_kernels.status()["compiled"] else None


def fused_runs(processors: Sequence[LogitsProcessor]) -> list[list[LogitsProcessor]]:
    """Split the chain into runs: each run is one processor, or several :class:`FusableMaskStep`
    processors that fuse into one call."""
    runs: list[list[LogitsProcessor]] = []
    run_steps: list[str | None] = []  # the steps of the last run (None: a processor that does not fuse)
    for processor in processors:
        step = fusable_step(processor)
        if step is not None and runs and _extends(run_steps, step):
            runs[-1].append(processor)
            run_steps.append(step)
        else:
            runs.append([processor])
            run_steps = [step]
    return runs


def _extends(steps: list[str | None], step: str) -> bool:
    """Whether ``step`` can follow a run of ``steps`` inside one kernel call: temperature at most
    once, first or last, and the other steps in the kernel's order."""
    if None in steps or step in steps:
        return False
    if "temperature" in steps:
        if len(steps) > 1 and steps[-1] == "temperature":
            return False  # temperature closed the run
    elif step == "temperature":
        return True
    others = [s for s in steps if s != "temperature"]
    return not others or MASK_STEPS.index(step) > MASK_STEPS.index(str(others[-1]))


_cache: dict[int, tuple[list[Any], Any]] = {}
_runs_cache: dict[tuple[int, ...], list[list[LogitsProcessor]]] = {}


def _runs(processors: Sequence[LogitsProcessor]) -> list[list[LogitsProcessor]]:
    """:func:`fused_runs`, remembered per sequence of processor objects (the cache holds them)."""
    key = tuple(id(processor) for processor in processors)
    runs = _runs_cache.get(key)
    if runs is None:
        if len(_runs_cache) > 64:
            _runs_cache.clear()
        runs = _runs_cache[key] = fused_runs(processors)
    return runs


def _params(run: list[LogitsProcessor], vocab: int) -> Any:
    """The kernel's per-row parameters of a run, as a ``SamplingParams``.

    The processors keep their ``row_values()`` list until the batch changes, so the parameters
    built from those lists are reused while the lists are the same objects.
    """
    values = [_fusable(processor).row_values() for processor in run]
    cached = _cache.get(id(run))  # runs come from _runs_cache, which keeps them alive
    if cached is not None and all(map(operator.is_, cached[0], values)):
        return cached[1]
    params = _build_params(run, tuple(values), vocab)
    if len(_cache) > 64:
        _cache.clear()
    _cache[id(run)] = (values, params)
    return params


def _fusable(processor: LogitsProcessor) -> FusableMaskStep:
    """``processor`` as the :class:`FusableMaskStep` that :func:`fused_runs` found it to be (a
    processor in a run of two or more; no second ``isinstance`` check on every step)."""
    return cast(FusableMaskStep, processor)


def _build_params(run: list[LogitsProcessor], row_values: tuple[Any, ...], vocab: int) -> Any:
    from pyagent_kernels.sampling import SamplingParams

    steps: dict[str, list[Any]] = {}
    for processor, values in zip(run, row_values, strict=True):
        step = _fusable(processor).mask_step
        steps[step] = [min(int(v), vocab) for v in values] if step == "top_k" else [float(v) for v in values]
    temperature_last = len(run) > 1 and _fusable(run[-1]).mask_step == "temperature"
    return SamplingParams(temperature=steps.get("temperature"), top_k=steps.get("top_k"), top_p=steps.get("top_p"),
                          min_p=steps.get("min_p"), temperature_last=temperature_last)


def apply_processors(processors: Sequence[LogitsProcessor], logits: torch.Tensor,
                     backend: str = "auto", kept: Any = None) -> torch.Tensor:
    """Apply ``processors`` in order to the batch's logits, fusing what can be fused.

    ``backend``: "auto" fuses through the C kernel when it is built (else runs each processor);
    "c" or "torch" always fuse, with that implementation of the kernel (benchmarks use "torch").
    ``kept``: a ``pyagent_kernels.sampling.KeptTokens``, filled when the chain ends with a fused
    call and cleared otherwise (see ``pyagent_kernels.gumbel``).
    """
    if kept is not None:
        kept.clear()
    available = _mask_kernel() is not None if backend == "auto" else True
    fusable = available and logits.dtype == torch.float32 and logits.device.type == "cpu"
    runs = _runs(processors) if fusable else [[p] for p in processors]
    for index, run in enumerate(runs):
        if len(run) == 1:
            logits = run[0].apply(logits)
            continue
        logits = logits.contiguous()
        last = index == len(runs) - 1
        _params(run, logits.shape[1]).apply(logits, kept=kept if last else None, backend=backend)
    return logits
