"""The Mamba2 architecture for pyagent."""
