"""``GET /metrics``: the engine's Prometheus metrics, kept by the metrics plugin (see ``docs/metrics.md``).

The route is mounted through :func:`pyagent_engine.server.app.build_app`'s ``routers``, the seam for any
route a plugin or embedding application adds; it reads the plugin's registry for the engine and
never the engine itself.
"""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import Response

from pyagent_engine.server.errors import APIError
from pyagent_engine.server.state import ServerState


def metrics_router(state: ServerState) -> APIRouter:
    """A router answering ``GET /metrics`` in Prometheus' text format (404 when the metrics plugin is off)."""
    router = APIRouter()
    engine_id = state.engine.llm.engine.info.engine_id

    @router.get("/metrics", summary="The engine's metrics in Prometheus' text format.")
    async def metrics() -> Response:
        from pyagent_engine.metrics.prometheus import exposition

        found = exposition(engine_id)
        if found is None:
            raise APIError(404, "no metrics: the metrics plugin is disabled (PYAGENT_DISABLE_PLUGINS) or the "
                                "engine has stopped")
        body, content_type = found
        return Response(body, media_type=content_type)

    return router
