"""pyagent-core's version, and the version of the contract it defines.

The contract is everything a plugin, a library or a host relies on: the hook specifications, the
spec records, the interfaces and their context records, the registry's public methods, the
conformance kits and :mod:`pyagent_core.commands`. Its version, :data:`CONTRACT_VERSION`, is the
major and minor part of the distribution's version. While the major version is 0 a new minor
version may break the contract and a patch release never does, so a dependent states the range of
one minor version: ``pyagent-core>=0.3,<0.4``, which :func:`compatible_requirement` writes.

Every distribution of the pyagent repository is released with the same version (CHANGELOG.md at
the repository's root says what changed in each), so the same range names its other
distributions: ``pyagent-parser-base>=0.3,<0.4``.
"""

from __future__ import annotations

__version__ = "0.3.0"

CONTRACT_VERSION = __version__.rpartition(".")[0]
"""The contract's version: the major and minor part of :data:`__version__` (``"0.3"``)."""


def compatible_requirement(dist: str = "pyagent-core", contract: str = CONTRACT_VERSION) -> str:
    """The requirement on ``dist`` that a dependent of ``contract`` states: ``pyagent-core>=0.3,<0.4``.

    While the major version is 0 the range is one minor version; from 1.0 on, one major version
    (``pyagent-core>=1.2,<2``).
    """
    major, minor = (int(part) for part in contract.split("."))
    upper = f"0.{minor + 1}" if major == 0 else str(major + 1)
    return f"{dist}>={contract},<{upper}"
