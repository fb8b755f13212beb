"""The operations endpoints the web server carries for the whole gateway: ``/healthz``
(the event loop answers), ``/readyz`` (the store and every platform are up) and
``/metrics`` (Prometheus)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol

from aiohttp import web

from gateway.contract.host import Connected, MetricsPage
from gateway.store.state import StateDatabase
from gateway.telemetry.metrics import CONTENT_TYPE


class Stored(Protocol):
    @property
    def db(self) -> StateDatabase: ...


class Operated(Protocol):
    """What the endpoints read of the gateway (the runner)."""

    @property
    def store(self) -> Stored: ...
    @property
    def adapters(self) -> Mapping[str, Connected]: ...
    @property
    def metrics(self) -> MetricsPage: ...
    def jobs_running(self) -> int: ...


def ops_routes(gateway: Callable[[], Operated]) -> list[web.RouteDef]:
    async def healthz(request: web.Request) -> web.Response:
        """The event loop answers: that is all this says."""
        return web.json_response({"status": "ok"})

    async def readyz(request: web.Request) -> web.Response:
        running = gateway()
        platforms = {name: a.connected for name, a in running.adapters.items()}
        db = running.store.db
        store_problem = await db.health()
        ready = store_problem is None and all(platforms.values())
        return web.json_response(
            {"ready": ready, "store_open": db.is_open, "store": store_problem or "ok",
             "platforms": platforms},
            status=200 if ready else 503)

    async def metrics(request: web.Request) -> web.Response:
        running = gateway()
        body = await running.metrics.render(running.store.db, running.adapters,
                                            running.jobs_running())
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE})

    return [web.get("/healthz", healthz), web.get("/readyz", readyz),
            web.get("/metrics", metrics)]
