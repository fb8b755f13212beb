"""One agent turn: the event being answered, its session, and a way to reply; and
the two sides a turn stands between, as Protocols: its host, which sends for it
(the runner), and the agent that answers it."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import structlog

from gateway.store.group_commit import Op
from gateway.words.events import (
    Choice,
    MessageEvent,
    MessageKind,
    NoticeInfo,
    SendResult,
    reply_key,
)
from gateway.words.route import Route
from gateway.words.session_entry import SessionEntry

log = structlog.get_logger(__name__)

if TYPE_CHECKING:
    from gateway.approvals.decisions import Approvals
    from gateway.contract.adapter import LiveReply
    from gateway.delivery.notifications import Notification
    from gateway.inbound.journal import JournalEntry
    from gateway.sessions.store import SessionStore


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
    #: a notification turn whose answer waits to go out joined with the other notices
    #: waiting for its chat (the router's merged message, under a flood limit): each
    #: reply's text is kept here instead of sent, and the router sends and records it
    held: list[str] | None = None

    @property
    def route(self) -> Route:
        """Where replies go: this message's route, with its reply anchor."""
        return self.event.route

    async def reply(self, text: str, *, kind: MessageKind = "reply",
                    choices: Sequence[Choice] = ()) -> SendResult:
        """Send ``text`` in this turn's conversation; ``choices``: buttons under it, each
        the presser sending its command (where the platform has buttons)."""
        if self.held is not None and not choices:  # (buttons are asked for now)
            self.held.append(text)
            result = SendResult.sent(None)  # said: it goes out with the others
            self.sent.append(result)
            return result
        key = reply_key(self.dedupe_key, len(self.sent)) if self.dedupe_key else None
        result = await self.runner.send(self.session, self.route, text, kind=kind,
                                        recorded_with=self.sent_ops, dedupe_key=key,
                                        live=None if choices else self.live,
                                        notice=self.notice if kind == "notification" else None,
                                        choices=choices)
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


class TurnHost(Protocol):
    """What a turn — its replies, the gateway's commands, the agents — uses."""

    store: SessionStore
    agent: Agent
    approvals: Approvals | None

    async def send(self, session: SessionEntry, route: Route, text: str, *,
                   kind: MessageKind = "reply",
                   recorded_with: Callable[[SendResult], Sequence[Op]] | None = None,
                   dedupe_key: str | None = None, live: LiveReply | None = None,
                   notice: NoticeInfo | None = None, choices: Sequence[Choice] = ()
                   ) -> SendResult: ...

    async def send_file(self, session: SessionEntry, route: Route, path: str,
                        caption: str | None = None) -> SendResult: ...

    async def tool_status(self, route: Route, text: str) -> None: ...

    async def rotate_session(self, session: SessionEntry, reason: str, *,
                             route: Route | None = None,
                             seed: Callable[[str], Sequence[Op]] | None = None
                             ) -> SessionEntry: ...

    async def resume_session(self, session: SessionEntry, earlier_id: str
                             ) -> SessionEntry: ...

    async def take_steered(self, session_key: str) -> list[JournalEntry]: ...

    def stop_turn(self, session_key: str) -> bool: ...

    def status_lines(self, turn: Turn) -> list[str]: ...


class Agent(Protocol):
    @property
    def commands(self) -> Mapping[str, str]:
        """Slash commands this agent answers, name → one-line help."""

    async def run_turn(self, turn: Turn) -> None:
        """Answer one message; reply with ``turn.reply``."""

    async def run_notification(self, turn: Turn, notification: Notification) -> None:
        """React to a notification delivered to this session (an internal event)."""

    def posts_as_is(self, notification: Notification) -> bool:
        """Whether delivering ``notification`` only posts its text (no model turn): such
        notices may share one message when the conversation's send budget is short."""

    async def compress(self, turn: Turn) -> None:
        """Continue the conversation in a child session (reason ``compression``) and set
        ``turn.session`` to it; raise CompressionFailed to leave everything as it was."""

    def running_jobs(self, session_key: str) -> Mapping[str, int]:
        """How many background jobs run in the conversation, by the session id that
        started each (``/sessions`` shows them)."""

    def status_lines(self, turn: Turn) -> list[str]:
        """Lines for /status about what this agent has running in the conversation."""
