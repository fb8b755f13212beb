"""What adapters hand to the runner and what sending returns."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, Literal

from gateway.words.route import Route

MessageKind = Literal["reply", "notification", "system"]
#: how the work a notice reports on went: shown differently where a platform can
Outcome = Literal["ok", "failed", "match", "info"]


@dataclass(frozen=True, slots=True)
class NoticeInfo:
    """What a notification-kind message reports: its notification's kind and outcome."""

    kind: str
    outcome: Outcome | None = None

    def to_dict(self) -> dict[str, str | None]:
        return {"kind": self.kind, "outcome": self.outcome}


@dataclass(frozen=True, slots=True)
class Choice:
    """A button under a message: pressed, it is the presser sending ``command`` in the
    message's conversation (authorized and journaled like anything they write)."""

    label: str
    command: str


@dataclass(frozen=True, slots=True)
class MessageEvent:
    """One inbound message, already parsed from its platform's wire format.

    ``internal`` marks events the gateway makes itself (notifications);
    platform adapters can never produce one — the runner's ``submit``
    refuses them.
    """

    text: str
    route: Route
    message_id: str | None = None
    internal: bool = False
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def tab_id(self) -> str | None:
        tab = self.metadata.get("tab")
        return str(tab) if tab is not None else None


def reply_key(dedupe_key: str, index: int) -> str:
    """The dedupe key of a turn's ``index``-th send (from 0), the same when it runs again:
    a message's reply, or a notice's (a notice's own key with index 0, whether it is
    posted as it is or gives its owner a turn)."""
    return f"{dedupe_key}:{index}"


@dataclass(frozen=True, slots=True)
class SendResult:
    """The outcome of one ``send``: the platform message id, or why it failed.

    ``retry_after`` (seconds) is set when the platform asked us to wait;
    ``permanent`` when retrying can never succeed, and ``route_gone`` when that
    is because the place itself is gone (a deleted topic, a locked thread) rather
    than this one message being refused. ``untried`` when nothing reached the
    platform because this instance's life is over: the notice is a survivor's to
    send, and the refusal is not one of its attempts.
    """

    ok: bool
    message_id: str | None = None
    error: str | None = None
    retry_after: float | None = None
    permanent: bool = False
    route_gone: bool = False
    untried: bool = False

    @classmethod
    def sent(cls, message_id: str | None) -> SendResult:
        return cls(ok=True, message_id=message_id)

    @classmethod
    def failed(cls, error: str, *, retry_after: float | None = None,
               permanent: bool = False, route_gone: bool | None = None) -> SendResult:
        """``route_gone`` defaults to ``permanent``: most permanent failures are that."""
        return cls(ok=False, error=error, retry_after=retry_after, permanent=permanent,
                   route_gone=permanent if route_gone is None else route_gone)

    @classmethod
    def withheld(cls, error: str) -> SendResult:
        """Not sent at all: this life may no longer post (see ``untried``)."""
        return cls(ok=False, error=error, untried=True)


#: what became of a message an adapter handed in, once its turn is over
MessageOutcome = Literal["handled", "unauthorized", "duplicate", "skipped", "failed",
                         "shutdown", "refused"]
#: what became of a message when it was taken in: journaled, or why not ("refused": it
#: cannot be stored as it is, and its conversation is told why)
Taken = Literal["journaled", "duplicate", "unauthorized", "failed", "refused"]


@dataclass(frozen=True, slots=True)
class Received:
    """A platform message taken in: ``journaled`` resolves once it is committed (the
    moment to acknowledge it to the platform), ``handled`` once its turn is over."""

    journaled: asyncio.Future[Taken]
    handled: asyncio.Future[MessageOutcome]
