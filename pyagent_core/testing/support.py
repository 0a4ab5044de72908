"""Helpers shared by the kits: expected-exception checks and hypothesis settings.

Kit checks signal failure with ``AssertionError`` only, so that a plugin's test report reads the
same whatever went wrong and the core's meta-tests can assert that a broken backend fails a check.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck, settings


def kit_settings(max_examples: int) -> settings:
    """Hypothesis settings for kit checks: reproducible, no deadline, shared by every subclass.

    ``derandomize`` makes a plugin's CI deterministic; one failure is reported (as the check's own
    ``AssertionError``, not a group); ``differing_executors`` is suppressed because every backend's
    test class runs the same inherited check.
    """
    return settings(
        max_examples=max_examples,
        deadline=None,
        derandomize=True,
        database=None,
        report_multiple_bugs=False,
        suppress_health_check=[HealthCheck.differing_executors, HealthCheck.too_slow],
    )


def expect_raises(
    expected: type[BaseException] | tuple[type[BaseException], ...],
    call: Callable[..., Any],
    *args: Any,
    what: str,
) -> BaseException:
    """Call ``call(*args)`` and return the ``expected`` exception it raises.

    Raises ``AssertionError`` naming ``what`` (the situation, e.g. ``"evict() on an empty policy"``)
    when nothing or another exception is raised.
    """
    names = expected.__name__ if isinstance(expected, type) else " or ".join(e.__name__ for e in expected)
    try:
        call(*args)
    except expected as error:
        return error
    except Exception as error:
        raise AssertionError(f"{what}: expected {names}, got {type(error).__name__}: {error}") from error
    raise AssertionError(f"{what}: expected {names}, but nothing was raised")
