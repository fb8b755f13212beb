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
  active threads only). A channel's or thread's ``last_message_id`` follows its newest
  message, as Discord keeps it (GUILD_CREATE and GET /channels show it).
* Without the message-content intent, guild messages that do not mention the
  bot arrive with empty content, as on Discord.
* REST errors as on Discord: unknown or deleted channel 404/10003, locked thread
  403/50083, content over 2000 characters 400/50035, empty message 400/50006,
  a reply to a message the fake does not know in that channel 400/50035 unless
  ``fail_if_not_exists`` is false. discord.py retries 500/502/504 itself after
  1 s, 3 s, ...; a 429 after ``retry_after``.
* Files as on Discord (``discord_files``): a user's ``attachments`` are served from
  signed CDN links on this server; the bot's uploads (multipart, ``files[n]``) are
  recorded with their bytes in ``SentRecord.attachments``; the files of one request
  over ``upload_limit`` (10 MiB) are 413/40005.
* Edits (PATCH) and deletes (DELETE …/messages/{id}) as on Discord: an unknown or
  deleted message 404/10008, another author's message 403/50005 on edit, the
  content rules of a post; a delete answers 204. The bot's own posts, edits and
  deletes are not echoed on the gateway (no MESSAGE_CREATE/UPDATE/DELETE).

* Standing as on Discord (``discord_guild``): GET /applications/@me's ``flags`` say
  which privileged intents the portal has on (``allowed_privileged_intents``); the
  bot's permissions come from its roles and the channel's overwrites; a channel it
  cannot view is 403/50001, a post it may not make 403/50013.

* Components (buttons, selects) on posts and edits are checked as on Discord
  (400/50035) and kept with the message; ``press`` clicks one (INTERACTION_CREATE)
  and the bot answers through ``/interactions/{id}/{token}/callback``.

The REST API's handlers and checks live in ``discord_rest``, message components in
``discord_components``, the application, guild, roles and permissions in
``discord_guild``, button clicks and their answers in ``discord_interactions``,
attachments and the CDN in ``discord_files``, the gateway in ``discord_gateway``; this
module holds the fake as tests drive it: the world they build (guild, channels,
threads, roles), the users' messages they send in, and what they read back.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from typing import Any

from aiohttp import web

from tests.fakes.discord_files import DEFAULT_UPLOAD_LIMIT, DiscordFiles, SentFile
from tests.fakes.discord_gateway import (  # noqa: F401 (the intents: re-exported, as before the split)
    INTENT_GUILD_MEMBERS,
    INTENT_GUILD_PRESENCES,
    INTENT_MESSAGE_CONTENT,
    PRIVILEGED_INTENTS,
    DiscordGateway,
    Session,
)
from tests.fakes.discord_guild import DiscordGuild
from tests.fakes.discord_interactions import DiscordInteractions, InteractionResponseRecord
from tests.fakes.discord_rest import (  # noqa: F401 (NONCE_WINDOW_SECONDS: re-exported)
    MAX_MESSAGE_LENGTH,
    NONCE_WINDOW_SECONDS,
    DiscordRest,
    EditRecord,
    Failure,
    SentRecord,
    now_iso,
)
from tests.fakes.local_server import LocalServer

__all__ = ["FakeDiscord", "SentRecord", "SentFile", "EditRecord", "InteractionResponseRecord",
           "DISCORD_EPOCH_MS", "TOKEN",
           "DEFAULT_UPLOAD_LIMIT", "MAX_MESSAGE_LENGTH"]

JSON = dict[str, Any]
#: shaped like a real bot token (three base64url parts): the config checks the shape
TOKEN = "MTAwMDAwMDAwMDAwMDAwMDAwMA.GfAkE0.fake-discord-bot-token-for-tests-0123456"

DISCORD_EPOCH_MS = 1_420_070_400_000
DEFAULT_TOKEN = TOKEN


class FakeDiscord(DiscordGateway, DiscordRest, DiscordGuild, DiscordInteractions, DiscordFiles,
                  LocalServer):
    """An in-process Discord REST API and gateway on ``127.0.0.1`` (a free port)."""

    heartbeat_interval_ms: int = 1000
    #: ``platforms.discord.guild_ready_timeout_seconds`` for a gateway on this fake: its one
    #: server is announced (GUILD_CREATE) right after READY, not over seconds as on Discord
    guild_ready_timeout: float = 0.2

    def __init__(self, token: str = TOKEN, bot_id: int = 1000,
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
        self._post_failures: list[Failure] = []
        self._edit_failures: list[Failure] = []
        #: channels with a rate limit on posts: (posts, per seconds), and their posts' times
        self._post_limits: dict[int, tuple[int, float]] = {}
        self._post_times: dict[int, deque[float]] = {}
        self._session: Session | None = None
        self._sockets: set[web.WebSocketResponse] = set()
        self._gateway_down = False
        self._lock = asyncio.Lock()  # orders sequence numbers and frames on the socket
        self._ready = asyncio.Event()
        self._sent_changed = asyncio.Event()
        self._edits_changed = asyncio.Event()
        self._init_files()
        self._init_interactions()
        self._init_guild()

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
        # aiohttp's own 1 MiB body cap would answer uploads before Discord's limit does
        app = web.Application(middlewares=[self._rest_middleware], client_max_size=1 << 30)
        app.router.add_get("/gateway", self._gateway)
        app.router.add_get("/gateway/", self._gateway)
        api = "/api/v10"
        app.router.add_get(f"{api}/users/@me", self._get_me)
        app.router.add_get(f"{api}/applications/@me", self._get_application)
        app.router.add_get(f"{api}/oauth2/applications/@me", self._get_application)
        guild = f"{api}/guilds/{{guild_id:\\d+}}"
        app.router.add_get(guild, self._get_guild)
        app.router.add_get(f"{guild}/roles", self._get_roles)
        app.router.add_get(f"{guild}/members/{{user_id:\\d+}}", self._get_member)
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
        app.router.add_post(f"{api}/interactions/{{interaction_id:\\d+}}/{{token}}/callback",
                            self._interaction_callback)
        cdn = "attachments/{channel_id:\\d+}/{attachment_id:\\d+}/{filename}"
        app.router.add_get(f"/{cdn}", self._serve_attachment)
        app.router.add_get(f"/media/{cdn}", self._serve_attachment)
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
        now = now_iso()
        self._channels[thread_id] = {
            "id": str(thread_id), "type": 11, "guild_id": str(self.guild_id),
            "parent_id": str(parent_id), "owner_id": "1", "name": f"thread-{thread_id}",
            "last_message_id": None, "message_count": 0, "member_count": 1,
            "rate_limit_per_user": 0, "flags": 0, "total_message_sent": 0,
            "thread_metadata": {"archived": archived, "locked": locked,
                                "auto_archive_duration": 1440, "archive_timestamp": now,
                                "create_timestamp": now, "invitable": True}}
        self._deleted_channels.discard(thread_id)

    def add_role(self, role_id: int, name: str = "role",
                 permissions: int | None = None) -> None:
        """Add a guild role (announced in GUILD_CREATE, so add it before connecting)."""
        self._roles[role_id] = _role(role_id, name, len(self._roles),
                                     EVERYONE_PERMISSIONS if permissions is None else permissions)

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
                           reference_id: int | None = None,
                           attachments: list[JSON] | None = None) -> JSON:
        """Dispatch MESSAGE_CREATE from a user; return the message dict.

        ``guild=False`` makes ``channel_id`` a DM channel (no ``guild_id`` or
        ``member``). An unknown guild channel id is added as a text channel.
        ``mentions_bot`` fills ``mentions`` only: write ``<@bot_id>`` into
        ``content`` yourself if the text should show it. A reply to a message
        the fake knows carries ``referenced_message``. Dispatched while the
        client is disconnected, it is replayed on RESUME.

        ``attachments``: ``[{"filename": ..., "data": bytes, "content_type": ...}]``
        (``content_type`` optional; any other key as :meth:`attachment` takes, e.g.
        ``size`` to claim a size, ``description``) become Discord attachment objects
        whose ``url`` this fake serves, as ``discord.Attachment.read()`` fetches it.
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
        message["attachments"] = [
            self.attachment(channel_id, a["filename"], a["data"],
                            **{k: v for k, v in a.items() if k not in ("filename", "data")})
            for a in attachments or []]
        if guild:
            message["member"] = {"roles": [str(r) for r in roles or []], "joined_at": now_iso(),
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
                       message: str = "You are being rate limited.", count: int = 1,
                       after: int = 0, content: str | None = None) -> None:
        """Make the next ``count`` message posts (to ``channel_id``, or any; with
        ``content`` in theirs, when given: one message refused again and again) fail,
        once ``after`` more posts went through.

        A 429 carries ``Via: 1.1 google`` and ``{"message", "retry_after",
        "global": false}``, so discord.py sleeps ``retry_after`` and retries it
        itself; other statuses answer ``{"code", "message"}``.
        """
        self._post_failures.append(
            Failure(channel_id, status, retry_after, code, message, count, skip=after,
                    content=content))

    def limit_posts(self, channel_id: int, *, posts: int, per: float) -> None:
        """As Discord limits a channel's messages: at most ``posts`` in any ``per``
        seconds. Each post is answered with its bucket's ``X-RateLimit-*`` headers
        (discord.py waits once none are left); one more is a 429 with ``retry_after``."""
        self._post_limits[channel_id] = (posts, per)

    def stop_failing_posts(self) -> None:
        """Drop the scripted post failures not used up yet: posts are taken again."""
        self._post_failures.clear()

    def fail_next_edit(self, *, channel_id: int | None = None, status: int = 429,
                       retry_after: float = 0.1, code: int = 0,
                       message: str = "You are being rate limited.", count: int = 1) -> None:
        """Make the next ``count`` message edits (in ``channel_id``, or any) fail.

        As :meth:`fail_next_post`, for edits only: the two never take each other's failures.
        """
        self._edit_failures.append(
            Failure(channel_id, status, retry_after, code, message, count))

    async def wait_for_sent(self, count: int, timeout: float = 30) -> list[SentRecord]:
        """Wait until at least ``count`` messages were posted; return all posted so far."""
        await self._wait_for("sent", count, timeout)
        return list(self.sent)

    async def wait_for_edits(self, count: int, timeout: float = 30) -> list[EditRecord]:
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
            "content": content, "timestamp": now_iso(), "edited_timestamp": None,
            "tts": False, "mention_everyone": False, "mentions": mentions,
            "mention_roles": [], "mention_channels": [], "attachments": [], "embeds": [],
            "components": [], "pinned": False, "type": 0, "flags": 0}
        channel = self._channels.get(channel_id, {})
        if "last_message_id" in channel:
            channel["last_message_id"] = message["id"]  # as GUILD_CREATE then shows it
        guild_id = channel.get("guild_id")
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

#: what @everyone may do in a new guild (view, send, read history, threads, files, ...)
EVERYONE_PERMISSIONS = 2248473465835073


def _role(role_id: int, name: str, position: int,
          permissions: int = EVERYONE_PERMISSIONS) -> JSON:
    return {"id": str(role_id), "name": name, "color": 0, "colors": {"primary_color": 0},
            "hoist": False, "icon": None, "unicode_emoji": None, "position": position,
            "permissions": str(permissions), "managed": False, "mentionable": False,
            "flags": 0}

