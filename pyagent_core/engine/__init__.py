"""The reference engine: requests, scheduler, KV blocks, model runner and the sampling loop.

Every stage goes through the registry (attention backend, samplers) and fires the lifecycle hooks.
The user-facing entry point is :class:`pyagent_core.engine.llm.LLM`.
"""
