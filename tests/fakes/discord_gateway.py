"""The fake Discord's gateway: the WebSocket a discord.py client connects, identifies and
resumes on, and the dispatches it receives.

Kept apart from the REST API because it is a protocol of its own — HELLO, heartbeats,
IDENTIFY/READY, RESUME and its replay, RECONNECT and INVALID_SESSION, intents — with
its own state (the session, its sequence numbers and log, the attached socket). Mixed
into :class:`~tests.fakes.discord_server.FakeDiscord`, which holds that state.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from dataclasses import dataclass, field
from typing import Any

from aiohttp import WSMsgType, web

from tests.fakes.discord_rest import json_response, now_iso

__all__ = ["INTENT_MESSAGE_CONTENT", "DiscordGateway", "Session"]

JSON = dict[str, Any]

INTENT_GUILD_MEMBERS = 1 << 1
INTENT_GUILD_PRESENCES = 1 << 8
INTENT_MESSAGE_CONTENT = 1 << 15
PRIVILEGED_INTENTS = INTENT_GUILD_MEMBERS | INTENT_GUILD_PRESENCES | INTENT_MESSAGE_CONTENT


@dataclass
class Session:
    """A gateway session: its sequence counter, dispatch log and attached socket."""

    session_id: str
    intents: int
    seq: int = 0
    log: list[JSON] = field(default_factory=list)  # dispatch frames, for RESUME replay
    ws: web.WebSocketResponse | None = None


class DiscordGateway:
    """The gateway half of :class:`~tests.fakes.discord_server.FakeDiscord`."""

    # the state FakeDiscord keeps for it
    gateway_url: str
    token: str
    bot_id: int
    bot_user: JSON
    guild_id: int
    guild_name: str
    heartbeat_interval_ms: int
    allowed_privileged_intents: int
    undelivered: list[JSON]
    identify_count: int
    resume_count: int
    connection_count: int
    refused_count: int
    _channels: dict[int, JSON]
    _roles: dict[int, JSON]
    bot_roles: list[int]
    _session: Session | None
    _sockets: set[web.WebSocketResponse]
    _gateway_down: bool
    _lock: asyncio.Lock
    _ready: asyncio.Event

    # ------------------------------------------------------------------ control

    async def wait_until_ready(self, timeout: float = 10) -> None:
        """Wait until a client identified (READY sent) or resumed (RESUMED sent).

        READY sent is not on_ready yet: discord.py first waits
        ``guild_ready_timeout`` for guilds.
        """
        try:
            async with asyncio.timeout(timeout):
                await self._ready.wait()
        except TimeoutError:
            raise TimeoutError(f"no client identified or resumed within {timeout}s") from None

    async def drop_connection(self, *, reconnect_op: bool = True, close_code: int = 4000) -> None:
        """Send op 7 RECONNECT (if ``reconnect_op``), then close the socket with ``close_code``.

        The session survives: discord.py RESUMEs and gets what it missed.
        Close codes 4004 and 4010-4014 are fatal for discord.py, as on Discord.
        """
        ws = await self._detach()
        if reconnect_op:
            await _send(ws, {"op": 7, "d": None, "s": None, "t": None})
        await ws.close(code=close_code, message=b"dropped by the fake")

    async def invalidate_session(self, resumable: bool = False) -> None:
        """Send op 9 INVALID_SESSION; unless ``resumable`` the session is discarded.

        discord.py then closes the socket; after a non-resumable op 9 it sleeps
        5 s before it IDENTIFYs again. Dispatches made before that are lost
        (kept in ``undelivered``), as on Discord.
        """
        ws = await self._detach(discard=not resumable)
        await _send(ws, {"op": 9, "d": resumable, "s": None, "t": None})

    def set_gateway_down(self, down: bool) -> None:
        """While down, new gateway connections are refused with HTTP 503."""
        self._gateway_down = down

    @property
    def session_id(self) -> str | None:
        """The current gateway session id, if a client identified."""
        return self._session.session_id if self._session else None

    @property
    def connected(self) -> bool:
        """Whether a client socket is attached to the session right now."""
        return self._session is not None and self._session.ws is not None

    # ------------------------------------------------------------------ internals

    async def _gateway(self, request: web.Request) -> web.StreamResponse:
        if self._gateway_down:
            self.refused_count += 1
            return json_response({"code": 0, "message": "503: Service Unavailable"}, 503)
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        self._sockets.add(ws)
        self.connection_count += 1
        try:
            await _send(ws, {"op": 10, "d": {"heartbeat_interval": self.heartbeat_interval_ms},
                             "s": None, "t": None})
            async for msg in ws:
                if msg.type is not WSMsgType.TEXT:
                    continue
                frame = json.loads(msg.data)
                op, data = frame.get("op"), frame.get("d")
                if op == 1:
                    await _send(ws, {"op": 11, "d": None, "s": None, "t": None})
                elif op == 2:
                    await self._identify(ws, data)
                elif op == 6:
                    await self._resume(ws, data)
                # op 3 (presence), 4 (voice), 8 (request members): accepted, ignored
        finally:
            self._sockets.discard(ws)
            if self._session is not None and self._session.ws is ws:
                self._session.ws = None
                self._ready.clear()
        return ws

    async def _identify(self, ws: web.WebSocketResponse, data: JSON) -> None:
        if data.get("token") != self.token:
            await ws.close(code=4004, message=b"Authentication failed.")
            return
        intents = int(data.get("intents") or 0)
        if intents & PRIVILEGED_INTENTS & ~self.allowed_privileged_intents:
            await ws.close(code=4014, message=b"Disallowed intent(s).")
            return
        async with self._lock:
            # one session at a time, unlike Discord, which would keep both and dispatch
            # every event to each: a test that needs one session per bot counts
            # identify_count (tests/test_pg_discord.py), it never relies on this
            if self._session is not None and self._session.ws is not None:
                await self._session.ws.close(code=4000, message=b"session replaced")
            self._session = Session(session_id=uuid.uuid4().hex, intents=intents, ws=ws)
            self.identify_count += 1
            await self._dispatch_locked("READY", self._ready_payload())
            await self._dispatch_locked("GUILD_CREATE", self._guild_payload())
            self._ready.set()

    async def _resume(self, ws: web.WebSocketResponse, data: JSON) -> None:
        if data.get("token") != self.token:
            await ws.close(code=4004, message=b"Authentication failed.")
            return
        async with self._lock:
            session = self._session
            if session is None or data.get("session_id") != session.session_id:
                await _send(ws, {"op": 9, "d": False, "s": None, "t": None})
                return
            if session.ws is not None and session.ws is not ws:
                await session.ws.close(code=4000, message=b"session resumed elsewhere")
            session.ws = ws
            seq = int(data.get("seq") or 0)
            for frame in session.log:
                if frame["s"] > seq and frame["t"] != "READY":
                    await self._send_attached(frame)
            session.seq += 1  # RESUMED gets a sequence number but is not replayed itself
            await self._send_attached({"op": 0, "t": "RESUMED", "s": session.seq, "d": {}})
            self.resume_count += 1
            self._ready.set()

    async def _dispatch(self, event: str, data: JSON) -> None:
        async with self._lock:
            await self._dispatch_locked(event, data)

    async def _dispatch_locked(self, event: str, data: JSON) -> None:
        session = self._session
        if session is None:
            self.undelivered.append({"t": event, "d": data})
            return
        if event == "MESSAGE_CREATE" and not session.intents & INTENT_MESSAGE_CONTENT:
            data = _without_content(data, self.bot_id)
        session.seq += 1
        frame = {"op": 0, "t": event, "s": session.seq, "d": data}
        session.log.append(frame)
        await self._send_attached(frame)

    async def _send_attached(self, frame: JSON) -> None:
        """Send to the session's socket, if any; a failing socket is detached."""
        session = self._session
        if session is None or session.ws is None:
            return
        if not await _send(session.ws, frame):
            session.ws = None
            self._ready.clear()

    async def _detach(self, *, discard: bool = False) -> web.WebSocketResponse:
        """Take the socket off the session (dispatches are only logged from now on)."""
        async with self._lock:
            session = self._session
            if session is None or session.ws is None:
                raise RuntimeError("no client is connected to the fake gateway")
            ws, session.ws = session.ws, None
            if discard:
                self._session = None
            self._ready.clear()
        return ws

    def _ready_payload(self) -> JSON:
        assert self._session is not None
        return {"v": 10, "user": self.bot_user, "session_id": self._session.session_id,
                "session_type": "normal", "resume_gateway_url": self.gateway_url,
                "guilds": [{"id": str(self.guild_id), "unavailable": True}],
                "application": {"id": str(self.bot_id), "flags": 0},
                "private_channels": [], "relationships": [], "presences": [],
                "guild_join_requests": [], "geo_ordered_rtc_regions": [], "user_settings": {}}

    def _guild_payload(self) -> JSON:
        channels = [c for c in self._channels.values() if c["type"] == 0]
        threads = [c for c in self._channels.values() if c["type"] == 11]
        me = {"user": self.bot_user, "roles": [str(r) for r in self.bot_roles],
              "joined_at": now_iso(), "nick": None,
              "avatar": None, "premium_since": None, "deaf": False, "mute": False,
              "flags": 0, "pending": False}
        return {
            "id": str(self.guild_id), "name": self.guild_name, "icon": None, "splash": None,
            "discovery_splash": None, "banner": None, "description": None, "owner_id": "1",
            "afk_channel_id": None, "afk_timeout": 300, "verification_level": 0,
            "default_message_notifications": 0, "explicit_content_filter": 0, "mfa_level": 0,
            "nsfw_level": 0, "features": [], "emojis": [], "stickers": [],
            "roles": list(self._roles.values()), "application_id": None,
            "system_channel_id": None, "system_channel_flags": 0, "rules_channel_id": None,
            "public_updates_channel_id": None, "safety_alerts_channel_id": None,
            "max_members": 500000, "vanity_url_code": None, "premium_tier": 0,
            "premium_subscription_count": 0, "premium_progress_bar_enabled": False,
            "preferred_locale": "en-US", "joined_at": now_iso(), "large": False,
            "unavailable": False, "lazy": True, "member_count": 2, "voice_states": [],
            "members": [me], "channels": channels, "threads": threads, "presences": [],
            "stage_instances": [], "guild_scheduled_events": [], "soundboard_sounds": []}


# ---------------------------------------------------------------------- module helpers

async def _send(ws: web.WebSocketResponse, frame: JSON) -> bool:
    """Send one text JSON frame; False if the socket is gone."""
    if ws.closed:
        return False
    try:
        await ws.send_str(json.dumps(frame))
    except (ConnectionError, RuntimeError):
        return False
    return True


def _without_content(message: JSON, bot_id: int) -> JSON:
    """The message as a bot without the message-content intent sees it."""
    if "guild_id" not in message or any(int(u["id"]) == bot_id for u in message["mentions"]):
        return message
    return {**message, "content": "", "embeds": [], "attachments": [], "components": []}

