"""The Phi-3 architecture for pyagent: a declaration on :mod:`pyagent_model_base`'s decoder."""
