"""What a Slack send carries so that a later life can tell it went out, and that look.

Slack does not deduplicate a post: ``chat.postMessage`` made twice is two messages. It
does keep what an app attaches to its own message (message metadata, which people do
not see): every part Homing posts with a dedupe key carries ``{"event_type":
"homing_send", "event_payload": {"key": <digest of the key and the part>}}``, and a
streamed reply's final edit puts its key on the preview it turns into. After a crash
that lost a send's record, :func:`delivered` reads the bot's messages after the one the
send answered (the route's anchor), with their metadata (``include_all_metadata``),
for that key — found, the gateway records the send instead of making it again.

The key is a digest, not the dedupe key itself: metadata is readable by every app in
the workspace, and a dedupe key names sessions and jobs.
"""

from __future__ import annotations

import hashlib
from typing import Any

import structlog

from gateway.platforms.slack.api import SlackRefused, WebApi
from gateway.words.route import Route

log = structlog.get_logger(__name__)

#: the metadata's event type: Homing's sends, told apart from any other app's metadata
SEND_EVENT = "homing_send"
#: the most messages read after the anchor; past it, whether the send went out is unknown
READ_BACK_LIMIT = 1000
_PAGE = 200


def send_key(dedupe_key: str, part: int) -> str:
    """What part ``part`` of the send keyed ``dedupe_key`` carries: the same in every life."""
    return hashlib.blake2b(f"{dedupe_key}#{part}".encode(), digest_size=16).hexdigest()


def send_metadata(dedupe_key: str | None, part: int) -> dict[str, Any] | None:
    """The ``metadata`` of that part's post (or final edit); None without a key."""
    if dedupe_key is None:
        return None
    return {"event_type": SEND_EVENT, "event_payload": {"key": send_key(dedupe_key, part)}}


def carried_key(message: dict[str, Any]) -> str | None:
    """The send key a message read back carries, if Homing posted it with one."""
    metadata = message.get("metadata")
    if not isinstance(metadata, dict) or metadata.get("event_type") != SEND_EVENT:
        return None
    payload = metadata.get("event_payload")
    key = payload.get("key") if isinstance(payload, dict) else None
    return key if isinstance(key, str) else None


async def delivered(api: WebApi, route: Route, dedupe_key: str, *,
                    bot_user_id: str | None) -> bool | None:
    """Whether the bot posted the first part of the send keyed ``dedupe_key`` into
    ``route`` after its anchor (``route.message_id``): its thread's replies
    (``conversations.replies``), or the channel's or DM's top level
    (``conversations.history``). None when it cannot be told: no anchor, Slack refused
    the read, or more than :data:`READ_BACK_LIMIT` messages came after the anchor."""
    anchor = route.message_id
    if anchor is None:
        return None
    wanted = send_key(dedupe_key, 0)
    where: dict[str, Any] = {"channel": route.chat_id, "oldest": anchor,
                             "include_all_metadata": True, "limit": _PAGE}
    if route.thread_id is not None:
        method, where["ts"] = "conversations.replies", route.thread_id
    else:
        method = "conversations.history"
    try:
        messages = await api.pages(method, "messages", limit_items=READ_BACK_LIMIT, **where)
    except SlackRefused as exc:
        log.warning("slack_delivery_unknown", channel=route.chat_id,
                    thread_ts=route.thread_id, anchor=anchor, error=str(exc),
                    hint="the send is made again; the app needs the conversation's "
                         "history scope to tell")
        return None
    for message in messages:
        # a thread's parent leads every page of its replies, older than the anchor or not
        after = float(message.get("ts") or 0) > float(anchor)
        by_bot = bot_user_id is None or message.get("user") == bot_user_id
        if after and by_bot and carried_key(message) == wanted:
            return True
    if len(messages) >= READ_BACK_LIMIT:
        log.warning("slack_delivery_unknown", channel=route.chat_id,
                    thread_ts=route.thread_id, anchor=anchor, read=len(messages),
                    error="too many messages after the anchor to read them all")
        return None
    return False
