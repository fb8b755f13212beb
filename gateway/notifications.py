"""Notifications and the return address they carry home."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from .context import current_session
from .events import NoticeInfo, Outcome
from .route import Route

STATES: tuple[str, ...] = ("pending", "claimed", "delivered", "parked")


@dataclass(frozen=True, slots=True)
class ReturnAddress:
    """Where background work reports back, captured when the work starts."""

    session_key: str
    session_id: str
    route: Route
    tab_id: str | None = None

    @classmethod
    def capture(cls) -> ReturnAddress:
        """The current turn's address; raises NoSessionContext outside a turn."""
        ctx = current_session()
        return cls(session_key=ctx.session_key, session_id=ctx.session_id,
                   route=ctx.route, tab_id=ctx.tab_id)

    def to_json(self) -> str:
        return json.dumps({"session_key": self.session_key, "session_id": self.session_id,
                           "tab_id": self.tab_id, "route": self.route.to_dict()})

    @classmethod
    def from_json(cls, text: str) -> ReturnAddress:
        data = json.loads(text)
        return cls(session_key=data["session_key"], session_id=data["session_id"],
                   tab_id=data.get("tab_id"), route=Route.from_dict(data["route"]))


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
    #: (gateway/merged_notices.py); None: it goes on its own
    merged_into: int | None = None

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
    "created_at, delivered_at, outcome, file_path, merged_into"
)
