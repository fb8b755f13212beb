"""What the fake Slack's parts share: the records of what the bot did, the conversations
and their messages, and the state every part reads (tokens, ids, scopes).

Kept apart so the Web API, Socket Mode and files modules can name these types without
importing the server that mixes them together.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["Call", "Channel", "ChannelKind", "SlackMessage", "SlackState", "Upload"]

JSON = dict[str, Any]
ChannelKind = Literal["channel", "group", "im", "mpim"]


@dataclass
class Call:
    """One accepted Web API call: the method, its parameters as parsed, and when."""

    method: str
    params: JSON
    at: float = field(default_factory=time.monotonic)


@dataclass
class SlackMessage:
    """A message the bot posted, as it stands now (``edits`` holds the earlier texts)."""

    ts: str
    channel: str
    thread_ts: str | None
    text: str
    blocks: list[JSON] | None
    user: str
    edits: list[str] = field(default_factory=list)
    deleted: bool = False
    files: list[JSON] = field(default_factory=list)
    #: the message metadata the app posted with it (or edited into it), if any
    metadata: JSON | None = None


@dataclass
class Upload:
    """A file the bot shared with ``files_upload_v2`` (files.completeUploadExternal)."""

    file_id: str
    channel: str | None
    thread_ts: str | None
    filename: str
    title: str | None
    content: bytes
    initial_comment: str | None
    message_ts: str | None  # the file_share message it made, None when shared nowhere


@dataclass
class Channel:
    """A conversation and everything said in it (users' and the bot's messages, thread
    replies included, oldest first)."""

    id: str
    kind: ChannelKind
    member: bool
    name: str
    user: str | None = None  # the other side of a DM
    history: list[JSON] = field(default_factory=list)

    @property
    def scope_prefix(self) -> str:
        """The prefix of this kind's scopes: ``channels:history``, ``im:read``, ..."""
        return {"channel": "channels", "group": "groups", "im": "im", "mpim": "mpim"}[self.kind]

    def find(self, ts: str) -> JSON | None:
        return next((m for m in self.history if m["ts"] == ts), None)

    def info(self) -> JSON:
        """The conversation object of conversations.info."""
        info: JSON = {"id": self.id, "created": 1_600_000_000, "is_archived": False,
                      "is_channel": self.kind == "channel", "is_group": self.kind == "group",
                      "is_im": self.kind == "im", "is_mpim": self.kind == "mpim",
                      "is_private": self.kind != "channel", "is_member": self.member,
                      "is_ext_shared": False, "is_shared": False, "is_org_shared": False}
        if self.kind == "im":
            info["user"] = self.user
            info["is_open"] = True
        else:
            info.update(name=self.name, name_normalized=self.name, is_general=False,
                        topic={"value": "", "creator": "", "last_set": 0},
                        purpose={"value": "", "creator": "", "last_set": 0})
        return info


class SlackState:
    """The state the fake's parts share; :class:`~tests.fakes.slack_server.FakeSlack`
    fills it in its constructor."""

    bot_token: str
    app_token: str
    team_id: str
    team_domain: str
    bot_user_id: str
    bot_id: str
    app_id: str
    scopes: tuple[str, ...]
    assistant: bool
    port: int
    channels: dict[str, Channel]
    _bot_messages: dict[tuple[str, str], SlackMessage]
    _last_ts: int
    _event_count: int
    _changed: asyncio.Event

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _push_event(self, event: JSON) -> None:
        raise NotImplementedError  # SlackSocket

    def _next_ts(self) -> str:
        """A message ts, ``"1700000000.000100"`` style: the moment it was said, as on
        Slack (the gateway reads a message's age off it), kept unique and increasing."""
        self._last_ts = max(self._last_ts + 100, int(time.time() * 1_000_000))
        return f"{self._last_ts // 1_000_000}.{self._last_ts % 1_000_000:06d}"

    def _next_event_id(self) -> str:
        self._event_count += 1
        return f"Ev0{self._event_count:09d}"

    def _append(self, room: Channel, message: JSON) -> None:
        """Into the history; a reply also updates its parent's thread fields."""
        room.history.append(message)
        thread_ts = message.get("thread_ts")
        if thread_ts is None or thread_ts == message["ts"]:
            return
        parent = room.find(thread_ts)
        if parent is None:
            return
        parent["thread_ts"] = thread_ts
        parent["reply_count"] = parent.get("reply_count", 0) + 1
        parent["latest_reply"] = message["ts"]
        users: list[str] = parent.setdefault("reply_users", [])
        author = message.get("user")
        if isinstance(author, str) and author not in users:
            users.append(author)
        parent["reply_users_count"] = len(users)

    def _subscribed_to_messages(self, room: Channel) -> bool:
        """Message events of a conversation need its kind's history scope (message.channels
        needs channels:history, message.im needs im:history, ...)."""
        return f"{room.scope_prefix}:history" in self.scopes

    def _bot_message(self, ts: str, text: str, *, blocks: list[JSON] | None = None,
                     thread_ts: str | None = None) -> JSON:
        """A message as Slack stores one the bot posted."""
        message: JSON = {"user": self.bot_user_id, "type": "message", "ts": ts,
                         "bot_id": self.bot_id, "app_id": self.app_id, "text": text,
                         "team": self.team_id,
                         "bot_profile": {"id": self.bot_id, "app_id": self.app_id,
                                         "name": "Homing", "deleted": False,
                                         "team_id": self.team_id,
                                         "icons": {"image_36": "", "image_48": "",
                                                   "image_72": ""}},
                         "blocks": blocks if blocks is not None else [rich_text(text)]}
        if thread_ts is not None:
            message["thread_ts"] = thread_ts
            message["parent_user_id"] = self.bot_user_id
        return message

    def _wake(self) -> None:
        event, self._changed = self._changed, asyncio.Event()
        event.set()

    async def _wait_until(self, done: Callable[[], bool], timeout: float,
                          expected: Callable[[], str]) -> None:
        try:
            async with asyncio.timeout(timeout):
                while not done():
                    await self._changed.wait()
        except TimeoutError:
            raise TimeoutError(f"expected {expected()} within {timeout}s") from None


def rich_text(text: str) -> JSON:
    """The rich_text block Slack adds to a message posted with text only."""
    return {"type": "rich_text", "block_id": uuid.uuid4().hex[:5],
            "elements": [{"type": "rich_text_section",
                          "elements": [{"type": "text", "text": text}]}]}
