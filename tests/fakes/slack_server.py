"""A strict fake Slack (Web API + Socket Mode) for tests with the real slack-sdk.

One aiohttp server on ``127.0.0.1`` serves the Web API under ``/api/``, the Socket
Mode WebSocket at ``/socket``, file downloads (``url_private``) and the upload URLs
of ``files_upload_v2``::

    async with FakeSlack() as fake:
        web = AsyncWebClient(token=BOT_TOKEN, base_url=fake.api_base)
        socket = SocketModeClient(app_token=APP_TOKEN,
                                  web_client=AsyncWebClient(base_url=fake.api_base))
        socket.socket_mode_request_listeners.append(on_request)   # ack each envelope
        await socket.connect()
        await fake.wait_connected()
        fake.user_message(channel="C0GENERAL", text="hi")     # an events_api envelope
        await web.chat_postMessage(channel="C0GENERAL", text="hello")
        fake.messages("C0GENERAL")                            # the bot's live messages

Strict as Slack is, so an adapter that works here works there: every Web API
answer is HTTP 200 with ``{"ok": false, "error": ...}`` on failure (429 with
``Retry-After`` and 5xx only when scripted with :meth:`fail_next`); the token must
be the right type for the method (``not_allowed_token_type``) and the app must hold
the method's scope (``missing_scope`` with ``needed`` and ``provided``); blocks are
checked as Block Kit checks them (``invalid_blocks``).

Behaviour worth knowing when writing tests:

* The bot's own posts, edits and deletes come back over the socket as message
  events (``bot_id`` set; ``subtype`` ``message_changed`` / ``message_deleted`` for
  edits and deletes; ``file_share`` for uploads), as on Slack: an adapter must ignore
  its own messages.
* A user's message that mentions the bot (``<@U0BOT>``) outside a DM arrives twice,
  as a ``message`` and as an ``app_mention`` event (different event ids), when the
  app has ``app_mentions:read``: Slack sends both to an app subscribed to both.
  Message events need the conversation kind's history scope (``im:history`` for a
  DM, as the ``message.im`` subscription does), and none come from a conversation the
  bot is not in.
* An envelope not acked within :attr:`ack_deadline` is redelivered (new envelope
  id, same event id, ``retry_attempt`` + 1, ``retry_reason`` "timeout"), at most
  three retries, as Slack does; events that happen while no socket is connected
  wait for the next one. Button presses (``interactive``) are not redelivered.
* ``conversations.history`` / ``conversations.replies`` answer at most
  :attr:`max_page` messages a page whatever ``limit`` asks (Slack may return fewer
  than ``limit`` too), so an adapter must follow ``next_cursor``; the thread's parent
  leads every replies page.
* A message's ``ts`` is the moment it was said (the clock's, unique and increasing
  in steps of 100 µs at least), as on Slack: the gateway reads a message's age off
  it, so a fake running longer than ``inbound.max_age_seconds`` must not age them.
* A reply (``thread_ts``) to a ts that is no message in that channel is
  ``invalid_thread_ts``; a reply's ts stands for its thread's parent.
* Blocks as Slack checks them (``slack_blocks``): a missing ``block_id`` or button
  ``action_id`` is filled in, as Slack does, so ``message.blocks`` carries them.
* ``add_file`` needs the fake started (its URLs name the port).
* Message metadata (``metadata`` of chat.postMessage and chat.update) is checked as
  Slack checks it (``invalid_metadata_format``, ``invalid_metadata_schema``), kept
  with the bot's message (``SlackMessage.metadata``; an edit without it keeps it, ``{}``
  removes it) and shown only by conversations.history / replies called with
  ``include_all_metadata``; people's messages never carry any.

The records and shared state live in ``slack_world``, the Web API's reading,
authorisation, errors and chat/conversations/users/assistant methods in ``slack_api``,
Block Kit checks in ``slack_blocks``, Socket Mode (tickets, envelopes, acks, button
presses, response_url) in ``slack_socket``, files (downloads and ``files_upload_v2``)
in ``slack_files``; this module holds the fake as tests drive it: the world
(channels, users), what people do, what the bot did, faults and waits.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

from aiohttp import web

from tests.fakes.local_server import LocalServer
from tests.fakes.slack_api import Failure
from tests.fakes.slack_files import SlackFiles
from tests.fakes.slack_socket import SlackSocket
from tests.fakes.slack_world import (
    Call,
    Channel,
    ChannelKind,
    SlackMessage,
    Upload,
    rich_text,
)

__all__ = ["APP_TOKEN", "BOT_TOKEN", "Call", "ChannelKind", "FakeSlack", "SlackMessage", "Upload"]

JSON = dict[str, Any]

#: shaped like real tokens: the config checks the ``xoxb-`` / ``xapp-`` prefixes
BOT_TOKEN = "xoxb-1111111111-2222222222-abcdefghijklmnopqrstuvwx"
APP_TOKEN = ("xapp-1-A0APP-3333333333-"
             "abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789")
DEFAULT_SCOPES = ("chat:write", "channels:history", "groups:history", "im:history",
                  "mpim:history", "channels:read", "files:read", "files:write",
                  "app_mentions:read", "users:read")
#: the user who talks to the bot unless a test says otherwise
DEFAULT_USER = "U0123ABCD"


class FakeSlack(SlackSocket, SlackFiles, LocalServer):
    """An in-process Slack Web API and Socket Mode endpoint on ``127.0.0.1``."""

    ack_deadline: float = 3.0
    """Seconds an envelope may stay unacked before it is redelivered (Slack: 3 s)."""
    max_page: int = 5
    """Most messages one conversations.history / replies page holds, whatever ``limit``."""

    def __init__(self, bot_token: str = BOT_TOKEN, app_token: str = APP_TOKEN, *,
                 team_id: str = "T0TEAM", bot_user_id: str = "U0BOT", bot_id: str = "B0BOT",
                 scopes: tuple[str, ...] = DEFAULT_SCOPES, assistant: bool = False) -> None:
        self.bot_token = bot_token
        self.app_token = app_token
        self.team_id = team_id
        self.team_domain = "homing-test"
        self.bot_user_id = bot_user_id
        self.bot_id = bot_id
        self.app_id = _app_id(app_token)
        self.scopes = tuple(scopes)
        self.assistant = assistant
        self.channels: dict[str, Channel] = {}
        self.posts: list[Call] = []
        self.updates: list[Call] = []
        self.deletes: list[Call] = []
        self.statuses: list[Call] = []
        self.calls: list[Call] = []  # every Web API call that got an answer, accepted or not
        self.users: dict[str, JSON] = {}
        self._bot_messages: dict[tuple[str, str], SlackMessage] = {}
        # microseconds: ts "1764800000.000100" style; Slack's ts is when a message was
        # sent, which the gateway reads as its age (one too old is not run)
        self._last_ts = int(time.time() * 1_000_000)
        self._event_count = 0
        self._failures: list[Failure] = []
        self._changed = asyncio.Event()
        self._init_socket()
        self._init_files()
        self.add_user(DEFAULT_USER, "alice")
        self.users[bot_user_id] = _user(bot_user_id, team_id, "homing", is_bot=True)
        self.add_channel("C0GENERAL", name="general")
        self.add_channel("D0DM", kind="im")

    @property
    def api_base(self) -> str:
        """``AsyncWebClient(base_url=...)``: the Web API root, with its trailing slash."""
        return f"http://127.0.0.1:{self.port}/api/"

    def _build_app(self) -> web.Application:
        app = web.Application(client_max_size=1024 ** 3)
        app.router.add_route("*", "/api/{method}", self._handle_api)
        self._add_socket_routes(app)
        self._add_file_routes(app)
        return app

    async def _before_stop(self) -> None:
        await self._close_sockets()

    # ------------------------------------------------------------------ the world

    def add_channel(self, channel: str, *, kind: ChannelKind = "channel", member: bool = True,
                    name: str | None = None, user: str = DEFAULT_USER) -> None:
        """Add a conversation: ``kind`` "channel" (public), "group" (private), "im" (a DM
        with ``user``) or "mpim"; ``member`` False: the bot is not in it."""
        self.channels[channel] = Channel(channel, kind, member, name or channel.lower(),
                                         user=user if kind == "im" else None)

    def add_user(self, user: str, name: str) -> None:
        """A person users.info knows."""
        self.users[user] = _user(user, self.team_id, name)

    # ------------------------------------------------------------------ what people do

    def user_message(self, *, channel: str, text: str, user: str = DEFAULT_USER,
                     thread_ts: str | None = None,
                     files: list[JSON] | None = None) -> str:
        """A person posts ``text`` (a reply when ``thread_ts``; with files from
        :meth:`add_file`): into the history, and pushed as a message event (plus an
        ``app_mention`` when it mentions the bot). Returns the message's ts."""
        room = self._channel(channel)
        if thread_ts is not None:
            self._message_in(room, thread_ts)  # a typo in a test fails here, not later
        ts = self._next_ts()
        message: JSON = {"client_msg_id": str(uuid.uuid4()), "type": "message", "text": text,
                         "user": user, "ts": ts, "team": self.team_id,
                         "blocks": [rich_text(text)]}
        if files:
            message.update(subtype="file_share", files=[dict(f) for f in files], upload=False,
                           display_as_bot=False)
        if thread_ts is not None:
            message["thread_ts"] = thread_ts
            message["parent_user_id"] = self._message_in(room, thread_ts).get("user")
        self._append(room, message)
        if not room.member:
            return ts  # an app hears only the conversations it is in
        if self._subscribed_to_messages(room):
            self._push_event({**message, "channel": channel, "event_ts": ts,
                              "channel_type": room.kind})
        mention = f"<@{self.bot_user_id}>"
        if mention in text and room.kind != "im" and "app_mentions:read" in self.scopes:
            event = {k: v for k, v in message.items() if k not in ("upload", "display_as_bot")}
            self._push_event({**event, "type": "app_mention", "channel": channel,
                              "event_ts": ts})
        return ts

    def press_button(self, *, channel: str, message_ts: str, action_id: str, value: str,
                     user: str = DEFAULT_USER, stale: bool = False) -> str:
        """A person presses the button ``action_id`` on the bot's message: an
        ``interactive`` envelope with a ``block_actions`` payload. Returns its envelope id.
        ``stale``: the button need not be on the message now (a client that has not shown
        the message's update yet presses the old one; the payload carries it as it is).
        """
        return self._push_interactive(self._block_actions(channel, message_ts, action_id,
                                                          value, user, stale=stale))

    def duplicate_next_event(self) -> None:
        """Push the next event twice (the second a retry: same event id, new envelope id,
        ``retry_attempt`` 1), as Slack does when it missed an ack."""
        self._duplicate_next = True

    # ------------------------------------------------------------------ what the bot did

    def messages(self, channel: str, thread_ts: str | None = None, *,
                 deleted: bool = False) -> list[SlackMessage]:
        """The bot's live (not deleted) messages in ``channel``, oldest first: top level
        ones when ``thread_ts`` is None, else the replies in that thread; ``deleted``:
        the deleted ones too."""
        return [m for m in self._bot_messages.values()
                if m.channel == channel and (deleted or not m.deleted)
                and m.thread_ts == thread_ts]

    async def wait_for_posts(self, count: int, timeout: float = 30) -> list[Call]:
        """Until ``count`` chat.postMessage calls were accepted; returns them all."""
        await self._wait_until(lambda: len(self.posts) >= count, timeout,
                               lambda: f"{count} posts, got {len(self.posts)}: {self.posts!r}")
        return list(self.posts)

    async def wait_for_updates(self, count: int, timeout: float = 30) -> list[Call]:
        """Until ``count`` chat.update calls were accepted; returns them all."""
        await self._wait_until(lambda: len(self.updates) >= count, timeout,
                               lambda: f"{count} updates, got {len(self.updates)}: "
                                       f"{self.updates!r}")
        return list(self.updates)

    async def wait_for_uploads(self, count: int, timeout: float = 30) -> list[Upload]:
        """Until ``count`` files were shared with files.completeUploadExternal."""
        await self._wait_until(lambda: len(self.uploads) >= count, timeout,
                               lambda: f"{count} uploads, got {len(self.uploads)}")
        return list(self.uploads)

    async def wait_acked(self, envelope_id: str, timeout: float = 30) -> None:
        """Until the client acknowledged the envelope ``envelope_id``."""
        await self._wait_until(lambda: envelope_id in self.acked, timeout,
                               lambda: f"an ack of {envelope_id}, acked: {self.acked!r}")

    async def wait_connected(self, timeout: float = 30) -> None:
        """Until a socket is connected and was sent its hello."""
        await self._wait_until(lambda: bool(self._sockets), timeout,
                               lambda: "a Socket Mode connection")

    # ------------------------------------------------------------------ faults

    def fail_next(self, method: str, *, status: int = 429, error: str = "ratelimited",
                  retry_after: float = 1, count: int = 1, channel: str | None = None,
                  text: str | None = None) -> None:
        """The next ``count`` calls of ``method`` (only those to ``channel``, and whose
        ``text`` holds ``text``, if given) answer HTTP ``status``: 429 with
        ``Retry-After`` (whole seconds, rounded up, as Slack sends) and
        ``{"ok": false, "error": "ratelimited"}``; any other status with
        ``{"ok": false, "error": error}``."""
        self._failures.append(Failure(method, status, error, retry_after, count, channel,
                                      text))

    # ------------------------------------------------------------------ helpers

    def _channel(self, channel: str) -> Channel:
        room = self.channels.get(channel)
        if room is None:
            raise KeyError(f"no channel {channel!r}: add it with add_channel")
        return room

    def _message_in(self, room: Channel, ts: str) -> JSON:
        for message in room.history:
            if message["ts"] == ts:
                return message
        raise KeyError(f"no message {ts} in {room.id}")


def _user(user: str, team_id: str, name: str, *, is_bot: bool = False) -> JSON:
    """A user object as users.info answers it."""
    return {"id": user, "team_id": team_id, "name": name, "deleted": False,
            "real_name": name.title(), "tz": "Europe/Berlin", "is_bot": is_bot,
            "is_admin": False, "is_owner": False, "is_app_user": False,
            "profile": {"real_name": name.title(), "display_name": name, "team": team_id}}


def _app_id(app_token: str) -> str:
    """An app token is ``xapp-<n>-<app id>-<...>``."""
    parts = app_token.split("-")
    return parts[2] if len(parts) > 3 else "A0APP"
