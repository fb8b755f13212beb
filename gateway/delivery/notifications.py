"""Notifications: what background work reports, stored with the return address it
carries home (gateway/words/return_address.py)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from gateway.words.events import NoticeInfo, Outcome
from gateway.words.return_address import ReturnAddress


class NotificationState(StrEnum):
    """A row of the outbox: stored pending, claimed by one router, then delivered or
    parked with a reason."""

    PENDING = "pending"
    CLAIMED = "claimed"
    DELIVERED = "delivered"
    PARKED = "parked"


#: the moves a notification's state may make, and no others (tests/test_states.py
#: reads every UPDATE of the table against it)
NOTIFICATION_MOVES: dict[NotificationState, frozenset[NotificationState]] = {
    # claimed by a router; parked without a try (its schedule was removed); delivered
    # without a send (a turn consumed it)
    NotificationState.PENDING: frozenset({NotificationState.CLAIMED, NotificationState.PARKED,
                                          NotificationState.DELIVERED}),
    # sent; given up on; or let go (a retry, a dead claimer, a withheld send)
    NotificationState.CLAIMED: frozenset({NotificationState.DELIVERED, NotificationState.PARKED,
                                          NotificationState.PENDING}),
    NotificationState.DELIVERED: frozenset(),
    # offered again: its session, ended, was resumed (``/resume``)
    NotificationState.PARKED: frozenset({NotificationState.PENDING}),
}
STATES: tuple[str, ...] = tuple(NotificationState)


#: ``last_error`` of a notification whose claim ended with its gateway, with no send
#: recorded: it went back to pending, and it may have gone out just before the stop
#: (the one window between a send and its record)
INTERRUPTED = "claimed when its gateway stopped"


@dataclass(frozen=True, slots=True)
class NewNotification:
    """A notification about to be committed to the outbox."""

    idempotency_key: str
    kind: str
    address: ReturnAddress
    text: str
    job_id: str | None = None
    outcome: Outcome | None = None
    #: a file posted with the notice (a job's artifact)
    file_path: str | None = None
    #: the trace of the work it reports (gateway/tracing.py)
    trace_parent: str | None = None


@dataclass(frozen=True, slots=True)
class Notification:
    id: int
    idempotency_key: str
    kind: str
    job_id: str | None
    session_key: str
    session_id: str
    tab_id: str | None
    address_json: str
    text: str
    state: str
    reason: str | None
    attempts: int
    last_error: str | None
    not_before: float | None
    claimed_by: str | None
    sent_message_id: str | None
    created_at: float
    delivered_at: float | None
    outcome: Outcome | None = None
    file_path: str | None = None
    #: the first notification of the one message this one goes out in, with others
    #: (gateway/delivery/merged_notices.py); None: it goes on its own
    merged_into: int | None = None
    #: the trace of the work it reports (gateway/tracing.py)
    trace_parent: str | None = None

    @property
    def interrupted(self) -> bool:
        """Its last claim ended with its gateway before a send was recorded: it may have
        gone out. It goes alone, as it went then (the same key, so a platform that can
        tell or deduplicate does), never merged anew with others."""
        return self.last_error == INTERRUPTED

    @property
    def info(self) -> NoticeInfo:
        return NoticeInfo(self.kind, self.outcome)

    @property
    def address(self) -> ReturnAddress | None:
        """The captured address, or None when it cannot be read (fail closed)."""
        try:
            return ReturnAddress.from_json(self.address_json)
        except (ValueError, KeyError, TypeError):
            return None

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id, "kind": self.kind, "state": self.state, "reason": self.reason,
            "session_key": self.session_key, "session_id": self.session_id,
            "tab_id": self.tab_id, "job_id": self.job_id, "created_at": self.created_at,
            "delivered_at": self.delivered_at, "attempts": self.attempts,
            "last_error": self.last_error, "sent_message_id": self.sent_message_id,
            "idempotency_key": self.idempotency_key, "text": self.text,
            "merged_into": self.merged_into,
        }


NOTIFICATION_COLUMNS = (
    "id, idempotency_key, kind, job_id, session_key, session_id, tab_id, return_address, "
    "text, state, reason, attempts, last_error, not_before, claimed_by, sent_message_id, "
    "created_at, delivered_at, outcome, file_path, merged_into, trace_parent"
)
