"""Telling conversations that the gateway restarts, and that it is back.

On a graceful stop, every conversation with a turn in flight or a job running
hears once — in its own topic — that the gateway is restarting; the places
told are stored, and after the next start each hears "back online" once. Both
are lines of the conversation's transcript, so a tab that connects later sees
them too.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Protocol

import structlog

from gateway.store.state import StateDatabase
from gateway.words.events import MessageKind, SendResult
from gateway.words.route import Route

if TYPE_CHECKING:
    from gateway.contract.adapter import Adapter
    from gateway.sessions.store import SessionStore
    from gateway.words.session_entry import SessionEntry

log = structlog.get_logger(__name__)


class RestartHost(Protocol):
    """What the restart notices ask of the message path (the runner): the platforms,
    the conversations in flight, and a system line in a place."""

    @property
    def adapters(self) -> Mapping[str, Adapter]: ...

    @property
    def store(self) -> SessionStore: ...

    @property
    def busy_session_keys(self) -> Iterable[str]: ...

    def lane_route(self, session_key: str) -> Route | None: ...

    def session_key_for(self, route: Route) -> str: ...

    async def send(self, session: SessionEntry, route: Route, text: str, *,
                   kind: MessageKind = "reply") -> SendResult: ...

    async def post(self, route: Route, text: str, *,
                   kind: MessageKind = "reply") -> SendResult: ...

RESTARTING = ("The gateway is restarting. Work in progress here keeps running, and its "
              "results will still arrive; I'll say when I'm back.")
BACK_ONLINE = "Back online."


def place_of(route: Route) -> str:
    return f"{route.platform}:{route.chat_id}:{route.thread_id or ''}"


async def announce_restart(runner: RestartHost, db: StateDatabase,
                           routes: Iterable[Route]) -> int:
    """Tell each place once (whatever many turns or jobs it has) and remember it."""
    places: dict[str, Route] = {}
    for route in routes:
        places.setdefault(place_of(route), route.with_anchor(None))
    told = 0
    for place, route in places.items():
        adapter = runner.adapters.get(route.platform)
        if adapter is None or not adapter.connected:
            continue
        result = await _say(runner, route, RESTARTING)
        if not result.ok:
            log.warning("restart_notice_failed", place=place, error=result.error)
            continue
        await db.write([("INSERT INTO restart_notices (place, route, told_at) VALUES (?, ?, ?) "
                         "ON CONFLICT (place) DO UPDATE SET route = excluded.route, "
                         "told_at = excluded.told_at",
                         (place, json.dumps(route.to_dict()), time.time()))])
        told += 1
    if told:
        log.info("restart_announced", places=told)
    return told


class BackOnline:
    """Says "back online" at start-up, and again for each platform as it connects."""

    def __init__(self, runner: RestartHost, db: StateDatabase) -> None:
        self.runner = runner
        self.db = db
        self._lock = asyncio.Lock()  # one announcement at a time: each place once
        #: announcements under way (kept: the loop holds only weak references to tasks)
        self._tasks: set[asyncio.Task[int]] = set()

    async def announce(self) -> int:
        async with self._lock:
            return await announce_back_online(self.runner, self.db)

    def platform_connected(self, platform: str) -> None:
        task = asyncio.get_running_loop().create_task(self.announce())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


async def announce_back_online(runner: RestartHost, db: StateDatabase) -> int:
    """Say "back online" once in each place told about the restart, on connected platforms."""
    told = 0
    for place, route_json in await db.fetchall("SELECT place, route FROM restart_notices"):
        route = Route.from_dict(json.loads(route_json))
        adapter = runner.adapters.get(route.platform)
        if adapter is None or not adapter.connected:
            continue  # stays stored: told after a later start
        result = await _say(runner, route, BACK_ONLINE)
        if result.ok or result.permanent:
            await db.write([("DELETE FROM restart_notices WHERE place = ?", (place,))])
            told += result.ok
    if told:
        log.info("back_online_announced", places=told)
    return told


async def _say(runner: RestartHost, route: Route, text: str) -> SendResult:
    """Said in the place's live session (and its transcript), or just posted there."""
    session = await runner.store.live_session(runner.session_key_for(route))
    if session is not None:
        return await runner.send(session, route, text, kind="system")
    return await runner.post(route, text, kind="system")


def places_in_progress(runner: RestartHost, job_routes: Iterable[Route]) -> list[Route]:
    """Where a turn is in flight or a job runs right now."""
    routes = [runner.lane_route(key) for key in runner.busy_session_keys]
    return [r for r in (*routes, *job_routes) if r is not None]
