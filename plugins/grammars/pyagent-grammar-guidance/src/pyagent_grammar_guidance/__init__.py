"""llguidance (the Rust core of guidance) as a pyagent grammar backend.

Importing this package is cheap: llguidance (and torch) load only when the backend is selected.
"""
