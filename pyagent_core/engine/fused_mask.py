"""Chain-level fusion: consecutive temperature / top-k / top-p / min-p processors as one kernel call.

A processor takes part when its class sets ``mask_step`` (one of :data:`STEPS`) and it has
``row_values()`` (its per-row parameter values, as the reference processors do). A run of such
processors in the kernel's order (``top_k < top_p < min_p``, with ``temperature`` either first or
last) becomes a single ``pyagent_kernels.sampling.apply_sampling_mask`` call, which never sorts the
whole vocabulary. Fusion needs the compiled C extension and float32 CPU logits; otherwise, and for
processors that do not take part, each processor's own ``apply`` runs.

The fused call has the kernel's semantics: the same temperature scaling, top-k and min-p results
(min-p as ``logit - max >= log(min_p)`` in double precision), and top-p equal to the separate
processor's except that tokens tied with the last kept one are all kept and a cumulative
probability within float rounding of ``top_p`` may round the other way (the kernel sums float32
probabilities in double, descending; the processor sums a float32 softmax ascending).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import torch

from pyagent_core.interfaces.sampler import LogitsProcessor

STEPS = ("temperature", "top_k", "top_p", "min_p")
_INT32_MAX = 2**31 - 1


@functools.cache
def _mask_kernel() -> Any:
    """``apply_sampling_mask`` when the compiled kernels are importable, else None."""
    try:
        import pyagent_kernels
        from pyagent_kernels.sampling import apply_sampling_mask
    except ImportError:
        return None
    return apply_sampling_mask if pyagent_kernels.status()["compiled"] else None


def mask_step(processor: LogitsProcessor) -> str | None:
    """The fused-mask step ``processor`` implements, or None."""
    step = getattr(processor, "mask_step", None)
    return step if step in STEPS and hasattr(processor, "row_values") else None


def fused_runs(processors: Sequence[LogitsProcessor]) -> list[list[LogitsProcessor]]:
    """Split the chain into runs: each run is one processor, or several that fuse into one call."""
    runs: list[list[LogitsProcessor]] = []
    for processor in processors:
        step = mask_step(processor)
        if step is not None and runs and _extends(runs[-1], step):
            runs[-1].append(processor)
        else:
            runs.append([processor])
    return runs


def _extends(run: list[LogitsProcessor], step: str) -> bool:
    """Whether ``step`` can follow ``run`` inside one kernel call: temperature at most once, first or
    last, and the other steps in the kernel's order."""
    steps = [mask_step(p) for p in run]
    if None in steps or step in steps:
        return False
    if "temperature" in steps:
        if len(steps) > 1 and steps[-1] == "temperature":
            return False  # temperature closed the run
    elif step == "temperature":
        return True
    others = [s for s in steps if s != "temperature"]
    return not others or STEPS.index(step) > STEPS.index(str(others[-1]))


_cache: dict[tuple[int, ...], tuple[tuple[Any, ...], dict[str, torch.Tensor], bool]] = {}


def _params(run: list[LogitsProcessor], vocab: int) -> tuple[dict[str, torch.Tensor], bool]:
    """The kernel's per-row parameter tensors of a run, and whether temperature comes last.

    The processors keep their ``row_values()`` list until the batch changes, so the tensors built
    from those lists are reused while the lists are the same objects.
    """
    values = tuple(processor.row_values() for processor in run)  # type: ignore[attr-defined]
    key = tuple(id(processor) for processor in run)
    cached = _cache.get(key)
    if cached is not None and all(a is b for a, b in zip(cached[0], values, strict=True)):
        return cached[1], cached[2]
    params, temperature_last = _build_params(run, values, vocab)
    if len(_cache) > 64:
        _cache.clear()
    _cache[key] = (values, params, temperature_last)
    return params, temperature_last


def _build_params(run: list[LogitsProcessor], row_values: tuple[Any, ...],
                  vocab: int) -> tuple[dict[str, torch.Tensor], bool]:
    params: dict[str, torch.Tensor] = {}
    for processor, values in zip(run, row_values, strict=True):
        step = mask_step(processor)
        if step == "top_k":
            params[step] = torch.tensor([min(int(v), vocab, _INT32_MAX) for v in values], dtype=torch.int32)
        else:
            params[str(step)] = torch.tensor([float(v) for v in values], dtype=torch.float32)
    temperature_last = len(run) > 1 and mask_step(run[-1]) == "temperature"
    return params, temperature_last


def apply_processors(processors: Sequence[LogitsProcessor], logits: torch.Tensor,
                     backend: str = "auto") -> torch.Tensor:
    """Apply ``processors`` in order to the batch's logits, fusing what can be fused.

    ``backend``: "auto" fuses through the C kernel when it is built (else runs each processor);
    "c" or "torch" always fuse, with that implementation of the kernel (benchmarks use "torch").
    """
    kernel = _mask_kernel() if backend == "auto" else _kernel_function()
    fusable = kernel is not None and logits.dtype == torch.float32 and logits.device.type == "cpu"
    for run in fused_runs(processors) if fusable else [[p] for p in processors]:
        if len(run) == 1:
            logits = run[0].apply(logits)
            continue
        params, temperature_last = _params(run, logits.shape[1])
        logits = logits.contiguous()
        if backend == "auto":
            kernel(logits, temperature_last=temperature_last, **params)
        else:
            kernel(logits, temperature_last=temperature_last, backend=backend, **params)
    return logits


def _kernel_function() -> Any:
    """``apply_sampling_mask`` (raises ImportError without pyagent-kernels)."""
    from pyagent_kernels.sampling import apply_sampling_mask

    return apply_sampling_mask
