"""Measuring code behind ``pyagent bench``: one module per area, each comparing against a named peer."""
