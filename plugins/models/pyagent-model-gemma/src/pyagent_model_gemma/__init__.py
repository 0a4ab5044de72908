"""The Gemma 2 and Gemma 3 (text) architectures for pyagent: declarations on :mod:`pyagent_model_base`'s decoder."""
