"""pyagent-spec-suffix: SuffixDecoding-style speculation from per-request and global token histories."""
