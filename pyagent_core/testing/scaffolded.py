"""The scaffold's templates as importable modules: the reference implementations of the kit meta-tests.

:func:`import_template` renders the Python modules that ``pyagent new-plugin NAME --kind KIND``
would write (the package ``__init__``, ``impl``, ``plugin`` and the conformance test) and executes
them in memory, registered in ``sys.modules`` under the names the installed distribution would give
them. So the spec's ``impl`` path resolves through :func:`~pyagent_core.lazy.import_impl`, and the
core's own tests check each kit against exactly the code a new plugin starts from, without
installing anything.

Each module is compiled with its template's path as file name; rendering changes no line count, so
tracebacks point at the right line of the template.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from types import ModuleType

import attrs

from pyagent_core.scaffold import TEMPLATES, distribution_files, render, template_values


@attrs.frozen
class RenderedPlugin:
    """The modules of one rendered scaffold.

    Attributes:
        impl: ``<package>.impl``; its class ``KitReference`` (for the default name) implements the kind.
        plugin: ``<package>.plugin``; ``SPEC`` is the registered spec record.
        tests: ``test_<package>``, the scaffold's conformance test; ``TestKitReference`` (for the
            default name) subclasses the kind's kit with the fixtures it needs.
    """

    impl: ModuleType
    plugin: ModuleType
    tests: ModuleType


def import_template(kind: str, name: str = "kit-reference") -> RenderedPlugin:
    """Render the scaffold of backend ``name`` of ``kind`` and import its modules (once per process).

    The implementation class is named after ``name`` as the scaffold names it: ``kit-reference``
    gives ``KitReference`` and the package ``pyagent_<kind>_kit_reference``. Raises
    :class:`~pyagent_core.errors.ScaffoldError` for a bad name or a kind without templates.
    """
    values = template_values(name, kind)
    package = values["package"]
    if f"test_{package}" not in sys.modules:
        for file in distribution_files(values):
            if file.module is not None and file.template is not None:
                _execute(file.module, file.template, values, is_package=file.module == package)
    return RenderedPlugin(
        impl=sys.modules[f"{package}.impl"], plugin=sys.modules[f"{package}.plugin"],
        tests=sys.modules[f"test_{package}"],
    )


def _execute(module_name: str, template: str, values: Mapping[str, str], is_package: bool) -> None:
    """Render ``template`` and run it as module ``module_name``, registered like an imported one."""
    module = ModuleType(module_name)
    module.__file__ = str(TEMPLATES / template)
    if is_package:
        module.__path__ = []
    code = compile(render(template, values), module.__file__, "exec", dont_inherit=True)
    sys.modules[module_name] = module
    try:
        exec(code, module.__dict__)
    except BaseException:
        del sys.modules[module_name]
        raise
    parent, _, child = module_name.rpartition(".")
    if parent in sys.modules:
        setattr(sys.modules[parent], child, module)
