"""Several ``pyagent`` command lines in one subprocess, for tests that check many commands' exit statuses and
output: each command costs its own work, not another Python start-up (torch, the engine, every plugin).

:func:`run_commands` starts ``python -m pyagent_engine.testing.cli_batch SPEC``, which runs each command of
``SPEC`` in turn through the ``pyagent`` console script's entry point (found by its name, as the script finds it), with
file descriptors 1 and 2 sent to the command's own files, and ends the command as the interpreter ends a
script: ``SystemExit``'s status (a message: printed, status 1), any other exception's traceback on stderr
and status 1. Commands run in the order given, in one process: a command that changes the process (a
global it sets) is seen by the next ones, so put the command whose output matters most first.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import traceback
from collections.abc import Mapping, Sequence
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any


def run_commands(commands: Sequence[Sequence[str]], env: Mapping[str, str] | None = None, cwd: Path | None = None,
                 timeout: float = 600) -> list[subprocess.CompletedProcess[str]]:
    """Run each of ``commands`` (``pyagent`` arguments) in one fresh process with ``env`` (default: this
    process's), in ``cwd`` (default: this process's), stdin empty: one :class:`subprocess.CompletedProcess`
    per command, its arguments, status and output.

    Raises:
        AssertionError: the batch process itself failed (its stderr in the message).
    """
    with tempfile.TemporaryDirectory(prefix="pyagent-cli-batch-") as folder:
        spec: list[dict[str, Any]] = [{"args": list(args), "stdout": str(Path(folder) / f"{i}.out"),
                                       "stderr": str(Path(folder) / f"{i}.err")} for i, args in enumerate(commands)]
        (Path(folder) / "spec.json").write_text(json.dumps(spec))
        batch = subprocess.run([sys.executable, "-m", __name__, str(Path(folder) / "spec.json")], capture_output=True,
                               stdin=subprocess.DEVNULL, text=True, timeout=timeout, cwd=cwd, check=False,
                               env=dict(os.environ if env is None else env))
        if batch.returncode != 0:
            raise AssertionError(f"the command batch failed with {batch.returncode}: {batch.stderr}")
        statuses = json.loads(batch.stdout.splitlines()[-1])
        return [subprocess.CompletedProcess(["pyagent", *item["args"]], status, Path(item["stdout"]).read_text(
            errors="replace"), Path(item["stderr"]).read_text(errors="replace")) for item, status in zip(
            spec, statuses, strict=True)]


def _exit_status(code: object) -> int:
    """The status the interpreter exits with for ``SystemExit(code)``, printing a message code to stderr."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def run_one(args: Sequence[str], stdout: str, stderr: str) -> int:
    """``pyagent ARGS`` through the ``pyagent`` console script's entry point, its file descriptors 1 and 2
    in the files ``stdout`` and ``stderr``: its exit status."""
    (script,) = entry_points(group="console_scripts", name="pyagent")
    main = script.load()

    saved = os.dup(1), os.dup(2)
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        with open(stdout, "wb") as out, open(stderr, "wb") as err:
            os.dup2(out.fileno(), 1)
            os.dup2(err.fileno(), 2)
            sys.argv = ["pyagent", *args]
            try:
                main()
                return 0
            except SystemExit as exc:
                return _exit_status(exc.code)
            except Exception:
                traceback.print_exc()
                return 1
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
    finally:
        for fd, copy in zip((1, 2), saved, strict=True):
            os.dup2(copy, fd)
            os.close(copy)


def _main(spec_path: str) -> None:
    """Run the commands of the JSON file ``spec_path`` and print their statuses as one JSON list."""
    statuses = [run_one(item["args"], item["stdout"], item["stderr"])
                for item in json.loads(Path(spec_path).read_text())]
    print(json.dumps(statuses))


if __name__ == "__main__":
    _main(sys.argv[1])
