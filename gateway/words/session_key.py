"""Session keys: the one place they are built and parsed.

``agent:main:{platform}:{chat_type}:{chat_id}[:{thread_id}[:{user_id}]]``.
A per-user session in a chat without a thread keeps an empty thread slot
(``...:{chat_id}::{user_id}``) so that a user id is never read back as a
topic id. Parts are escaped (``%`` and ``:``) so any id round-trips.
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.errors import RefusedInput
from gateway.words.route import CHAT_TYPES, Route

PREFIX = "agent:main"


class SessionKeyError(RefusedInput, ValueError):
    """A string that is not a session key this gateway could have built."""


@dataclass(frozen=True, slots=True)
class SessionKeyParts:
    platform: str
    chat_type: str
    chat_id: str
    thread_id: str | None = None
    user_id: str | None = None


def key_parts_for(route: Route, *, group_sessions_per_user: bool,
                  thread_sessions_per_user: bool) -> SessionKeyParts:
    """Which parts of a route identify its conversation under the session options."""
    if route.chat_type == "dm":
        per_user = False
    elif route.thread_id is not None:
        per_user = thread_sessions_per_user
    else:
        per_user = group_sessions_per_user
    return SessionKeyParts(
        platform=route.platform,
        chat_type=route.chat_type,
        chat_id=route.chat_id,
        thread_id=route.thread_id,
        user_id=route.user_id if per_user and route.user_id is not None else None,
    )


def build_session_key(route: Route, *, group_sessions_per_user: bool = True,
                      thread_sessions_per_user: bool = False) -> str:
    return format_session_key(key_parts_for(
        route,
        group_sessions_per_user=group_sessions_per_user,
        thread_sessions_per_user=thread_sessions_per_user,
    ))


def format_session_key(parts: SessionKeyParts) -> str:
    segments = [PREFIX, _escape(parts.platform), parts.chat_type, _escape(parts.chat_id)]
    if parts.thread_id is not None or parts.user_id is not None:
        segments.append("" if parts.thread_id is None else _escape(parts.thread_id))
    if parts.user_id is not None:
        segments.append(_escape(parts.user_id))
    return ":".join(segments)


def platform_prefix(platform: str) -> str:
    """What every session key of ``platform`` starts with."""
    return f"{PREFIX}:{_escape(platform)}:"


def parse_session_key(key: str) -> SessionKeyParts:
    """Parse a key back into its parts; raise SessionKeyError when it is not one."""
    if not isinstance(key, str) or not key.startswith(PREFIX + ":"):
        raise SessionKeyError(f"not a session key (expected prefix {PREFIX!r}): {key!r}")
    segments = key[len(PREFIX) + 1:].split(":")
    if not 3 <= len(segments) <= 5:
        raise SessionKeyError(f"a session key has 3 to 5 parts after the prefix: {key!r}")
    platform, chat_type, chat_id = segments[:3]
    if not platform or not chat_id:
        raise SessionKeyError(f"session key without platform or chat id: {key!r}")
    if chat_type not in CHAT_TYPES:
        raise SessionKeyError(f"unknown chat type {chat_type!r} in session key {key!r}")
    thread = segments[3] if len(segments) > 3 else None
    user = segments[4] if len(segments) > 4 else None
    if len(segments) == 4 and thread == "":
        raise SessionKeyError(f"empty thread part in session key {key!r}")
    if user == "":
        raise SessionKeyError(f"empty user part in session key {key!r}")
    return SessionKeyParts(
        platform=_unescape(platform),
        chat_type=chat_type,
        chat_id=_unescape(chat_id),
        thread_id=_unescape(thread) if thread else None,
        user_id=_unescape(user) if user is not None else None,
    )


def _escape(part: str) -> str:
    return part.replace("%", "%25").replace(":", "%3A")


def _unescape(part: str) -> str:
    if "%" not in part:  # (nearly every part: nothing to undo)
        return part
    return part.replace("%3A", ":").replace("%25", "%")
