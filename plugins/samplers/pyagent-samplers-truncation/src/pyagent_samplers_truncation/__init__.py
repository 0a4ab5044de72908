"""Truncation samplers for pyagent: typical-p, eta and epsilon (transformers' definitions), top-n-sigma
and dynamic temperature (llama.cpp's definitions), batched over rows with per-request parameters.

Importing this package is cheap: the implementations (and torch) load only when a sampler is selected.
"""
