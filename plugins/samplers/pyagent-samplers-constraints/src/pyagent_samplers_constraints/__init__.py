"""Token constraints for pyagent: no-repeat-ngram, bad words, allowed and suppressed tokens and min
tokens (transformers' and vLLM's definitions), and an additive logit bias, batched over rows.

Importing this package is cheap: the implementations (and torch) load only when a sampler is selected.
"""
