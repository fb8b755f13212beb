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
handler, the outbox's claim), each in the store's own write order, so no new lock is
needed; what a dead instance held counts until a survivor takes it over.
"""

from __future__ import annotations

import asyncio

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
