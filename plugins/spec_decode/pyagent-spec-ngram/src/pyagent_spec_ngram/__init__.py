"""pyagent-spec-ngram: prompt-lookup speculative decoding (n-gram matching over prompt and output)."""
