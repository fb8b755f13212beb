"""The ownership rule: where a notification may go. One rule, every consumer.

A notification belongs to a session when (a) its session id is that live
session's, (b) its session was compressed and the compression lineage leads
to that live session, or (c) its session cannot be found but the web tab it
was started from is still open on that session's conversation. (d) What a
schedule says — its notes and its prompts — belongs to the conversation the
schedule belongs to, not to one lifetime of it: when its session has ended,
the conversation's live session is the owner. Anything that cannot be proven
is parked with a reason. Nothing here looks at the message
currently being handled: only the notification's own return address and the
persisted session store count.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

from gateway.delivery.notifications import Notification
from gateway.sessions.store import SessionStore
from gateway.words.return_address import anchor_of
from gateway.words.route import Route
from gateway.words.session_entry import SessionEntry
from gateway.words.session_key import SessionKeyError, key_parts_for, parse_session_key

#: notices of background jobs: for an ended owner they still reach the chat as a
#: labelled plain message; every other kind (delegation results) is parked
JOB_KINDS = frozenset({"completion", "watch_match", "watch_disabled"})
#: why a notice whose owner ended is parked (offered again if that session is resumed)
OWNER_ENDED = "owner_ended"
#: a schedule's own notices: they belong to its conversation, whichever session is live
CONVERSATION_KINDS = frozenset({"schedule_note", "schedule_prompt"})


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


@dataclass(frozen=True, slots=True)
class OwnerFacts:
    """What the store and the web chat say about a notification's owner."""

    session: SessionEntry | None  # the record of the notification's session id
    tip: SessionEntry | None = None  # the end of its compression lineage
    tab_session: SessionEntry | None = None  # live session of a conversation its tab is open on
    #: the live session of the notification's session key (looked up for CONVERSATION_KINDS)
    conversation: SessionEntry | None = None


def resolve_owner(n: Notification, facts: OwnerFacts, platforms: Collection[str]) -> Decision:
    """Decide where ``n`` goes, from facts alone (no I/O: every branch is unit-tested)."""
    try:
        parts = parse_session_key(n.session_key)
    except SessionKeyError as exc:
        return Park("no_route", str(exc))
    if parts.platform not in platforms:
        return Park("unknown_platform", f"platform {parts.platform!r} is not running here")
    try:
        anchor = anchor_of(n.address_json)
    except (ValueError, KeyError, TypeError):
        return Park("no_route", "the return address cannot be read")
    owner = facts.session
    if owner is None:
        if facts.tab_session is not None and facts.tab_session.session_key == n.session_key:
            owner = facts.tab_session  # (c) the tab that started it is still open here
        else:
            return Park("no_route", f"session {n.session_id} is not in the store")
    if owner.session_key != n.session_key:
        return Park("no_route", f"session {owner.id} belongs to {owner.session_key}")
    if not owner.is_live and owner.end_reason == "compression" and facts.tip is not None:
        owner = facts.tip  # (b) the live tip of the compression lineage
    if (not owner.is_live and n.kind in CONVERSATION_KINDS and facts.conversation is not None
            and facts.conversation.session_key == n.session_key):
        owner = facts.conversation  # (d) the conversation as it is now
    # the stored route must be the conversation the key names; chat and thread
    # come from the store, the reply anchor from the address captured at start
    if _key_fields(owner.route) != (parts.platform, parts.chat_type, parts.chat_id,
                                    parts.thread_id):
        return Park("no_route", "the stored route does not match the session key")
    route = owner.route.with_anchor(anchor)
    if owner.is_live:
        return DeliverTurn(owner, route)  # (a), or (b)/(c) resolved above
    # ended by /new or closed: never reopened, never handed to the chat's new session
    if n.kind in JOB_KINDS:
        return DeliverNotice(owner, route)
    return Park(OWNER_ENDED, f"session {owner.id} ended ({owner.end_reason})")


async def find_owners(notifications: Sequence[Notification], store: SessionStore,
                      open_tabs: Callable[[str, str], set[str]],
                      platforms: Collection[str]) -> list[Decision]:
    """Gather the facts for a batch with few lookups, then apply the rule to each.

    ``open_tabs(platform, chat_id)`` names the tabs open on a conversation.
    """
    sessions = await store.get_many({n.session_id for n in notifications})
    tips: dict[str, SessionEntry | None] = {}
    for entry in sessions.values():
        if not entry.is_live and entry.end_reason == "compression":
            tips[entry.id] = await store.lineage_tip(entry.id)
    decisions = []
    for n in notifications:
        session = sessions.get(n.session_id)
        tab_session: SessionEntry | None = None
        conversation: SessionEntry | None = None
        if session is None and n.tab_id:
            tab_session = await _session_of_open_tab(n, store, open_tabs)
        if n.kind in CONVERSATION_KINDS and (session is None or not session.is_live):
            conversation = await store.live_session(n.session_key)
        facts = OwnerFacts(session, tips.get(n.session_id), tab_session, conversation)
        decisions.append(resolve_owner(n, facts, platforms))
    return decisions


async def _session_of_open_tab(n: Notification, store: SessionStore,
                               open_tabs: Callable[[str, str], set[str]]
                               ) -> SessionEntry | None:
    try:
        parts = parse_session_key(n.session_key)
    except SessionKeyError:
        return None
    if n.tab_id not in open_tabs(parts.platform, parts.chat_id):
        return None
    return await store.live_session(n.session_key)


def _key_fields(route: Route) -> tuple[str, str, str, str | None]:
    parts = key_parts_for(route, group_sessions_per_user=False, thread_sessions_per_user=False)
    return parts.platform, parts.chat_type, parts.chat_id, parts.thread_id
