"""The Qwen3-Next architecture for pyagent."""
