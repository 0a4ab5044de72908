"""The DeepSeek-V3 architecture for pyagent."""
