"""The schedules part of the web chat's REST API.

``GET /api/schedules`` lists every schedule; ``PATCH /api/schedules/{id}``
with ``{"paused": true|false}`` pauses or resumes one; ``DELETE
/api/schedules/{id}`` removes one. They sit behind the web server's token and
origin rules like the rest of its API.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from aiohttp import web

from gateway.platforms.web.input import json_object
from tools.schedule_spec import ScheduleError
from tools.schedules import ScheduleNotFound

if TYPE_CHECKING:
    from tools.scheduler import Scheduler


def schedule_routes(scheduler: Callable[[], Scheduler | None],
                    error: Callable[[int, str], web.HTTPException]) -> list[web.RouteDef]:
    """The routes, over whatever scheduler the gateway runs (looked up per request)."""

    def running() -> Scheduler:
        found = scheduler()
        if found is None:
            raise error(404, "this gateway runs no scheduler")
        return found

    async def list_schedules(request: web.Request) -> web.Response:
        records = await running().list()
        return web.json_response({"schedules": [r.to_dict() for r in records]})

    async def patch_schedule(request: web.Request) -> web.Response:
        body = await json_object(request, error)
        if set(body) != {"paused"} or not isinstance(body["paused"], bool):
            raise error(400, 'send {"paused": true} or {"paused": false}')
        schedule_id = request.match_info["id"]
        try:
            record = (await running().pause(schedule_id) if body["paused"]
                      else await running().resume(schedule_id))
        except ScheduleNotFound:
            raise error(404, "no such schedule") from None
        return web.json_response(record.to_dict())

    async def delete_schedule(request: web.Request) -> web.Response:
        try:
            record = await running().remove(request.match_info["id"])
        except ScheduleNotFound:
            raise error(404, "no such schedule") from None
        except ScheduleError as exc:
            raise error(400, str(exc)) from None
        return web.json_response({"removed": record.to_dict()})

    return [web.get("/api/schedules", list_schedules),
            web.patch("/api/schedules/{id}", patch_schedule),
            web.delete("/api/schedules/{id}", delete_schedule)]

