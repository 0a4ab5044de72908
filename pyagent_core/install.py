"""Install hints for the distributions of the pyagent repository, which are on no package index yet.

A spec record's ``install_hint`` says what to run when a backend's requirement is missing. A bare
``pip install pyagent-tool-parsers`` would ask an index for a name that nobody has published there
(and that anyone could register), so every first-party hint names the distribution and where it
comes from today: the wheel folder ``make wheels`` fills in a pyagent checkout, from which pip
resolves the distribution and its pyagent dependencies by name, and the distribution's folder in
the repository.
"""

from __future__ import annotations

WHEEL_FOLDER = "dist"
"""Where ``make wheels`` puts the wheels and sdists, relative to the checkout."""


def checkout_install_hint(dist: str, folder: str) -> str:
    """The install hint of the repository distribution ``dist``, whose source is in ``folder``.

    >>> checkout_install_hint("pyagent-tool-parsers", "plugins/tool_parsers/pyagent-tool-parsers")
    'pip install --find-links dist pyagent-tool-parsers (in a pyagent checkout, after `make wheels`; \
source: plugins/tool_parsers/pyagent-tool-parsers; not on PyPI)'
    """
    return (f"pip install --find-links {WHEEL_FOLDER} {dist} (in a pyagent checkout, after `make wheels`; "
            f"source: {folder}; not on PyPI)")
