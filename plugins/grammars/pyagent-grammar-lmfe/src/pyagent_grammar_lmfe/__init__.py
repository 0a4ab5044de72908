"""lm-format-enforcer as a pyagent grammar backend.

Importing this package is cheap: lm-format-enforcer (and torch) load only when the backend is selected.
"""
