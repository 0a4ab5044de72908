"""The plugin module registers the lmfe backend without importing lmformatenforcer or torch."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys

from pyagent_core.lazy import import_impl
from pyagent_core.types import GrammarSpec
from pyagent_grammar_lmfe import plugin


def test_entry_point_names_the_plugin_module() -> None:
    declared = {(p.name, p.value) for p in importlib.metadata.entry_points(group="pyagent")}
    assert ("grammar-lmfe", "pyagent_grammar_lmfe.plugin") in declared


def test_registers_one_spec_whose_impl_resolves() -> None:
    specs: list[GrammarSpec] = []
    plugin.pyagent_register_grammar_backends(register=specs.append)
    assert specs == [plugin.SPEC]
    assert import_impl(plugin.SPEC.impl).__name__ == "LmfeBackend"


def test_listing_imports_neither_the_library_nor_torch() -> None:
    code = (
        "import sys, pyagent_grammar_lmfe.plugin as p\n"
        "p.pyagent_register_grammar_backends(register=lambda s: None)\n"
        "names = ('torch', 'lmformatenforcer', 'pyagent_grammar_lmfe')\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in names))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "['pyagent_grammar_lmfe', 'pyagent_grammar_lmfe.plugin']"
