"""The Qwen2 (Qwen2.5) and Qwen3 architectures for pyagent: declarations on :mod:`pyagent_model_base`'s decoder."""
