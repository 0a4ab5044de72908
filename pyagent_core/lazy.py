"""Resolve ``"package.module:Attribute"`` implementation paths, importing only on demand."""

from __future__ import annotations

import importlib
from typing import Any

from pyagent_core.errors import SpecError


def import_impl(path: str) -> Any:
    """Import ``package.module`` and return ``Attribute`` (dotted attributes allowed).

    Raises :class:`SpecError` when the path is malformed or the attribute is missing; an
    ``ImportError`` of the module itself propagates unchanged so callers can report its reason.
    """
    module_name, sep, attr_path = path.partition(":")
    if not sep or not module_name or not attr_path:
        raise SpecError(f"impl path {path!r} is invalid; write 'package.module:Attribute'")
    obj: Any = importlib.import_module(module_name)
    for part in attr_path.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise SpecError(
                f"impl path {path!r}: module {module_name!r} has no attribute {attr_path!r}; "
                "fix the spec's impl or the module"
            ) from None
    return obj
