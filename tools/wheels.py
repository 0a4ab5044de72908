"""Build a wheel and an sdist of every distribution of the repository into one folder (``make wheels``).

Each distribution's sdist is built from its folder, then its wheel from that sdist (so an sdist that
misses a file fails here, not on a user's machine), with the build backend of the environment this
runs in (``--no-isolation``: flit_core for the pure distributions, setuptools and cffi for
pyagent-kernels). Nothing is written into the checkout: flit builds in memory, and pyagent-kernels'
``setup.py`` sends setuptools' scratch folders to a temporary folder. ``twine check --strict``
checks what was built.

A distribution is rebuilt only when a file of its folder changed: ``OUT/.sources/<name>.json``
keeps the digest of its files and the names of what was built from them. From the folder, pip
installs by name and resolves the pyagent dependencies there:
``pip install --find-links dist pyagent-tool-parsers``.

Usage: ``python tools/wheels.py [--out dist] [DIST_FOLDER ...]`` (default: every distribution).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
import tarfile
import tempfile
import tomllib
from pathlib import Path

from build import ProjectBuilder

ROOT = Path(__file__).resolve().parents[1]
PATTERNS = ("pyproject.toml", "csrc/pyproject.toml", "engine/pyproject.toml", "libs/*/pyproject.toml",
            "plugins/*/*/pyproject.toml", "integrations/*/pyproject.toml")


def distribution_folders() -> list[Path]:
    """Every distribution folder of the repository: the core (the root), kernels, engine, libraries, plugins,
    integrations."""
    return [path.parent for pattern in PATTERNS for path in sorted(ROOT.glob(pattern))]


def source_files(folder: Path, others: list[Path]) -> list[Path]:
    """The files of ``folder`` that git tracks or would track (untracked but not ignored), without those of
    the distributions nested in it (the root holds every other one)."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", "."],
                            cwd=folder, capture_output=True, check=True).stdout.decode().split("\0")
    nested = [other for other in others if other != folder and other.is_relative_to(folder)]
    files = [folder / name for name in listed if name]
    return sorted(f for f in files if f.is_file() and not any(f.is_relative_to(n) for n in nested))


def digest(files: list[Path]) -> str:
    """A digest of the files' paths (relative to the repository) and contents."""
    sha = hashlib.sha256()
    for file in files:
        sha.update(file.relative_to(ROOT).as_posix().encode() + b"\0" + file.read_bytes() + b"\0")
    return sha.hexdigest()


def build(folder: Path, out: Path) -> list[Path]:
    """The sdist of ``folder``, then the wheel built from that sdist, both written into ``out``."""
    sdist = Path(ProjectBuilder(folder).build("sdist", out))
    with tempfile.TemporaryDirectory(prefix="pyagent-wheel-") as scratch:
        with tarfile.open(sdist) as archive:
            archive.extractall(scratch, filter="data")
        (unpacked,) = Path(scratch).iterdir()
        wheel = Path(ProjectBuilder(unpacked).build("wheel", out))
    return [sdist, wheel]


def main(argv: list[str] | None = None) -> int:
    """Build what is out of date into ``--out``, then run ``twine check --strict`` on it."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "dist", help="the wheel folder (default: dist/)")
    parser.add_argument("folders", nargs="*", type=Path, help="distribution folders (default: all)")
    args = parser.parse_args(argv)
    out: Path = args.out.resolve()
    stamps = out / ".sources"
    stamps.mkdir(parents=True, exist_ok=True)
    everything = distribution_folders()
    chosen = [f.resolve() for f in args.folders] or everything
    built: list[Path] = []
    fresh: dict[Path, str] = {}  # stamps to write once twine has checked what was built
    for folder in chosen:
        name = tomllib.loads((folder / "pyproject.toml").read_text(encoding="utf-8"))["project"]["name"]
        stamp = stamps / f"{name}.json"
        key = digest(source_files(folder, everything))
        previous = json.loads(stamp.read_text(encoding="utf-8")) if stamp.exists() else {}
        if previous.get("digest") == key and all((out / f).exists() for f in previous.get("files", ())):
            continue
        for old in previous.get("files", ()):
            (out / old).unlink(missing_ok=True)
        print(f"building {name} from {folder.relative_to(ROOT).as_posix() or '.'}", flush=True)
        files = build(folder, out)
        built += files
        fresh[stamp] = json.dumps({"digest": key, "files": [f.name for f in files]})
    if built:
        subprocess.run([sys.executable, "-m", "twine", "check", "--strict", *map(str, built)], check=True)
    for stamp, record in fresh.items():
        stamp.write_text(record, encoding="utf-8")
    print(f"{len(built) // 2} of {len(chosen)} distributions built into {out}")
    return 0


if __name__ == "__main__":
    if shutil.which("git") is None:
        sys.exit("tools/wheels.py needs git to list each distribution's files")
    sys.exit(main())
