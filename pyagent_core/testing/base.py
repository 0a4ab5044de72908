"""Checks shared by every kind's conformance kit: the spec record and its implementation agree."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from pyagent_core.lazy import import_impl
from pyagent_core.options import validate_options
from pyagent_core.types import BackendSpec


class BackendConformance:
    """Base of every kit. Subclasses set ``impl`` and ``spec``; ``options`` overrides defaults.

    Not collected by pytest itself (its name does not start with ``Test``); a plugin's test class
    ``TestMyBackend(SamplerConformance)`` is.
    """

    impl: ClassVar[type]
    spec: ClassVar[BackendSpec]
    options: ClassVar[Mapping[str, Any]] = {}

    def make_options(self, **overrides: Any) -> dict[str, Any]:
        """The spec's defaults, updated by the class's ``options`` and ``overrides``, validated."""
        values = {**self.options, **overrides}
        return validate_options(self.spec.options, values, f"{self.spec.kind} backend {self.spec.name!r}")

    def test_spec_kind_matches_kit(self) -> None:
        kit_kind = getattr(self, "kind", None)
        assert kit_kind is None or self.spec.kind == kit_kind, (
            f"spec is a {self.spec.kind} record but the kit tests {kit_kind} backends"
        )

    def test_spec_impl_resolves_to_impl(self) -> None:
        assert import_impl(self.spec.impl) is self.impl, (
            f"spec.impl {self.spec.impl!r} does not resolve to {self.impl!r}"
        )

    def test_option_defaults_validate(self) -> None:
        options = self.make_options()
        assert set(options) == set(self.spec.options)

    def test_check_available_passes_here(self) -> None:
        check = getattr(self.impl, "check_available", None)
        if check is not None:
            check()
