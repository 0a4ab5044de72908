"""The ``torch-sdpa`` attention backend for pyagent: the engine's reference and default.

Importing this package is cheap: the backend (and torch) load only when it is selected.
"""
