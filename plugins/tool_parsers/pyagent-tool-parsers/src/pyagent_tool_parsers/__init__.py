"""Tool-call parsers for pyagent: the model families' formats over the streaming machinery of pyagent-parser-base."""
