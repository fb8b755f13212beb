"""An approval as it is stored and shown: its row, its request text, its outcome line,
and the button data every platform carries back."""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any, Literal, Protocol

from gateway.words.return_address import ReturnAddress


class ApprovalState(StrEnum):
    """An approval: pending until someone chooses, or it expires, or its session or
    the gateway lets it go."""

    PENDING = "pending"
    APPROVED = "approved"
    DENIED = "denied"
    EXPIRED = "expired"
    CANCELLED = "cancelled"


#: the moves an approval's state may make, and no others (tests/test_states.py reads
#: every UPDATE of the table against it): decided once
APPROVAL_MOVES: dict[ApprovalState, frozenset[ApprovalState]] = {
    ApprovalState.PENDING: frozenset({ApprovalState.APPROVED, ApprovalState.DENIED,
                                      ApprovalState.EXPIRED, ApprovalState.CANCELLED}),
    ApprovalState.APPROVED: frozenset(),
    ApprovalState.DENIED: frozenset(),
    ApprovalState.EXPIRED: frozenset(),
    ApprovalState.CANCELLED: frozenset(),
}
Decision = Literal["once", "session", "deny"]
DECISIONS: tuple[Decision, ...] = ("once", "session", "deny")
#: a button's data: ``ap:<id>:<o|s|d>`` (Telegram allows 64 bytes, Discord 100)
_BUTTON = re.compile(r"^ap:(a[0-9a-f]{7}):([osd])$")
_LETTER: dict[Decision, str] = {"once": "o", "session": "s", "deny": "d"}
CHOICES: tuple[tuple[Decision, str], ...] = (
    ("once", "Approve once"), ("session", "Approve for this session"), ("deny", "Deny"))

COLUMNS = ("id, tool, command, action, reason, grant_key, session_key, session_id, "
           "return_address, requester, state, decision, decided_by, message_id, ran, "
           "created_at, expires_at, decided_at")


@dataclass(frozen=True, slots=True)
class ApprovalRecord:
    id: str
    #: the tool the model called (terminal, delegate_task, schedule)
    tool: str
    #: what is shown and matched: the exact command, or the delegated task
    command: str
    #: the tool call's arguments, to carry it out later (after a restart)
    action: dict[str, Any]
    reason: str
    grant_key: str
    address: ReturnAddress
    #: the user whose message started the turn (platform user id)
    requester: str | None
    state: ApprovalState
    decision: Decision | None
    decided_by: str | None
    #: the request's message on the platform, to show the outcome in place
    message_id: str | None
    #: how it was carried out, once approved ("in the turn", "job j…")
    ran: str | None
    created_at: float
    expires_at: float
    decided_at: float | None

    @classmethod
    def from_row(cls, row: Any) -> ApprovalRecord:
        (aid, tool, command, action, reason, grant, _key, _sid, address, requester, state,
         decision, by, message_id, ran, created, expires, decided) = row
        return cls(aid, tool, command, json.loads(action), reason, grant,
                   ReturnAddress.from_json(address), requester, ApprovalState(state), decision, by,
                   message_id, ran, created, expires, decided)

    def insert_op(self, waiter: str | None = None) -> tuple[str, tuple[Any, ...]]:
        """``waiter``: on a shared store, the life whose turn waits for the choice."""
        return (f"INSERT INTO approvals ({COLUMNS}, waiter) VALUES "
                f"(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (self.id, self.tool, self.command, json.dumps(self.action, ensure_ascii=False),
                 self.reason, self.grant_key, self.address.session_key,
                 self.address.session_id, self.address.to_json(), self.requester, self.state,
                 self.decision, self.decided_by, self.message_id, self.ran, self.created_at,
                 self.expires_at, self.decided_at, waiter))

    @property
    def platform(self) -> str:
        return self.address.route.platform

    def settled(self, state: ApprovalState, decision: Decision | None, by: str | None,
                ran: str | None = None) -> ApprovalRecord:
        return replace(self, state=state, decision=decision, decided_by=by, ran=ran,
                       decided_at=time.time())

    def request_text(self, *, settled: bool = False) -> str:
        """The request as text (Markdown): what, why, and (until it is ``settled``, when
        the outcome line takes its place) how to answer without buttons."""
        minutes = max(1, round((self.expires_at - self.created_at) / 60))
        what = "delegate this task" if self.tool == "delegate_task" else "run"
        text = (f"**Approval needed** ({self.id}): the agent wants to {what}\n"
                f"{fenced(self.command)}\n"
                f"Why asked: {self.reason}.")
        if settled:
            return text
        return (f"{text}\nAnswer with the buttons, or /approve {self.id} (once), "
                f"/approve {self.id} session, /deny {self.id}. "
                f"No answer within {minutes} min means no.")

    def outcome_text(self) -> str:
        """What became of it, one line, for the request's place in the chat."""
        by = f" by {self.decided_by}" if self.decided_by else ""
        if self.state == "approved":
            how = "for this session" if self.decision == "session" else "once"
            ran = f" ({self.ran})" if self.ran else ""
            return f"Approved {how}{by}{ran}."
        if self.state == "denied":
            return f"Denied{by}: not run."
        if self.state == "expired":
            return "No answer in time: not run."
        return f"Cancelled ({self.ran or 'the turn ended'}): not run."

    def to_dict(self) -> dict[str, Any]:
        route = self.address.route
        return {"id": self.id, "tool": self.tool, "command": self.command,
                "reason": self.reason, "state": self.state, "decision": self.decision,
                "decided_by": self.decided_by, "ran": self.ran, "requester": self.requester,
                "platform": route.platform, "chat_id": route.chat_id,
                "thread_id": route.thread_id, "session_key": self.address.session_key,
                "session_id": self.address.session_id, "created_at": self.created_at,
                "expires_at": self.expires_at, "decided_at": self.decided_at}


def fenced(text: str) -> str:
    """``text`` in a code block whose fence nothing in it can close."""
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}\n{text}\n{fence}"


def button_data(approval_id: str, decision: Decision) -> str:
    return f"ap:{approval_id}:{_LETTER[decision]}"


def parse_button(data: str) -> tuple[str, Decision] | None:
    """``ap:<id>:<letter>`` → (id, decision); None for any other data."""
    match = _BUTTON.match(data or "")
    if match is None:
        return None
    letter = match.group(2)
    return match.group(1), next(d for d, c in _LETTER.items() if c == letter)


@dataclass(frozen=True, slots=True)
class Pressed:
    """What a press (a button, a frame, ``/approve``) came to, for the one who pressed."""

    ok: bool
    note: str


class ApprovalDesk(Protocol):
    """What a platform may do with approvals: show the ones waiting in a conversation,
    and pass on a press of one of its buttons."""

    async def pending_in(self, session_key: str) -> list[ApprovalRecord]: ...

    async def press(self, approval_id: str, decision: Decision, *, platform: str,
                    user_id: str | None, user_name: str | None = None) -> Pressed: ...
