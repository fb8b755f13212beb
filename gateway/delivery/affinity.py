"""One conversation, one instance at a time (a shared store).

Within an instance a conversation's turns and notices take turns in its lane. Across
instances nothing would stop a Telegram message being handled on the poller's
instance while another instance delivers a notice into the same conversation — two
turns of one session at once, and a busy owner getting its mail mid-turn. So:

- a router does not claim a conversation's notice while another instance has a
  message of that conversation in hand (journaled to it and not finished) or is
  delivering one of its notices: the instance that has it claims the notice
  instead, and its lane keeps the order;
- a message's turn waits until no other instance is delivering into its
  conversation.

Both questions are answered from rows the instances write anyway (the journal's
handler, the outbox's claim); what a dead instance held counts until a survivor takes
it over. Two claims made at the same moment by two instances cannot see each other's
rows yet (write transactions run side by side on PostgreSQL), so a claim also holds a
lock on each conversation it takes rows of, for its own short transaction, and skips a
conversation another claim holds (:func:`conversation_locked`): one claim at a time per
conversation, and once it commits its claimed rows keep the others away.

Conversations are spread across the live instances: each prefers the conversations
whose key hashes to its place among them (:data:`PREFERRED`), and takes another's only
once a notice has waited :data:`AFFINITY_GRACE` for it (that instance is busy, or gone,
or the instances changed and the hashes with them). So two instances rarely want one
conversation; when they do, the rules above decide.
"""

from __future__ import annotations

import asyncio
from typing import Any

import structlog

from gateway.delivery.notifications import NotificationState
from gateway.inbound.journal import OPEN_STATES
from gateway.store.state import StateDatabase

log = structlog.get_logger(__name__)

#: the claim's condition on its candidate ``n``: 4 parameters, see :func:`elsewhere`
NOT_BUSY_ELSEWHERE = (
    f" AND NOT EXISTS (SELECT 1 FROM inbound i WHERE i.session_key = n.session_key "
    f"AND i.state IN ({OPEN_STATES}) AND i.handler IS NOT NULL "
    f"AND substr(i.handler, 1, ?) <> ?)"
    " AND NOT EXISTS (SELECT 1 FROM notifications c WHERE c.session_key = n.session_key "
    f"AND c.state = '{NotificationState.CLAIMED}' AND substr(c.claimed_by, 1, ?) <> ?)")
_DELIVERING_ELSEWHERE = (
    f"SELECT 1 FROM notifications WHERE session_key = ? AND state = '{NotificationState.CLAIMED}' "
    "AND substr(claimed_by, 1, ?) <> ? LIMIT 1")
POLL_SECONDS = 0.05


def elsewhere(life_prefix: str) -> tuple[int, str, int, str]:
    """The parameters of :data:`NOT_BUSY_ELSEWHERE` for this life (``i:<name>:<epoch>:``)."""
    n = len(life_prefix)
    return n, life_prefix, n, life_prefix


async def wait_until_not_delivered_elsewhere(db: StateDatabase, session_key: str,
                                             life_prefix: str) -> None:
    """Before a message's turn: let another instance's delivery into this conversation
    finish (or its dead claimer's claim be settled)."""
    told = False
    while await db.fetchone(_DELIVERING_ELSEWHERE,
                            (session_key, len(life_prefix), life_prefix)) is not None:
        if not told:
            log.info("turn_waits_for_another_instance", session_key=session_key)
            told = True
        await asyncio.sleep(POLL_SECONDS)


#: Homing's namespace of PostgreSQL advisory locks (the two-key form: namespace, key)
LOCK_NAMESPACE = 0x686F6D69
def conversation_locked(conditions: str) -> str:
    """The claim's conditions on its candidate ``n`` (``conditions``: ``" AND …"``
    each), and then its conversation held for this transaction — or the candidate
    skipped while another claim holds it. The lock is asked only of a candidate that
    passed the rest (a CASE keeps the order: a conversation the claim would not take is
    never held, so the claim that would is never kept from it). The parameters:
    ``conditions``' own, then the namespace."""
    return (f" AND CASE WHEN TRUE{conditions} "
            f"THEN pg_try_advisory_xact_lock(?, hashtext(n.session_key)) ELSE FALSE END")
#: the claim's condition on its candidate ``n``: one of this instance's conversations —
#: its key's hash falls to it, or a message of it is in this instance's hands — or one
#: that waited past the grace (5 parameters: see :func:`place`)
PREFERRED = (" AND (((hashtext(n.session_key)::bigint & 2147483647) % ?) = ? "
             "OR EXISTS (SELECT 1 FROM inbound h WHERE h.session_key = n.session_key "
             f"AND h.state IN ({OPEN_STATES}) AND substr(h.handler, 1, ?) = ?) "
             "OR n.created_at < ?)")
#: how long a notice waits for the instance its conversation hashes to before any other
#: may take it
AFFINITY_GRACE = 1.0
_LIVE_NAMES = ("SELECT name FROM instances WHERE stopped_at IS NULL "
               "AND lease_expires_at >= ? ORDER BY name")


def place(conn: Any, name: str, now: float) -> tuple[int, int]:
    """(how many instances are live, this one's place among them by name), inside the
    claim's transaction; (1, 0) when it is not among them (a claim then prefers every
    conversation: the fence decides whether it may claim at all)."""
    names = [row[0] for row in conn.execute(_LIVE_NAMES, (now,)).fetchall()]
    return (len(names), names.index(name)) if name in names else (1, 0)
