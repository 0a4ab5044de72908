"""The README stays true: its backend matrix is the one the installed specs generate."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_backend_matrix_matches_registered_specs(cli, tmp_path):
    text = README.read_text(encoding="utf-8")
    match = re.search(r"<!-- matrix:start -->\n(.*?)<!-- matrix:end -->", text, re.S)
    assert match, "README.md lost its matrix markers"
    generated = cli("list", "--markdown", cwd=tmp_path).stdout
    assert match.group(1) == generated, (
        "README backend matrix is stale: replace the lines between the matrix markers with the "
        "output of `.venv/bin/pyagent list --markdown`"
    )


def test_quick_start_commands_exist_in_makefile():
    makefile = (README.parent / "Makefile").read_text(encoding="utf-8")
    for target in ("install:", "demo:", "test:", "bench:"):
        assert f"\n{target}" in makefile
    assert "make test" in (README.parent / ".ci" / "run").read_text(encoding="utf-8")
