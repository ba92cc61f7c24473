"""The server itself: ``/healthz`` (the writer's counters, open connections, a cluster node's
bus) for anyone, and ``/metrics`` (Prometheus, :mod:`room.metrics`) for server admins; both
described in docs/operators.md, "Health"."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from room import __version__
from room import metrics as room_metrics
from room.api.requests import core_of, identity
from room.errors import ForbiddenError
from room.infra.bus import ClusterHub


async def healthz(request: Request) -> Response:
    core = core_of(request)
    mcp = getattr(request.app.state, "mcp", None)
    ok = await core.db.read(lambda conn: conn.execute("SELECT 1").fetchone()[0] == 1)
    # A cluster's node (docs/cluster.md) says how its bus is. The bus carries hints only (the
    # database poll covers for it), so a node whose bus is down still answers 200 and serves;
    # ``degraded`` names it, for a balancer or an operator to read.
    bus = core.hub.bus.health() if isinstance(core.hub, ClusterHub) else {"configured": False}
    return JSONResponse(
        {
            "ok": bool(ok),
            "degraded": [] if bus.get("up", True) else ["bus_down"],
            "version": __version__,
            # The store served on (docs/storage.md): its backend and the server's version.
            "database": core.db.info,
            "connections": core.hub.connections,
            "subscribers": core.hub.subscriber_count(),
            # Open MCP sessions of external agents (room.mcp_server, set on the app by its lifespan).
            "mcp": {"sessions": mcp.session_count() if mcp is not None else 0},
            "bus": bus,
            "writer": {
                "batches": core.db.stats.batches,
                "jobs": core.db.stats.jobs,
                "largest_batch": core.db.stats.largest_batch,
                "retries": core.db.stats.retries,
            },
        }
    )


async def metrics(request: Request) -> Response:
    """Prometheus metrics (room.metrics), for server admins only."""
    who = await identity(request)
    if who.user is None or not who.user.is_admin:
        raise ForbiddenError("only a server admin reads the metrics", code="admin_only")
    return Response(await room_metrics.render(core_of(request)),
                    media_type=room_metrics.CONTENT_TYPE)  # fmt: skip


endpoints = [
    Route("/healthz", healthz),
    Route("/metrics", metrics),
]
