"""A small fake Discord (REST API v10 + gateway) for tests with the real discord.py.

One aiohttp server on ``127.0.0.1`` serves the REST API under ``/api/v10`` and
the gateway WebSocket at ``/gateway`` (see ``/work/shared/notes/platform-fakes.md``)::

    async with FakeDiscord() as fake:
        fake.add_channel(111)
        discord.http.Route.BASE = fake.api_base                  # process-global:
        DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(fake.gateway_url)  # restore afterwards
        client = discord.Client(intents=intents, guild_ready_timeout=0.1)
        await client.login(fake.token)
        task = asyncio.create_task(client.connect())
        await fake.wait_until_ready()
        await fake.user_message(channel_id=111, content="hi")   # MESSAGE_CREATE → on_message
        await fake.wait_for_sent(1)                              # POST …/messages recorded
        fake.visible(111)                   # the bot's undeleted messages, as now edited

Gateway: HELLO (op 10) → heartbeats (op 1) answered with op 11 → IDENTIFY (op 2)
→ READY (s=1) and GUILD_CREATE (s=2) → dispatches with increasing ``s``. One
session at a time; every dispatch goes into the session's log, sent live when a
client is attached. RESUME (op 6) replays the log after the client's ``seq``,
then RESUMED. Only text JSON frames (discord.py inflates binary frames only).

Behaviour worth knowing when writing tests:

* discord.py re-IDENTIFYs after a non-resumable op 9 only after sleeping 5 s
  (``Client.before_identify_hook``); a resumable op 9 resumes at once.
* After a refused connection (``set_gateway_down``) discord.py waits a random
  back-off of up to 2 s (then 4 s, ...) before it retries.
* Channels, threads and roles added after READY are not announced (no
  CHANNEL_CREATE / THREAD_CREATE): the client sees their messages on a
  PartialMessageable, as after a missed event. REST posts to them work.
* GUILD_CREATE lists every added thread, archived ones included (Discord lists
  active threads only).
* Without the message-content intent, guild messages that do not mention the
  bot arrive with empty content, as on Discord.
* REST errors as on Discord: unknown or deleted channel 404/10003, locked thread
  403/50083, content over 2000 characters 400/50035, empty message 400/50006,
  a reply to a message the fake does not know in that channel 400/50035 unless
  ``fail_if_not_exists`` is false. discord.py retries 500/502/504 itself after
  1 s, 3 s, ...; a 429 after ``retry_after``.
* Edits (PATCH) and deletes (DELETE …/messages/{id}) as on Discord: an unknown or
  deleted message 404/10008, another author's message 403/50005 on edit, the
  content rules of a post; a delete answers 204. The bot's own posts, edits and
  deletes are not echoed on the gateway (no MESSAGE_CREATE/UPDATE/DELETE).
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from aiohttp import WSMsgType, web

from .local_server import LocalServer

__all__ = ["FakeDiscord", "SentRecord", "EditRecord", "DISCORD_EPOCH_MS",
           "MAX_MESSAGE_LENGTH"]

JSON = dict[str, Any]

DISCORD_EPOCH_MS = 1_420_070_400_000
MAX_MESSAGE_LENGTH = 2000
NONCE_WINDOW_SECONDS = 300
INTENT_GUILD_MEMBERS = 1 << 1
INTENT_GUILD_PRESENCES = 1 << 8
INTENT_MESSAGE_CONTENT = 1 << 15
PRIVILEGED_INTENTS = INTENT_GUILD_MEMBERS | INTENT_GUILD_PRESENCES | INTENT_MESSAGE_CONTENT


@dataclass
class SentRecord:
    """One successful ``POST /channels/{id}/messages``, as the fake received it."""

    channel_id: int
    content: str | None
    message_reference: int | None  # the referenced message id, if any
    nonce: str | int | None
    message_id: int  # the id the fake assigned
    raw: JSON = field(repr=False)  # the JSON payload (``payload_json`` for multipart)
    files: list[str] = field(default_factory=list)  # uploaded file names (multipart)


@dataclass
class EditRecord:
    """One successful ``PATCH /channels/{id}/messages/{message_id}``."""

    channel_id: int
    message_id: int
    content: str  # the message's content after the edit
    payload: JSON = field(repr=False)  # the JSON payload as sent


@dataclass
class _Failure:
    """A scripted error answer for the next matching message post or edit."""

    channel_id: int | None
    status: int
    retry_after: float
    code: int
    message: str
    remaining: int


@dataclass
class _Session:
    """A gateway session: its sequence counter, dispatch log and attached socket."""

    session_id: str
    intents: int
    seq: int = 0
    log: list[JSON] = field(default_factory=list)  # dispatch frames, for RESUME replay
    ws: web.WebSocketResponse | None = None


class _ApiError(Exception):
    """Raised inside a REST handler to answer with a Discord error body."""

    def __init__(self, status: int, code: int, message: str, *,
                 extra: JSON | None = None, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message
        self.extra = extra or {}
        self.headers = headers or {}


class FakeDiscord(LocalServer):
    """An in-process Discord REST API and gateway on ``127.0.0.1`` (a free port)."""

    heartbeat_interval_ms: int = 1000

    def __init__(self, token: str = "fake-bot-token", bot_id: int = 1000,
                 bot_name: str = "homing") -> None:
        self.token = token
        self.bot_id = bot_id
        self.bot_user: JSON = {"id": str(bot_id), "username": bot_name, "discriminator": "0",
                               "global_name": None, "avatar": None, "bot": True,
                               "verified": True, "mfa_enabled": False, "flags": 0,
                               "public_flags": 0}
        self.port = 0
        self._last_id = 0
        self.guild_id = self._snowflake()
        self.guild_name = "Homing Test Guild"
        self.allowed_privileged_intents = INTENT_MESSAGE_CONTENT
        """Privileged intents "enabled in the developer portal"; others close with 4014."""
        self.sent: list[SentRecord] = []
        self.edits: list[EditRecord] = []
        self.deleted: set[tuple[int, int]] = set()  # (channel id, message id) deleted
        self.requests: list[tuple[str, str, int]] = []  # every REST call: method, path, status
        self.undelivered: list[JSON] = []  # dispatches made while no session existed
        self.identify_count = 0
        self.resume_count = 0
        self.connection_count = 0  # accepted websocket connections
        self.refused_count = 0  # connections refused while the gateway was down
        self.typing: list[int] = []  # channel ids a typing indicator was triggered in
        self.nonce_hits = 0  # sends answered with an earlier message of the same nonce
        self.history_requests = 0
        self._channels: dict[int, JSON] = {}  # id -> channel object (text, thread or DM)
        self._deleted_channels: set[int] = set()
        self._roles: dict[int, JSON] = {self.guild_id: _role(self.guild_id, "@everyone", 0)}
        self._messages: dict[int, JSON] = {}  # every message seen (user and bot), by id
        self._post_failures: list[_Failure] = []
        self._edit_failures: list[_Failure] = []
        self._session: _Session | None = None
        self._sockets: set[web.WebSocketResponse] = set()
        self._gateway_down = False
        self._lock = asyncio.Lock()  # orders sequence numbers and frames on the socket
        self._ready = asyncio.Event()
        self._sent_changed = asyncio.Event()
        self._edits_changed = asyncio.Event()

    # ------------------------------------------------------------------ lifecycle

    @property
    def api_base(self) -> str:
        """Value for ``discord.http.Route.BASE``."""
        return f"http://127.0.0.1:{self.port}/api/v10"

    @property
    def gateway_url(self) -> str:
        """Value for ``DiscordWebSocket.DEFAULT_GATEWAY`` (wrap it in ``yarl.URL``)."""
        return f"ws://127.0.0.1:{self.port}/gateway"

    def _build_app(self) -> web.Application:
        app = web.Application(middlewares=[self._rest_middleware])
        app.router.add_get("/gateway", self._gateway)
        app.router.add_get("/gateway/", self._gateway)
        api = "/api/v10"
        app.router.add_get(f"{api}/users/@me", self._get_me)
        app.router.add_get(f"{api}/oauth2/applications/@me", self._get_application)
        app.router.add_get(f"{api}/gateway", self._get_gateway)
        app.router.add_get(f"{api}/gateway/bot", self._get_gateway_bot)
        app.router.add_get(f"{api}/channels/{{channel_id:\\d+}}", self._get_channel)
        app.router.add_post(f"{api}/channels/{{channel_id:\\d+}}/messages", self._post_message)
        app.router.add_get(f"{api}/channels/{{channel_id:\\d+}}/messages", self._get_messages)
        message = f"{api}/channels/{{channel_id:\\d+}}/messages/{{message_id:\\d+}}"
        app.router.add_patch(message, self._edit_message)
        app.router.add_delete(message, self._delete_message)
        app.router.add_post(f"{api}/channels/{{channel_id:\\d+}}/typing", self._typing)
        app.router.add_post(f"{api}/users/@me/channels", self._create_dm)
        app.router.add_route("*", "/{tail:.*}", self._not_found)
        return app

    async def _before_stop(self) -> None:
        """Close open gateway sockets (1001)."""
        for ws in list(self._sockets):
            await ws.close(code=1001, message=b"server stopping")

    # ------------------------------------------------------------------ world setup

    def add_channel(self, channel_id: int, name: str = "general") -> None:
        """Add a guild text channel (type 0)."""
        position = sum(1 for c in self._channels.values() if c["type"] == 0)
        self._channels[channel_id] = {
            "id": str(channel_id), "type": 0, "guild_id": str(self.guild_id), "name": name,
            "position": position, "permission_overwrites": [], "parent_id": None,
            "topic": None, "nsfw": False, "last_message_id": None, "rate_limit_per_user": 0}
        self._deleted_channels.discard(channel_id)

    def add_thread(self, thread_id: int, parent_id: int, *, locked: bool = False,
                   archived: bool = False) -> None:
        """Add a public thread (type 11) under the text channel ``parent_id``."""
        now = _now_iso()
        self._channels[thread_id] = {
            "id": str(thread_id), "type": 11, "guild_id": str(self.guild_id),
            "parent_id": str(parent_id), "owner_id": "1", "name": f"thread-{thread_id}",
            "last_message_id": None, "message_count": 0, "member_count": 1,
            "rate_limit_per_user": 0, "flags": 0, "total_message_sent": 0,
            "thread_metadata": {"archived": archived, "locked": locked,
                                "auto_archive_duration": 1440, "archive_timestamp": now,
                                "create_timestamp": now, "invitable": True}}
        self._deleted_channels.discard(thread_id)

    def add_role(self, role_id: int, name: str = "role") -> None:
        """Add a guild role (announced in GUILD_CREATE, so add it before connecting)."""
        self._roles[role_id] = _role(role_id, name, len(self._roles))

    def delete_channel(self, channel_id: int) -> None:
        """Delete a channel or thread: later posts get 404 Unknown Channel (10003)."""
        self._channels.pop(channel_id, None)
        self._deleted_channels.add(channel_id)

    def lock_thread(self, thread_id: int) -> None:
        """Lock a thread: later posts get 403 (50083)."""
        self._thread(thread_id)["thread_metadata"]["locked"] = True

    def archive_thread(self, thread_id: int) -> None:
        """Archive a thread (not locked): the next post reopens it."""
        self._thread(thread_id)["thread_metadata"]["archived"] = True

    def channel(self, channel_id: int) -> JSON | None:
        """The fake's current channel object (e.g. to check a thread reopened)."""
        return self._channels.get(channel_id)

    # ------------------------------------------------------------------ inbound

    async def user_message(self, *, channel_id: int, content: str, author_id: int = 1,
                           username: str = "alice", bot: bool = False, guild: bool = True,
                           roles: list[int] | None = None, mentions_bot: bool = False,
                           reference_id: int | None = None) -> JSON:
        """Dispatch MESSAGE_CREATE from a user; return the message dict.

        ``guild=False`` makes ``channel_id`` a DM channel (no ``guild_id`` or
        ``member``). An unknown guild channel id is added as a text channel.
        ``mentions_bot`` fills ``mentions`` only: write ``<@bot_id>`` into
        ``content`` yourself if the text should show it. A reply to a message
        the fake knows carries ``referenced_message``. Dispatched while the
        client is disconnected, it is replayed on RESUME.
        """
        author = {"id": str(author_id), "username": username, "discriminator": "0",
                  "global_name": None, "avatar": None, "bot": bot, "public_flags": 0}
        if guild and channel_id not in self._channels:
            self.add_channel(channel_id, name=f"channel-{channel_id}")
        elif not guild and channel_id not in self._channels:
            self._channels[channel_id] = {"id": str(channel_id), "type": 1,
                                          "last_message_id": None, "recipients": [author]}
        thread = self._channels[channel_id].get("thread_metadata")
        if thread is not None:
            thread["archived"] = False  # a user post reopens an archived thread
        message = self._message(channel_id, content, author,
                                mentions=[self.bot_user] if mentions_bot else [])
        if guild:
            message["member"] = {"roles": [str(r) for r in roles or []], "joined_at": _now_iso(),
                                 "nick": None, "avatar": None, "premium_since": None,
                                 "deaf": False, "mute": False, "flags": 0, "pending": False}
        if reference_id is not None:
            message["type"] = 19
            message["message_reference"] = self._reference(channel_id, reference_id)
            if reference_id in self._messages:
                message["referenced_message"] = self._messages[reference_id]
        self._messages[int(message["id"])] = message
        await self._dispatch("MESSAGE_CREATE", message)
        return message

    async def dispatch(self, event: str, data: JSON) -> None:
        """Dispatch any event (op 0) to the session, e.g. THREAD_CREATE."""
        await self._dispatch(event, data)

    # ------------------------------------------------------------------ outbound

    def fail_next_post(self, *, channel_id: int | None = None, status: int = 429,
                       retry_after: float = 0.1, code: int = 0,
                       message: str = "You are being rate limited.", count: int = 1) -> None:
        """Make the next ``count`` message posts (to ``channel_id``, or any) fail.

        A 429 carries ``Via: 1.1 google`` and ``{"message", "retry_after",
        "global": false}``, so discord.py sleeps ``retry_after`` and retries it
        itself; other statuses answer ``{"code", "message"}``.
        """
        self._post_failures.append(
            _Failure(channel_id, status, retry_after, code, message, count))

    def fail_next_edit(self, *, channel_id: int | None = None, status: int = 429,
                       retry_after: float = 0.1, code: int = 0,
                       message: str = "You are being rate limited.", count: int = 1) -> None:
        """Make the next ``count`` message edits (in ``channel_id``, or any) fail.

        As :meth:`fail_next_post`, for edits only: the two never take each other's failures.
        """
        self._edit_failures.append(
            _Failure(channel_id, status, retry_after, code, message, count))

    async def wait_for_sent(self, count: int, timeout: float = 10) -> list[SentRecord]:
        """Wait until at least ``count`` messages were posted; return all posted so far."""
        await self._wait_for("sent", count, timeout)
        return list(self.sent)

    async def wait_for_edits(self, count: int, timeout: float = 10) -> list[EditRecord]:
        """Wait until at least ``count`` edits succeeded; return all of them."""
        await self._wait_for("edits", count, timeout)
        return list(self.edits)

    def message_content(self, channel_id: int, message_id: int) -> str | None:
        """The current content of a message in that channel; None if deleted or unknown."""
        message = self._messages.get(message_id)
        if message is None or int(message["channel_id"]) != channel_id:
            return None
        return message["content"]

    def visible(self, channel_id: int) -> list[str]:
        """What a user sees of the bot in that channel: the current content of its
        undeleted messages, oldest first."""
        return [m["content"] for _, m in sorted(self._messages.items())
                if int(m["channel_id"]) == channel_id and m["author"]["id"] == self.bot_user["id"]]

    # ------------------------------------------------------------------ gateway control

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

    # ------------------------------------------------------------------ gateway internals

    async def _gateway(self, request: web.Request) -> web.StreamResponse:
        if self._gateway_down:
            self.refused_count += 1
            return _json({"code": 0, "message": "503: Service Unavailable"}, 503)
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
            if self._session is not None and self._session.ws is not None:
                await self._session.ws.close(code=4000, message=b"session replaced")
            self._session = _Session(session_id=uuid.uuid4().hex, intents=intents, ws=ws)
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
        me = {"user": self.bot_user, "roles": [], "joined_at": _now_iso(), "nick": None,
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
            "preferred_locale": "en-US", "joined_at": _now_iso(), "large": False,
            "unavailable": False, "lazy": True, "member_count": 2, "voice_states": [],
            "members": [me], "channels": channels, "threads": threads, "presences": [],
            "stage_instances": [], "guild_scheduled_events": [], "soundboard_sounds": []}

    # ------------------------------------------------------------------ REST

    @web.middleware
    async def _rest_middleware(self, request: web.Request, handler: Any) -> web.StreamResponse:
        try:
            if request.path.startswith("/api/") \
                    and request.headers.get("Authorization") != f"Bot {self.token}":
                raise _ApiError(401, 0, "401: Unauthorized")
            response = await handler(request)
        except _ApiError as exc:
            response = _json({"code": exc.code, "message": exc.message, **exc.extra},
                             exc.status, exc.headers)
        if request.path.startswith("/api/"):
            self.requests.append((request.method, request.path, response.status))
        return response

    async def _not_found(self, request: web.Request) -> web.Response:
        raise _ApiError(404, 0, "404: Not Found")

    async def _get_me(self, request: web.Request) -> web.Response:
        return _json(self.bot_user)

    async def _get_application(self, request: web.Request) -> web.Response:
        owner = {"id": "1", "username": "owner", "discriminator": "0", "global_name": None,
                 "avatar": None, "public_flags": 0, "flags": 0}
        return _json({"id": str(self.bot_id), "name": self.bot_user["username"], "icon": None,
                      "description": "", "summary": "", "type": None, "bot": self.bot_user,
                      "bot_public": True, "bot_require_code_grant": False, "owner": owner,
                      "verify_key": "0" * 64, "team": None, "flags": 0, "rpc_origins": [],
                      "redirect_uris": [], "interactions_endpoint_url": None,
                      "approximate_guild_count": 1})

    async def _get_gateway(self, request: web.Request) -> web.Response:
        return _json({"url": self.gateway_url})

    async def _get_gateway_bot(self, request: web.Request) -> web.Response:
        return _json({"url": self.gateway_url, "shards": 1,
                      "session_start_limit": {"total": 1000, "remaining": 1000,
                                              "reset_after": 0, "max_concurrency": 1}})

    async def _typing(self, request: web.Request) -> web.Response:
        """POST /channels/{id}/typing: 204, as Discord answers (404 for an unknown one)."""
        channel_id = int(request.match_info["channel_id"])
        self._existing_channel(channel_id)
        self.typing.append(channel_id)
        return web.Response(status=204)

    async def _get_channel(self, request: web.Request) -> web.Response:
        return _json(self._existing_channel(int(request.match_info["channel_id"])))

    async def _create_dm(self, request: web.Request) -> web.Response:
        recipient = int((await request.json())["recipient_id"])
        for channel in self._channels.values():
            if channel["type"] == 1 and int(channel["recipients"][0]["id"]) == recipient:
                return _json(channel)
        channel_id = self._snowflake()
        self._channels[channel_id] = {
            "id": str(channel_id), "type": 1, "last_message_id": None,
            "recipients": [{"id": str(recipient), "username": f"user{recipient}",
                            "discriminator": "0", "global_name": None, "avatar": None}]}
        return _json(self._channels[channel_id])

    async def _post_message(self, request: web.Request) -> web.Response:
        channel_id = int(request.match_info["channel_id"])
        payload, files = await _read_message_payload(request)
        _consume_failure(self._post_failures, channel_id)
        channel = self._existing_channel(channel_id)
        metadata = _unlocked_thread_metadata(channel)
        content = payload.get("content")
        content = None if content is None else str(content)
        _check_content(content, has_more=bool(payload.get("embeds") or files
                                              or payload.get("sticker_ids")))
        reference = payload.get("message_reference") or None
        ref_id = int(reference["message_id"]) if reference and reference.get("message_id") else None
        if ref_id is not None and reference.get("fail_if_not_exists", True):
            known = self._messages.get(ref_id)
            if known is None or int(known["channel_id"]) != channel_id:
                raise _form_error("message_reference", "MESSAGE_REFERENCE_UNKNOWN_MESSAGE",
                                  "Unknown message")
        nonce = payload.get("nonce")
        if nonce is not None and len(str(nonce)) > 25:
            raise _form_error("nonce", "BASE_TYPE_MAX_LENGTH", "Must be 25 or fewer in length.")
        if nonce is not None and payload.get("enforce_nonce"):
            # as Discord: the same author's message with this nonce in the last few minutes
            # is returned, and no second one is made
            for earlier in reversed(self._messages.values()):
                if (earlier.get("nonce") == nonce and earlier["author"]["id"] == self.bot_user["id"]
                        and int(earlier["channel_id"]) == channel_id
                        and time.time() - earlier["_created"] < NONCE_WINDOW_SECONDS):
                    self.nonce_hits += 1
                    return _json(_public(earlier))
        if metadata is not None:
            metadata["archived"] = False  # posting reopens an archived (unlocked) thread

        message = self._message(channel_id, content or "", self.bot_user, mentions=[])
        message["embeds"] = payload.get("embeds") or []
        message["attachments"] = [
            {"id": str(self._snowflake()), "filename": name, "size": size,
             "url": f"http://127.0.0.1:{self.port}/attachments/{name}",
             "proxy_url": f"http://127.0.0.1:{self.port}/attachments/{name}"}
            for name, size in files]
        if payload.get("nonce") is not None:
            message["nonce"] = payload["nonce"]
        if ref_id is not None:
            message["type"] = 19
            message["message_reference"] = self._reference(channel_id, ref_id)
            message["referenced_message"] = self._messages.get(ref_id)
        message["_created"] = time.time()
        self._messages[int(message["id"])] = message
        self.sent.append(SentRecord(channel_id=channel_id, content=content,
                                    message_reference=ref_id, nonce=payload.get("nonce"),
                                    message_id=int(message["id"]), raw=payload,
                                    files=[name for name, _ in files]))
        self._wake("sent")
        return _json(_public(message))

    async def _edit_message(self, request: web.Request) -> web.Response:
        """PATCH a message: the bot's own only; the fields it sends replace the old ones."""
        channel_id = int(request.match_info["channel_id"])
        payload, files = await _read_message_payload(request)
        _consume_failure(self._edit_failures, channel_id)
        metadata = _unlocked_thread_metadata(self._existing_channel(channel_id))
        message = self._existing_message(channel_id, int(request.match_info["message_id"]))
        if message["author"]["id"] != self.bot_user["id"]:
            raise _ApiError(403, 50005, "Cannot edit a message authored by another user")
        content = str(payload["content"] or "") if "content" in payload else message["content"]
        embeds = (payload["embeds"] or []) if "embeds" in payload else message["embeds"]
        kept = {str(a.get("id")) for a in payload.get("attachments") or []}
        attachments = message["attachments"] if "attachments" not in payload \
            else [a for a in message["attachments"] if a["id"] in kept]
        _check_content(content, has_more=bool(embeds or attachments or files
                                              or message.get("sticker_items")))
        if metadata is not None:
            metadata["archived"] = False  # as a post, an edit reopens an archived thread

        message.update(content=content, embeds=embeds, attachments=attachments,
                       edited_timestamp=_now_iso())
        self.edits.append(EditRecord(channel_id=channel_id, message_id=int(message["id"]),
                                     content=content, payload=payload))
        self._wake("edits")
        return _json(_public(message))

    async def _delete_message(self, request: web.Request) -> web.Response:
        """DELETE a message: 204. Others' messages too (the bot's role may manage
        messages), except in a DM, where only one's own can go."""
        channel_id = int(request.match_info["channel_id"])
        channel = self._existing_channel(channel_id)
        message = self._existing_message(channel_id, int(request.match_info["message_id"]))
        if channel["type"] == 1 and message["author"]["id"] != self.bot_user["id"]:
            raise _ApiError(403, 50003, "Cannot execute action on a DM channel")
        del self._messages[int(message["id"])]
        self.deleted.add((channel_id, int(message["id"])))
        return web.Response(status=204)

    async def _get_messages(self, request: web.Request) -> web.Response:
        """A channel's history, as Discord answers it: newest first; ``after`` gives the
        ``limit`` (1-100, default 50) messages right after that id, ``before`` the ones
        right before it."""
        channel_id = int(request.match_info["channel_id"])
        self._existing_channel(channel_id)
        try:
            limit = int(request.query.get("limit", "50"))
        except ValueError:
            raise _form_error("limit", "NUMBER_TYPE_COERCE", "Value is not int.") from None
        if not 1 <= limit <= 100:
            raise _form_error("limit", "NUMBER_TYPE_MAX", "limit must be 1 to 100.")
        ids = sorted(i for i, m in self._messages.items() if int(m["channel_id"]) == channel_id)
        if "after" in request.query:
            ids = [i for i in ids if i > int(request.query["after"])][:limit]
        else:
            if "before" in request.query:
                ids = [i for i in ids if i < int(request.query["before"])]
            ids = ids[-limit:]
        self.history_requests += 1
        return _json([_public(self._messages[i]) for i in reversed(ids)])

    # ------------------------------------------------------------------ helpers

    def _snowflake(self) -> int:
        """A fresh snowflake id, increasing and shaped like Discord's (time << 22)."""
        now = (int(time.time() * 1000) - DISCORD_EPOCH_MS) << 22
        self._last_id = max(self._last_id + 1, now)
        return self._last_id

    def _thread(self, thread_id: int) -> JSON:
        channel = self._channels.get(thread_id)
        if channel is None or "thread_metadata" not in channel:
            raise KeyError(f"no thread {thread_id}")
        return channel

    def _existing_channel(self, channel_id: int) -> JSON:
        channel = self._channels.get(channel_id)
        if channel is None:
            raise _ApiError(404, 10003, "Unknown Channel")
        return channel

    def _existing_message(self, channel_id: int, message_id: int) -> JSON:
        message = self._messages.get(message_id)
        if message is None or int(message["channel_id"]) != channel_id:
            raise _ApiError(404, 10008, "Unknown Message")
        return message

    def _wake(self, what: str) -> None:
        """Wake everyone waiting on ``what`` ("sent" or "edits")."""
        attr = f"_{what}_changed"
        event: asyncio.Event = getattr(self, attr)
        setattr(self, attr, asyncio.Event())
        event.set()

    async def _wait_for(self, what: str, count: int, timeout: float) -> None:
        """Until the list ``what`` ("sent" or "edits") holds at least ``count`` records."""
        records: list[Any] = getattr(self, what)
        try:
            async with asyncio.timeout(timeout):
                while len(records) < count:
                    await getattr(self, f"_{what}_changed").wait()
        except TimeoutError:
            raise TimeoutError(f"expected {count} {what} within {timeout}s, "
                               f"got {len(records)}: {records!r}") from None

    def _message(self, channel_id: int, content: str, author: JSON, *,
                 mentions: list[JSON]) -> JSON:
        message: JSON = {
            "id": str(self._snowflake()), "channel_id": str(channel_id), "author": author,
            "content": content, "timestamp": _now_iso(), "edited_timestamp": None,
            "tts": False, "mention_everyone": False, "mentions": mentions,
            "mention_roles": [], "mention_channels": [], "attachments": [], "embeds": [],
            "components": [], "pinned": False, "type": 0, "flags": 0}
        guild_id = self._channels.get(channel_id, {}).get("guild_id")
        if guild_id is not None:
            message["guild_id"] = guild_id
        return message

    def _reference(self, channel_id: int, message_id: int) -> JSON:
        reference: JSON = {"type": 0, "message_id": str(message_id), "channel_id": str(channel_id)}
        guild_id = self._channels.get(channel_id, {}).get("guild_id")
        if guild_id is not None:
            reference["guild_id"] = guild_id
        return reference


# ---------------------------------------------------------------------- module helpers

def _public(message: JSON) -> JSON:
    """A message as the API shows it (without the fake's own bookkeeping)."""
    return {k: v for k, v in message.items() if not k.startswith("_")}


def _json(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    """A JSON response with Content-Type exactly ``application/json`` (no charset)."""
    return web.Response(body=json.dumps(data).encode(), status=status,
                        headers={**(headers or {}), "Content-Type": "application/json"})


async def _send(ws: web.WebSocketResponse, frame: JSON) -> bool:
    """Send one text JSON frame; False if the socket is gone."""
    if ws.closed:
        return False
    try:
        await ws.send_str(json.dumps(frame))
    except (ConnectionError, RuntimeError):
        return False
    return True


async def _read_message_payload(request: web.Request) -> tuple[JSON, list[tuple[str, int]]]:
    """The JSON body, or ``payload_json`` plus (filename, size) of each file part."""
    if not request.content_type.startswith("multipart/"):
        return (await request.json() if request.body_exists else {}), []
    payload: JSON = {}
    files: list[tuple[str, int]] = []
    reader = await request.multipart()
    async for part in reader:
        if part.name == "payload_json":
            payload = json.loads(await part.text())
        else:
            files.append((part.filename or part.name or "file", len(await part.read())))
    return payload, files


def _consume_failure(failures: list[_Failure], channel_id: int) -> None:
    """Raise the first scripted failure for ``channel_id`` (or any channel), if any."""
    for failure in failures:
        if failure.channel_id is None or failure.channel_id == channel_id:
            failure.remaining -= 1
            if failure.remaining <= 0:
                failures.remove(failure)
            if failure.status == 429:
                raise _ApiError(429, failure.code, failure.message,
                                extra={"retry_after": failure.retry_after, "global": False},
                                headers={"Via": "1.1 google",
                                         "Retry-After": str(max(1, round(failure.retry_after))),
                                         "X-RateLimit-Scope": "user"})
            raise _ApiError(failure.status, failure.code, failure.message)


def _unlocked_thread_metadata(channel: JSON) -> JSON | None:
    """A thread's metadata (None for a channel); a locked thread takes no posts or edits."""
    metadata = channel.get("thread_metadata")
    if metadata is not None and metadata["locked"]:
        raise _ApiError(403, 50083, "Thread is archived")
    return metadata


def _check_content(content: str | None, *, has_more: bool) -> None:
    """A message needs content or something else (``has_more``), and at most 2000 chars."""
    if not content and not has_more:
        raise _ApiError(400, 50006, "Cannot send an empty message")
    if content is not None and len(content) > MAX_MESSAGE_LENGTH:
        raise _form_error("content", "BASE_TYPE_MAX_LENGTH",
                          f"Must be {MAX_MESSAGE_LENGTH} or fewer in length.")


def _form_error(key: str, code: str, message: str) -> _ApiError:
    return _ApiError(400, 50035, "Invalid Form Body",
                     extra={"errors": {key: {"_errors": [{"code": code, "message": message}]}}})


def _role(role_id: int, name: str, position: int) -> JSON:
    return {"id": str(role_id), "name": name, "color": 0, "colors": {"primary_color": 0},
            "hoist": False, "icon": None, "unicode_emoji": None, "position": position,
            "permissions": "2248473465835073", "managed": False, "mentionable": False,
            "flags": 0}


def _without_content(message: JSON, bot_id: int) -> JSON:
    """The message as a bot without the message-content intent sees it."""
    if "guild_id" not in message or any(int(u["id"]) == bot_id for u in message["mentions"]):
        return message
    return {**message, "content": "", "embeds": [], "attachments": [], "components": []}


def _now_iso() -> str:
    return datetime.now(UTC).isoformat()
