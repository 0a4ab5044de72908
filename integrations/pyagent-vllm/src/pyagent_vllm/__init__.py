"""pyagent-vllm: pyagent's plugins inside vLLM (see README.md)."""
