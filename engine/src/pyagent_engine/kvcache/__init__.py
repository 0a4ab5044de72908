"""KV-cache modelling: block-hash traces, a prefix-cache pool driven by an eviction policy, Belady's
MIN under the same prefix constraint, and a simulator that replays traces through both."""
