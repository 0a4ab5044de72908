"""xgrammar as a pyagent grammar backend.

Importing this package is cheap: xgrammar (and torch) load only when the backend is selected.
"""
