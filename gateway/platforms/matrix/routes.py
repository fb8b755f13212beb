"""What the Matrix adapter reads off a room event without asking the homeserver:
whether it is a person's message (or a reaction), its route, its text, its files.

A thread (``m.thread``) is its own conversation: its route's thread id is the thread
root's event id, so the turn's replies and any job it starts report into that thread.
A room's main timeline is one conversation; a room with just the person and the bot is
a DM, and a thread in it one of its own. The event id is the platform id: the same
live, read again after a sync that was not confirmed, or backfilled.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from gateway.inbound.files import IncomingFile
from gateway.words.route import Route

#: message types that are someone saying something; m.notice is a bot's (never answered)
_SPOKEN = frozenset({"m.text", "m.emote", "m.image", "m.file", "m.audio", "m.video"})
_FILES = {"m.image": "photo", "m.file": "document", "m.audio": "audio", "m.video": "video"}
#: a reply's fallback: the quoted lines (``> <@who> said``) and the blank line after them
_REPLY_FALLBACK = re.compile(r"\A(?:> .*\n?)+\n?")
#: the reactions that decide an approval
REACTIONS: dict[str, str] = {"\u2705": "once", "\u274c": "deny"}


@dataclass(frozen=True, slots=True)
class SpokenMessage:
    """A person's message, as the adapter takes it in."""

    room_id: str
    event_id: str
    sender: str
    text: str
    #: the thread root's event id, for a message in a thread
    thread_root: str | None
    sent_at: float
    files: list[IncomingFile] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Reaction:
    """An ``m.annotation`` on an event: a ✅ or ❌ under an approval request."""

    room_id: str
    event_id: str
    sender: str
    target: str
    key: str


def spoken(room_id: str, event: dict[str, Any], *, bot_user_id: str) -> SpokenMessage | None:
    """``event`` as a person's message; None for the bot's own (they come back in the
    sync), notices, edits, redactions, state and anything else."""
    if event.get("type") != "m.room.message" or event.get("sender") == bot_user_id:
        return None
    content = _dict(event.get("content"))
    sender, event_id = event.get("sender"), event.get("event_id")
    if not isinstance(sender, str) or not isinstance(event_id, str):
        return None
    msgtype = content.get("msgtype")
    relates = _dict(content.get("m.relates_to"))
    if msgtype not in _SPOKEN or relates.get("rel_type") == "m.replace":
        return None
    thread = relates.get("event_id") if relates.get("rel_type") == "m.thread" else None
    body = str(content.get("body") or "")
    if relates.get("m.in_reply_to") and not relates.get("is_falling_back") \
            and "formatted_body" in content:
        body = _REPLY_FALLBACK.sub("", body)
    files: list[IncomingFile] = []
    if msgtype in _FILES and isinstance(content.get("url"), str):
        info = _dict(content.get("info"))
        name = str(content.get("filename") or body or "file")
        size = info.get("size")
        files.append(IncomingFile(_FILES[str(msgtype)], name,
                                  info.get("mimetype") if isinstance(info.get("mimetype"), str)
                                  else None, size if isinstance(size, int) else None,
                                  str(content["url"])))
        # the body of a file is its name, unless a caption was given beside a filename
        body = body if content.get("filename") and body != content.get("filename") else ""
    if msgtype == "m.emote":
        body = f"/me {body}"
    stamp = event.get("origin_server_ts")
    return SpokenMessage(room_id, event_id, sender, body.strip(),
                         thread if isinstance(thread, str) else None,
                         stamp / 1000 if isinstance(stamp, int | float) else 0.0, files)


def reaction(room_id: str, event: dict[str, Any], *, bot_user_id: str) -> Reaction | None:
    """``event`` as someone's ✅ or ❌ on an event; None for anything else."""
    if event.get("type") != "m.reaction" or event.get("sender") == bot_user_id:
        return None
    relates = _dict(_dict(event.get("content")).get("m.relates_to"))
    key = str(relates.get("key") or "").replace("\ufe0f", "")
    target, sender = relates.get("event_id"), event.get("sender")
    if relates.get("rel_type") != "m.annotation" or key not in REACTIONS \
            or not isinstance(target, str) or not isinstance(sender, str):
        return None
    return Reaction(room_id, str(event.get("event_id")), sender, target, key)


def route_of(message: SpokenMessage, *, is_dm: bool) -> Route:
    """The conversation ``message`` belongs to (see the module's story)."""
    room, thread = message.room_id, message.thread_root
    if is_dm:
        return Route("matrix", "dm", room, thread_id=thread, user_id=message.sender,
                     message_id=message.event_id)
    if thread is not None:
        return Route("matrix", "thread", room, thread_id=thread, user_id=message.sender,
                     parent_chat_id=room, message_id=message.event_id)
    return Route("matrix", "group", room, user_id=message.sender, message_id=message.event_id)


def thread_relation(route: Route) -> dict[str, Any] | None:
    """What puts a message into the route's thread (None: its room's main timeline):
    the ``m.thread`` relation, with a reply to the message that started the turn for
    clients without threads."""
    if route.thread_id is None:
        return None
    return {"rel_type": "m.thread", "event_id": route.thread_id, "is_falling_back": True,
            "m.in_reply_to": {"event_id": route.message_id or route.thread_id}}


def _dict(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}
