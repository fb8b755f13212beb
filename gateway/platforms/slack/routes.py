"""What the Slack adapter reads off an event without asking Slack: whether it is a
person's message at all, its route (and a button press's), its platform id, and its
text as typed.

A channel's top-level message starts a thread for its answer (``reply_in_thread``),
and that thread is the conversation from then on: its route is the thread's (chat id
the channel, thread id the message's own ts), so the turn's replies and any job it
starts report there. A reply in a thread is that thread's conversation; a DM is one
conversation, a thread in a DM one of its own.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from gateway.formatting.mrkdwn import unescape
from gateway.words.route import Route

#: message subtypes that are still a person saying something; every other subtype
#: (message_changed, message_deleted, bot_message, channel_join, …) is not
_SPOKEN = frozenset({None, "file_share", "thread_broadcast", "me_message"})
_LINK = re.compile(r"<((?:https?|mailto):[^|>]+)(?:\|([^>]*))?>")
_SPECIAL = re.compile(r"<!(here|channel|everyone)(?:\|[^>]*)?>")
_MENTION = re.compile(r"<([@#])([A-Z0-9]+)(?:\|([^>]*))?>")


@dataclass(frozen=True, slots=True)
class SpokenMessage:
    """A person's message, as the adapter takes it in (a live event, or read back)."""

    channel: str
    #: channel, group (private channel), im (a DM), mpim (a group DM)
    channel_type: str
    ts: str
    thread_ts: str | None
    user: str
    text: str
    client_msg_id: str | None = None
    files: list[dict[str, Any]] = field(default_factory=list)

    @property
    def is_dm(self) -> bool:
        return self.channel_type == "im"

    @property
    def in_thread(self) -> bool:
        """A reply in a thread (the thread's parent is a top-level message)."""
        return self.thread_ts is not None and self.thread_ts != self.ts

    @property
    def platform_id(self) -> str:
        """A message is its channel and its ts on Slack: the same live, redelivered, as
        an app_mention, or read back from history."""
        return platform_id(self.channel, self.ts)

    @property
    def sent_at(self) -> float:
        return float(self.ts)


def spoken(event: dict[str, Any], *, bot_user_id: str | None, channel_type: str | None = None
           ) -> SpokenMessage | None:
    """``event`` (a ``message`` or ``app_mention`` event, or a message of a history page)
    as a person's message; None for the bot's own (Slack echoes them), other bots',
    edits, deletions, joins and anything else that is not someone speaking."""
    if event.get("type") not in ("message", "app_mention"):
        return None
    if event.get("subtype") not in _SPOKEN or event.get("bot_id") or event.get("hidden"):
        return None
    user, ts, channel = event.get("user"), event.get("ts"), event.get("channel")
    if not isinstance(user, str) or not isinstance(ts, str) or not isinstance(channel, str):
        return None
    if user == bot_user_id:
        return None
    kind = channel_type or event.get("channel_type") or _kind_of(channel)
    thread_ts = event.get("thread_ts")
    files = [f for f in event.get("files") or [] if isinstance(f, dict)]
    client_msg_id = event.get("client_msg_id")
    return SpokenMessage(channel, str(kind), ts, thread_ts if isinstance(thread_ts, str) else None,
                         user, str(event.get("text") or ""),
                         client_msg_id if isinstance(client_msg_id, str) else None, files)


def route_of(message: SpokenMessage, *, reply_in_thread: bool) -> Route:
    """The conversation ``message`` belongs to (see the module's story)."""
    user, anchor = message.user, message.ts
    if message.is_dm:
        thread = message.thread_ts if message.in_thread else None
        return Route("slack", "dm", message.channel, thread_id=thread, user_id=user,
                     message_id=anchor)
    if message.in_thread:
        return Route("slack", "thread", message.channel, thread_id=message.thread_ts,
                     user_id=user, parent_chat_id=message.channel, message_id=anchor)
    if reply_in_thread:
        return Route("slack", "thread", message.channel, thread_id=message.ts, user_id=user,
                     parent_chat_id=message.channel, message_id=anchor)
    return Route("slack", "group", message.channel, user_id=user, message_id=anchor)


def press_route(channel: str, message_ts: str, thread_ts: str | None, user: str, *,
                reply_in_thread: bool) -> Route:
    """The conversation of a message a button was pressed on, as the one who pressed: the
    route a message of theirs in its place would have, anchored on the pressed message."""
    return route_of(SpokenMessage(channel, _kind_of(channel), message_ts, thread_ts, user, ""),
                    reply_in_thread=reply_in_thread)


def platform_id(channel: str, ts: str) -> str:
    return f"{channel}:{ts}"


def text_as_typed(text: str, bot_user_id: str | None) -> str:
    """Slack's markup of a person's text back as they typed it: the bot's own mention
    gone, links as their address, ``&lt;`` as ``<``."""
    if bot_user_id:
        text = re.sub(rf"<@{re.escape(bot_user_id)}(?:\|[^>]*)?>", "", text)
    text = _LINK.sub(lambda m: m.group(1) if not m.group(2) or m.group(2) == m.group(1)
                     else f"{m.group(2)} ({m.group(1)})", text)
    text = _SPECIAL.sub(lambda m: f"@{m.group(1)}", text)
    text = _MENTION.sub(lambda m: f"{m.group(1)}{m.group(3) or m.group(2)}", text)
    return unescape(text).strip()


def _kind_of(channel: str) -> str:
    """A conversation's kind by its id, where the event does not say: D… is a DM."""
    if channel.startswith("D"):
        return "im"
    return "group" if channel.startswith("G") else "channel"
