"""``pyagent serve``: an OpenAI-compatible HTTP server (FastAPI + uvicorn) over the engine.

Modules: :mod:`~pyagent_engine.server.app` builds the application (routes, middleware, error
handlers) around a :class:`~pyagent_engine.server.state.ServerState`; :mod:`~.protocol` holds the
request bodies; :mod:`~.sampling` turns a body into
:class:`~pyagent_engine.requests.params.SamplingParams`; :mod:`~.chat` and :mod:`~.completions` serve the two
generation endpoints, :mod:`~.streaming` their server-sent events; :mod:`~.errors` shapes every
failure as OpenAI's error body; :mod:`~.limits` holds the body-size and API-key guards;
:mod:`~.launch` runs uvicorn with a graceful shutdown. The engine itself steps on its own thread
(:mod:`pyagent_engine.api.async_engine`).
"""
