"""Web frames to the tabs a conversation has open on other instances (a shared store).

Each instance serves its own tabs, and a conversation's tabs may be open on several
(behind a load balancer, or one per host). Whatever one instance sends into a
conversation — replies, notices, stream deltas, typing, approvals — also goes out as
a ``NOTIFY homing_frames``, and every other instance hands it to its own tabs on that
conversation. A frame too big for a notification's payload (PostgreSQL's limit is
8000 bytes) waits in ``web_frames`` and the notification carries its id.

Frames from one instance reach the others in the order it sent them: each is
published before the next is broadcast, on one connection, and what arrives is
handed on by one task in arrival order.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
from collections.abc import Awaitable, Callable
from typing import Any

import structlog

from gateway.store.state import StateDatabase

log = structlog.get_logger(__name__)

FRAMES_CHANNEL = "homing_frames"
#: under PostgreSQL's 8000-byte payload limit, with room for the envelope
PAYLOAD_BYTES = 7500
#: a big frame's row is read within moments; older ones are deleted with the next
KEEP_SECONDS = 300.0

#: hand a frame to this instance's tabs: (conversation, frame, echo_only, live_only)
Deliver = Callable[[str, dict[str, Any], bool, bool], Awaitable[None]]


class FrameFanout:
    def __init__(self, db: StateDatabase, origin: str, deliver: Deliver) -> None:
        self.db = db
        self.origin = origin  # this instance's life: what it published comes back to it
        self._deliver = deliver
        self._arrived: asyncio.Queue[str] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.db.listen(FRAMES_CHANNEL, self._heard)
        self._task = asyncio.create_task(self._hand_on(), name="web-frames")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def publish(self, conversation: str, frame: dict[str, Any], *,
                      echo_only: bool, live_only: bool) -> None:
        """Send ``frame`` to the other instances' tabs on ``conversation``. A failure is
        logged: those tabs miss the frame, and the conversation's transcript keeps it."""
        envelope = {"o": self.origin, "c": conversation, "e": echo_only, "l": live_only}
        payload = json.dumps({**envelope, "f": frame}, ensure_ascii=False)
        try:
            if len(payload.encode()) <= PAYLOAD_BYTES:
                await self.db.fetchone("SELECT pg_notify(?, ?)", (FRAMES_CHANNEL, payload))
            else:
                await self.db.write(_stored(payload, envelope))
        except Exception as exc:  # the store is away: this frame stays on this instance
            log.warning("web_frame_not_shared", conversation=conversation,
                        type=frame.get("type"), error=str(exc))

    def _heard(self, payload: str | None) -> None:
        if payload is not None:  # (a listener that was away: those frames are gone)
            self._arrived.put_nowait(payload)

    async def _hand_on(self) -> None:
        while True:
            payload = await self._arrived.get()
            try:
                message = json.loads(payload)
                if message.get("o") == self.origin:
                    continue
                if "id" in message:
                    row = await self.db.fetchone("SELECT payload FROM web_frames WHERE id = ?",
                                                 (message["id"],))
                    if row is None:
                        log.warning("web_frame_gone", id=message["id"])
                        continue
                    message = json.loads(row[0])
                await self._deliver(message["c"], message["f"], bool(message["e"]),
                                    bool(message["l"]))
            except Exception:  # one bad frame does not stop the rest
                log.exception("web_frame_not_handed_on")


def _stored(payload: str, envelope: dict[str, Any]) -> Callable[[sqlite3.Connection], None]:
    def store(conn: sqlite3.Connection) -> None:
        now = time.time()
        conn.execute("DELETE FROM web_frames WHERE created_at < ?", (now - KEEP_SECONDS,))
        row = conn.execute("INSERT INTO web_frames (payload, created_at) VALUES (?, ?) "
                           "RETURNING id", (payload, now)).fetchone()
        notice = {**envelope, "id": int(row[0])}
        # sent at commit, once the row can be read
        conn.execute("SELECT pg_notify(?, ?)", (FRAMES_CHANNEL, json.dumps(notice)))
    return store
