"""Keeping a failure with the request that caused it.

A stage of a step that works on the whole batch (the model forward with the attention backend, the
grammar masks and the sampler chain) raises for everyone when one request's data trips it: a
kernel that cannot take one sequence's length, a logits processor that cannot take one row's
parameters. :func:`run_isolated` then tries each item alone to find the ones that fail by
themselves, and runs the stage again for the others together, so they go on as if the culprits had
never been in the batch. A failure that no item causes alone (it needs the batch) fails every item.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

import attrs

T = TypeVar("T")
R = TypeVar("R")


def describe(error: BaseException) -> str:
    """``"TypeName: message"`` for an error report."""
    return f"{type(error).__name__}: {error}"


@attrs.frozen
class Isolated(Generic[T, R]):
    """The outcome of :func:`run_isolated`: the stage's result for ``kept`` (``None`` when nothing is
    kept), and each failed item with the reason."""

    result: R | None
    kept: list[T]
    failed: list[tuple[T, str]]


def run_isolated(items: Sequence[T], run: Callable[[Sequence[T]], R],
                 probe: Callable[[T], object] | None = None) -> Isolated[T, R]:
    """``run(items)``; when it raises, the items that fail alone are left out and ``run`` is called
    again with the rest.

    ``probe(item)`` tries one item by itself (default: ``run([item])``); it raises when the item
    fails alone and must leave nothing behind that ``run`` depends on. Costs one call of ``run``
    when nothing fails; on a failure, one probe per item and one more call of ``run``.
    """
    try:
        return Isolated(run(items), list(items), [])
    except Exception as error:
        batch_error = describe(error)
    if len(items) == 1:
        return Isolated(None, [], [(items[0], batch_error)])
    try_alone = probe or (lambda item: run([item]))
    kept: list[T] = []
    failed: list[tuple[T, str]] = []
    for item in items:
        try:
            try_alone(item)
        except Exception as error:
            failed.append((item, describe(error)))
        else:
            kept.append(item)
    if kept:
        try:
            return Isolated(run(kept), kept, failed)
        except Exception as error:  # only the batch fails: nothing can be attributed
            batch_error = describe(error)
    return Isolated(None, [], failed + [(item, batch_error) for item in kept])
