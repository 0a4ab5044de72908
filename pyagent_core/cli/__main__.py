"""``python -m pyagent_core.cli``: the same as the ``pyagent`` command."""

from pyagent_core.cli import main

main()
