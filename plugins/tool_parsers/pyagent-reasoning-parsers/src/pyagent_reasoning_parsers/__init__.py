"""Reasoning parsers for pyagent: thinking blocks and harmony's analysis channel, streaming-exact."""
