"""The engine's front doors for Python code: :class:`~pyagent_engine.api.llm.LLM` (offline batches and
streams), :class:`~pyagent_engine.api.shared_engine.SharedEngine` (one engine stepped for several
callers) and :class:`~pyagent_engine.api.async_engine.AsyncEngine` (the engine on its own thread, for
the server)."""
