"""KV-cache eviction policies for pyagent, each O(1) amortised per operation; only the stdlib."""
