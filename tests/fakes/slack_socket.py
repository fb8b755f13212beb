"""The fake Slack's Socket Mode: connection URLs, the WebSocket, envelopes and their
acknowledgements, and button presses.

As on Slack (docs.slack.dev, "Using Socket Mode"): ``apps.connections.open`` with the
app-level token hands out a one-time ``wss`` URL (here ``ws://``); a connection gets
``hello`` first, then envelopes (``events_api`` with an ``event_callback`` payload,
``interactive`` with a ``block_actions`` one); the client acknowledges each by sending
back ``{"envelope_id": ...}``. An events_api envelope not acknowledged within
``ack_deadline`` is sent again (a new envelope id, the same ``event_id``,
``retry_attempt`` + 1, ``retry_reason`` "timeout"), at most three retries; so is one
left unacknowledged on a connection that closed, to the next connection. Events that
happen with no connection open wait for one. With several connections open, each
envelope goes to one of them. Ping frames are answered (aiohttp's autoping).

Kept apart from the Web API because it is a protocol of its own with its own state
(tickets, sockets, the outbox and the envelopes awaiting an ack).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from aiohttp import WSMsgType, web

from tests.fakes.slack_world import SlackState

__all__ = ["Envelope", "SlackSocket", "MAX_RETRIES"]

JSON = dict[str, Any]

#: Slack retries an event three times, then gives up on it
MAX_RETRIES = 3


@dataclass
class Envelope:
    """One push to the app: what was sent, and where it waits for its ack."""

    envelope_id: str
    type: str
    payload: JSON
    event_id: str | None = None
    retry_attempt: int = 0
    retry_reason: str = ""
    ws: web.WebSocketResponse | None = None
    timer: asyncio.Task[None] | None = field(default=None, repr=False)

    def frame(self) -> JSON:
        frame: JSON = {"envelope_id": self.envelope_id, "type": self.type,
                       "payload": self.payload, "accepts_response_payload": False}
        if self.type == "events_api":
            frame.update(retry_attempt=self.retry_attempt, retry_reason=self.retry_reason)
        return frame

    def retry(self, reason: str) -> Envelope:
        """The same event again under a new envelope id, as Slack retries it."""
        return Envelope(str(uuid.uuid4()), self.type, self.payload, self.event_id,
                        self.retry_attempt + 1, reason)


class SlackSocket(SlackState):
    """The Socket Mode half of :class:`~tests.fakes.slack_server.FakeSlack`."""

    ack_deadline: float
    acked: set[str]
    responses: list[JSON]
    envelopes: list[JSON]

    def _init_socket(self) -> None:
        self.acked = set()
        self.responses = []  # what the bot POSTed to a response_url
        self.envelopes = []  # every envelope frame sent, redeliveries included
        self.connections = 0  # sockets that connected (hello sent), ever
        self._tickets: set[str] = set()
        self._sockets: list[web.WebSocketResponse] = []
        self._outbox: deque[Envelope] = deque()
        self._outbox_ready = asyncio.Event()
        self._unacked: dict[str, Envelope] = {}
        self._duplicate_next = False
        self._socket_tasks: set[asyncio.Task[Any]] = set()

    def _add_socket_routes(self, app: web.Application) -> None:
        app.router.add_get("/socket", self._handle_socket)
        app.router.add_post("/actions/{team}/{action}/{token}", self._handle_response_url)

    async def _close_sockets(self) -> None:
        for ws in list(self._sockets):
            await ws.close()
        for task in list(self._socket_tasks):
            task.cancel()
        for envelope in self._unacked.values():
            if envelope.timer is not None:
                envelope.timer.cancel()

    # ------------------------------------------------------------------ control

    @property
    def connected(self) -> int:
        """How many Socket Mode connections are open now."""
        return len(self._sockets)

    @property
    def unacked(self) -> list[str]:
        """Envelope ids sent and not yet acknowledged."""
        return list(self._unacked)

    @property
    def pending(self) -> int:
        """How many envelopes wait to be sent (no connection open, or a retry due)."""
        return len(self._outbox)

    def lose_undelivered(self, *, keep: int = 0) -> int:
        """Slack's retries ran out for the events no connection took (an outage longer
        than its last retry, minutes after each event): those waiting for a connection
        are dropped, but the newest ``keep`` (late enough for a retry still to come);
        their messages stay in the history. Returns how many were dropped."""
        events = [e for e in self._outbox if e.type == "events_api"]
        lost = events[:max(0, len(events) - keep)]
        for envelope in lost:
            self._outbox.remove(envelope)
        return len(lost)

    def disconnect_socket(self, reason: str = "refresh_requested") -> None:
        """Tell every connection ``{"type": "disconnect", "reason": ...}`` and close it, as
        Slack does before it moves a connection; what was not acked there goes again."""
        for ws in list(self._sockets):
            self._spawn(self._disconnect(ws, reason))

    async def _disconnect(self, ws: web.WebSocketResponse, reason: str) -> None:
        with contextlib.suppress(ConnectionError):
            await ws.send_str(json.dumps({"type": "disconnect", "reason": reason,
                                          "debug_info": {"host": "applink-fake"}}))
        await ws.close()

    # ------------------------------------------------------------------ apps.connections.open

    async def _api_apps_connections_open(self, params: JSON) -> JSON:
        ticket = uuid.uuid4().hex
        self._tickets.add(ticket)
        return {"url": f"ws://127.0.0.1:{self.port}/socket?ticket={ticket}"}

    # ------------------------------------------------------------------ what goes out

    def _push_event(self, event: JSON) -> None:
        """An event as the app receives it: an event_callback in an events_api envelope."""
        event_id = self._next_event_id()
        payload: JSON = {
            "token": "fake-verification-token", "team_id": self.team_id,
            "context_team_id": self.team_id, "context_enterprise_id": None,
            "api_app_id": self.app_id, "event": event, "type": "event_callback",
            "event_id": event_id, "event_time": int(time.time()),
            "authorizations": [{"enterprise_id": None, "team_id": self.team_id,
                                "user_id": self.bot_user_id, "is_bot": True,
                                "is_enterprise_install": False}],
            "is_ext_shared_channel": False,
            "event_context": f"4-{uuid.uuid4().hex}"}
        envelope = Envelope(str(uuid.uuid4()), "events_api", payload, event_id)
        self._send(envelope)
        if self._duplicate_next:
            self._duplicate_next = False
            self._send(envelope.retry("timeout"))

    def _push_interactive(self, payload: JSON) -> str:
        envelope = Envelope(str(uuid.uuid4()), "interactive", payload)
        self._send(envelope)
        return envelope.envelope_id

    def _send(self, envelope: Envelope, *, first: bool = False) -> None:
        if first:
            self._outbox.appendleft(envelope)
        else:
            self._outbox.append(envelope)
        self._outbox_ready.set()

    def _block_actions(self, channel: str, message_ts: str, action_id: str, value: str,
                       user: str, *, stale: bool = False) -> JSON:
        """The payload of a press on button ``action_id`` of the bot's message (``stale``:
        one it may no longer have)."""
        room = self.channels.get(channel)
        message = room.find(message_ts) if room is not None else None
        if room is None or message is None:
            raise KeyError(f"no message {message_ts} in {channel}")
        found = _find_button(message.get("blocks") or [], action_id)
        if found is None and stale:
            found = ("", {})  # the block and button the client still shows
        if found is None:
            raise KeyError(f"no button {action_id!r} on message {message_ts} in {channel}")
        block_id, button = found
        action_token = uuid.uuid4().hex[:24]
        container: JSON = {"type": "message", "message_ts": message_ts, "channel_id": channel,
                           "is_ephemeral": False}
        if message.get("thread_ts"):
            container["thread_ts"] = message["thread_ts"]
        return {
            "type": "block_actions",
            "user": {"id": user, "username": "alice", "name": "alice", "team_id": self.team_id},
            "api_app_id": self.app_id, "token": "fake-verification-token",
            "container": container,
            "trigger_id": f"{int(time.time())}.{uuid.uuid4().int % 10**12}.{uuid.uuid4().hex}",
            "team": {"id": self.team_id, "domain": self.team_domain},
            "enterprise": None, "is_enterprise_install": False,
            "channel": {"id": channel, "name": room.name},
            "message": dict(message), "state": {"values": {}},
            "response_url": (f"{self.base_url}/actions/{self.team_id}/"
                             f"{uuid.uuid4().int % 10**13}/{action_token}"),
            "actions": [{"action_id": action_id, "block_id": block_id,
                         "text": button.get("text"), "value": value, "type": "button",
                         "action_ts": f"{time.time():.6f}"}],
        }

    # ------------------------------------------------------------------ the socket

    async def _handle_socket(self, request: web.Request) -> web.StreamResponse:
        ticket = request.query.get("ticket", "")
        if ticket not in self._tickets:
            # a URL is good for one connection; a stale or made-up one is refused
            return web.Response(status=401, text="invalid or already used ticket")
        self._tickets.discard(ticket)
        ws = web.WebSocketResponse(autoping=True)
        await ws.prepare(request)
        await ws.send_str(json.dumps({
            "type": "hello", "num_connections": len(self._sockets) + 1,
            "debug_info": {"host": "applink-fake", "build_number": 1,
                           "approximate_connection_time": 18060},
            "connection_info": {"app_id": self.app_id}}))
        self._sockets.append(ws)
        self.connections += 1
        self._wake()
        sender = self._spawn(self._send_loop(ws))
        try:
            async for message in ws:
                if message.type == WSMsgType.TEXT:
                    self._on_frame(message.data)
        finally:
            sender.cancel()
            self._sockets.remove(ws)
            self._requeue_unacked(ws)
            self._wake()
        return ws

    async def _send_loop(self, ws: web.WebSocketResponse) -> None:
        while not ws.closed:
            if not self._outbox:
                self._outbox_ready.clear()
                await self._outbox_ready.wait()
                continue
            envelope = self._outbox.popleft()
            frame = envelope.frame()
            try:
                await ws.send_str(json.dumps(frame))
            except ConnectionError:
                self._send(envelope, first=True)  # never arrived: the next connection gets it
                return
            envelope.ws = ws
            self.envelopes.append(frame)
            self._unacked[envelope.envelope_id] = envelope
            envelope.timer = self._spawn(self._ack_timer(envelope))
            self._wake()

    async def _ack_timer(self, envelope: Envelope) -> None:
        await asyncio.sleep(self.ack_deadline)
        if self._unacked.pop(envelope.envelope_id, None) is not None:
            self._retry(envelope, "timeout")

    def _retry(self, envelope: Envelope, reason: str) -> None:
        """Send an unacked events_api envelope again, as Slack retries; a button press
        is not retried (the person sees an error instead)."""
        if envelope.type == "events_api" and envelope.retry_attempt < MAX_RETRIES:
            self._send(envelope.retry(reason), first=True)

    def _requeue_unacked(self, ws: web.WebSocketResponse) -> None:
        for envelope in [e for e in self._unacked.values() if e.ws is ws]:
            del self._unacked[envelope.envelope_id]
            if envelope.timer is not None:
                envelope.timer.cancel()
            self._retry(envelope, "timeout")

    def _on_frame(self, data: str) -> None:
        try:
            frame = json.loads(data)
        except ValueError:
            return
        envelope_id = frame.get("envelope_id") if isinstance(frame, dict) else None
        if not isinstance(envelope_id, str):
            return
        envelope = self._unacked.pop(envelope_id, None)
        if envelope is None:
            return  # unknown or already retried: Slack ignores a late ack
        self.acked.add(envelope_id)
        if envelope.timer is not None:
            envelope.timer.cancel()
        # the event is delivered: its other copies in flight are not retried
        for other in [e for e in self._unacked.values()
                      if e.event_id is not None and e.event_id == envelope.event_id]:
            if other.timer is not None:
                other.timer.cancel()
        self._wake()

    # ------------------------------------------------------------------ response_url

    async def _handle_response_url(self, request: web.Request) -> web.Response:
        """A bot's answer to a press through its response_url (JSON): recorded in
        :attr:`responses` (the message pressed is left as it is)."""
        try:
            body = await request.json()
        except ValueError:
            return web.Response(status=400, text="invalid_payload")
        self.responses.append(body)
        self._wake()
        return web.json_response({"ok": True})

    def _spawn(self, coro: Any) -> asyncio.Task[Any]:
        task: asyncio.Task[Any] = asyncio.ensure_future(coro)
        self._socket_tasks.add(task)
        task.add_done_callback(self._socket_tasks.discard)
        return task


def _find_button(blocks: list[Any], action_id: str) -> tuple[str, JSON] | None:
    for block in blocks:
        if not isinstance(block, dict):
            continue
        elements = list(block.get("elements") or []) if block.get("type") == "actions" else []
        accessory = block.get("accessory")
        if isinstance(accessory, dict):
            elements.append(accessory)
        for element in elements:
            if isinstance(element, dict) and element.get("action_id") == action_id:
                return str(block.get("block_id") or ""), element
    return None

