"""The ownership rule: where a notification may go. One function, every consumer.

A notification is delivered only where it can be proven to belong; anything
that cannot be proven is parked with a reason. Nothing here looks at the
message currently being handled: the answer depends only on the
notification's own return address and the persisted session store.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from .notifications import Notification
from .route import Route
from .session_key import SessionKeyError, key_parts_for, parse_session_key
from .store import SessionEntry


@dataclass(frozen=True, slots=True)
class DeliverTurn:
    """The owner is live: give it a turn at ``route``."""

    session: SessionEntry
    route: Route


@dataclass(frozen=True, slots=True)
class DeliverNotice:
    """The owner has ended: a plain, labelled message in its route; no turn for anyone."""

    session: SessionEntry
    route: Route


@dataclass(frozen=True, slots=True)
class Park:
    reason: str
    detail: str


Decision = DeliverTurn | DeliverNotice | Park


def resolve_owner(n: Notification, session: SessionEntry | None,
                  platforms: Collection[str]) -> Decision:
    """Decide where ``n`` goes.

    ``session`` is the store's record for ``n.session_id`` (None when the
    lookup found nothing); ``platforms`` are the platforms this gateway runs.
    """
    try:
        parts = parse_session_key(n.session_key)
    except SessionKeyError as exc:
        return Park("no_route", str(exc))
    if parts.platform not in platforms:
        return Park("unknown_platform", f"platform {parts.platform!r} is not running here")
    address = n.address
    if address is None:
        return Park("no_route", "the return address cannot be read")
    if session is None:
        return Park("no_route", f"session {n.session_id} is not in the store")
    if session.session_key != n.session_key:
        return Park("no_route", f"session {session.id} belongs to {session.session_key}")
    stored = session.route
    # the stored route must be the conversation the key names; chat and thread
    # come from the store, the reply anchor from the address captured at start
    if _key_fields(stored) != (parts.platform, parts.chat_type, parts.chat_id, parts.thread_id):
        return Park("no_route", "the stored route does not match the session key")
    route = stored.with_anchor(address.route.message_id)
    if session.is_live:
        return DeliverTurn(session, route)
    return DeliverNotice(session, route)


def _key_fields(route: Route) -> tuple[str, str, str, str | None]:
    parts = key_parts_for(route, group_sessions_per_user=False, thread_sessions_per_user=False)
    return parts.platform, parts.chat_type, parts.chat_id, parts.thread_id
