"""Tool-call parsers for pyagent: the model families' formats over one streaming engine."""
