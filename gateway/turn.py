"""One agent turn: the event being answered, its session, and a way to reply."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import structlog

from .database import Op
from .events import MessageEvent, MessageKind, NoticeInfo, SendResult
from .route import Route
from .session_entry import SessionEntry

log = structlog.get_logger(__name__)

if TYPE_CHECKING:
    from .host import TurnHost
    from .platforms.base import LiveReply


@dataclass(slots=True)
class Turn:
    event: MessageEvent
    session: SessionEntry
    runner: TurnHost
    #: what each reply of this turn came to, in order
    sent: list[SendResult] = field(default_factory=list)
    #: writes that record a send that went out (a notification's sent id), committed
    #: with the send's transcript line
    sent_ops: Callable[[SendResult], Sequence[Op]] | None = None
    #: a notification turn's idempotency key: each send of the turn gets its own key
    #: from it, the same when the turn runs again after a crash
    dedupe_key: str | None = None
    #: the reply shown as it is written, where the platform can (a message's turn)
    live: LiveReply | None = None
    #: a notification turn's notice: what its notification-kind replies report
    notice: NoticeInfo | None = None
    #: False for a message replayed after a crash: its replies go whole, each with its
    #: dedupe key (a preview would be a second copy of what the crashed run posted)
    may_stream: bool = True
    #: the journal entry of the message this turn answers (None for a notification's):
    #: what the turn records of that message is tied to it, so a replay records it once
    journal_id: int | None = None

    @property
    def route(self) -> Route:
        """Where replies go: this message's route, with its reply anchor."""
        return self.event.route

    async def reply(self, text: str, *, kind: MessageKind = "reply") -> SendResult:
        key = f"{self.dedupe_key}:{len(self.sent)}" if self.dedupe_key else None
        result = await self.runner.send(self.session, self.route, text, kind=kind,
                                        recorded_with=self.sent_ops, dedupe_key=key,
                                        live=self.live,
                                        notice=self.notice if kind == "notification" else None)
        self.sent.append(result)
        return result

    async def send_file(self, path: str, caption: str | None = None) -> SendResult:
        """Post a file into this turn's conversation (FileRefused when it may not be)."""
        result = await self.runner.send_file(self.session, self.route, path, caption)
        self.sent.append(result)
        return result

    async def show(self, text: str) -> None:
        """The next reply so far, while the model writes it (best effort)."""
        if self.live is not None:
            try:
                await self.live.show(text)
            except Exception as exc:  # the final message is what counts
                log.info("live_show_failed", platform=self.route.platform, error=str(exc))

    async def status(self, text: str) -> None:
        """What the turn is doing: in the live reply, else where the platform shows it."""
        if self.live is None:
            await self.runner.tool_status(self.route, text)
            return
        try:
            await self.live.status(text)
        except Exception as exc:
            log.info("live_status_failed", platform=self.route.platform, error=str(exc))
