"""The engine's ``pyagent`` commands: ``generate``, ``chat``, ``serve`` and ``bench``.

They join the core's command line through the ``pyagent_register_commands`` hook of
:mod:`pyagent_engine.plugin`, as a third party's commands would. Importing these modules loads
neither torch nor a backend; the commands import the engine inside their bodies.
"""
