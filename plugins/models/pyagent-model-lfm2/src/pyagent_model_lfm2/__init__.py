"""The LFM2 architecture for pyagent."""
