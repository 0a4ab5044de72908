"""Mixer backends for pyagent: ``torch`` (the reference) and ``kernels`` (C decode steps)."""
