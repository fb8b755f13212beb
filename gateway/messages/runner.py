"""The message pipeline: authorize, resolve the session, set the context, run a turn.

Each session key has a lane: a FIFO of events served by one task, so a
conversation's turns run one at a time and in arrival order, while different
conversations run in parallel. A lane exists only while it has work, so idle
conversations cost nothing.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import structlog

from gateway.cluster.lives import ALONE, Acting, Life, life_prefix
from gateway.config.settings import Config
from gateway.contract.fenced import FencedAdapter
from gateway.delivery.affinity import wait_until_not_delivered_elsewhere
from gateway.delivery.notifications import Notification
from gateway.delivery.outbox import Outbox
from gateway.inbound.checks import message_problem
from gateway.inbound.cursors import Cursors
from gateway.inbound.files import transcript_text
from gateway.inbound.intake import Intake
from gateway.inbound.journal import Inbound, JournalEntry, handling
from gateway.messages.auth import admitted, offer_pairing
from gateway.messages.command_line import parse_command
from gateway.messages.commands import run_gateway_command
from gateway.messages.incoming_files import take_files
from gateway.messages.lanes import Lane, Lanes, Work
from gateway.messages.outgoing_files import post_artifact, send_file
from gateway.messages.pairing import Pairing
from gateway.messages.replay import Replay
from gateway.messages.signs_of_life import live_reply, signs_of_life
from gateway.messages.turn import Turn
from gateway.sessions.store import SessionStore
from gateway.store.group_commit import Op
from gateway.telemetry.metrics import Metrics
from gateway.tracing import tracing
from gateway.words.context import SessionContext, session_context
from gateway.words.events import (
    Choice,
    MessageEvent,
    MessageKind,
    MessageOutcome,
    NoticeInfo,
    Received,
    SendResult,
    Taken,
)
from gateway.words.route import Route
from gateway.words.session_entry import SessionEntry
from gateway.words.session_key import build_session_key

if TYPE_CHECKING:
    from gateway.approvals.decisions import Approvals
    from gateway.contract.adapter import Adapter, LiveReply
    from gateway.messages.turn import Agent

log = structlog.get_logger(__name__)

#: answered at once, even while a turn or a foreground command runs in the conversation
IMMEDIATE_COMMANDS = frozenset({"stop", "status", "help", "jobs", "approve", "deny"})

#: a chat told "could not be recorded" is not told again for this long
APOLOGY_SECONDS = 60.0



@dataclass(frozen=True, slots=True)
class _Refused:
    """A message the journal cannot store (gateway/inbound/checks.py): ``reason`` is
    said to its conversation."""

    reason: str


#: a message being journaled: its entry, what else became of it, or why it is refused
_Taking = asyncio.Future[JournalEntry | Taken | _Refused]


class GatewayRunner:
    def __init__(self, config: Config, store: SessionStore, agent: Agent,
                 pairing: Pairing | None = None, *,
                 jobs_running: Callable[[], int] = lambda: 0, life: Life = ALONE,
                 approvals: Callable[[GatewayRunner], Approvals] | None = None,
                 agent_for: Callable[[GatewayRunner], Agent] | None = None) -> None:
        """``approvals`` and ``agent_for`` make the parts that need the runner itself,
        once it exists: the approvals (they post through its adapters) and the agent
        that answers in place of ``agent`` (the model agent, whose tools post through
        the runner and wait on its approvals)."""
        self.config = config
        self.store = store
        self.agent = agent
        self.pairing = pairing
        self.inbound = Inbound(store.db, life=life)
        #: the cursors a platform's client holds, saved after the journal
        self.cursors = Cursors(store.db)
        self._apologised: dict[tuple[str, str], float] = {}
        #: agent.busy: steer — messages waiting to be given to the turn under way
        self._steering: dict[str, list[_Taking]] = {}
        self._steered: set[int] = set()  # journal ids a running turn took
        #: what a stopped process had taken in and not answered, handled at start
        self.replay = Replay(self)
        self.intake = Intake(config.inbound, self._tell_in_lane, self._skipped)
        self.metrics = Metrics()
        #: how many background jobs run (for /metrics)
        self.jobs_running = jobs_running
        self.adapters: dict[str, FencedAdapter] = {}
        self.lanes = Lanes()
        self._accepting = True
        #: called with the ended session when a session ends for good (not
        #: when it is compressed, which continues it)
        self.session_end_listeners: list[Callable[[SessionEntry], Awaitable[object]]] = []
        #: called with a session made live again by ``/resume`` (the router looks for
        #: its notices offered again)
        self.session_resumed_listeners: list[Callable[[SessionEntry], None]] = []
        #: called with a platform's name when it (re)connects
        self.platform_listeners: list[Callable[[str], None]] = []
        #: on a shared store, whether this instance's life may still act (gateway/cluster/lives.py)
        self.acting: Acting = life.acting
        #: pending approvals of the model's actions
        self.approvals: Approvals | None = approvals(self) if approvals is not None else None
        if agent_for is not None:
            self.agent = agent_for(self)

    # wiring ------------------------------------------------------------------

    def add_adapter(self, adapter: Adapter) -> None:
        # every send to it is fenced there, and only there (gateway/contract/fenced.py)
        self.adapters[adapter.platform] = FencedAdapter(adapter, self.acting)

    def session_key_for(self, route: Route) -> str:
        opts = self.config.sessions
        return build_session_key(
            route,
            group_sessions_per_user=opts.group_sessions_per_user,
            thread_sessions_per_user=opts.thread_sessions_per_user,
        )

    # intake ------------------------------------------------------------------

    def submit(self, event: MessageEvent, *, platform_id: str | None = None,
               sent_at: float | None = None) -> asyncio.Future[MessageOutcome]:
        """Take in a platform message; the future says what became of its turn."""
        return self.receive(event, platform_id=platform_id, sent_at=sent_at).handled

    def receive(self, event: MessageEvent, *, platform_id: str | None = None,
                sent_at: float | None = None) -> Received:
        """Take in a platform message: authorize and journal it at once (an adapter
        acknowledges it to its platform once ``journaled`` resolves), and queue its
        handling behind the conversation's earlier messages.

        ``platform_id`` is the platform's own id for it: a message seen twice is
        handled once. An event claiming to be internal is refused, so no platform
        update can pose as a gateway notification. Once the gateway is stopping, a
        message is still journaled (and so acknowledged), and its turn is left for
        the next life: the replay at its start, or (handed over) a survivor's.
        """
        if event.internal:
            raise ValueError("platform events cannot be internal")
        key = self.session_key_for(event.route)
        self.metrics.messages_in.labels(event.route.platform).inc()
        taking = asyncio.ensure_future(self._journal(key, event, platform_id, sent_at))
        journaled: asyncio.Future[Taken] = asyncio.get_running_loop().create_future()
        taking.add_done_callback(lambda t: _settle_taken(t, journaled))
        if not self._accepting:  # in its lane, to be handed over after the turn under way
            return Received(journaled, self.run_in_lane(
                key, lambda: self._from_journal(key, event, taking)))
        command = parse_command(event.text)
        if command is not None and command[0] in IMMEDIATE_COMMANDS:
            # answered at once, beside a turn or a foreground command under way
            handled: asyncio.Future[MessageOutcome] = asyncio.ensure_future(
                self._from_journal(key, event, taking))
            return Received(journaled, handled)
        if self.is_busy(key):
            mode = self.config.agent.busy
            if mode == "interrupt":
                self.stop_turn(key)  # this message is answered next, with both in context
            elif mode == "steer":
                self._steering.setdefault(key, []).append(taking)
        handled = self.run_in_lane(key, lambda: self._from_journal(key, event, taking))
        return Received(journaled, handled)

    async def take_steered(self, session_key: str) -> list[JournalEntry]:
        """For a turn under way (``agent.busy: steer``): the messages that arrived
        meanwhile, given to it before its next model call; each is then answered by
        this turn, not on its own. (Stored with its entry's id: replayed after a crash,
        it is not written again.)"""
        taken: list[JournalEntry] = []
        for taking in self._steering.pop(session_key, []):
            try:
                entry = await taking
            except Exception:
                continue  # not journaled: its own lane work says so
            if isinstance(entry, JournalEntry) and entry.id not in self._steered:
                self._steered.add(entry.id)
                taken.append(entry)
        return taken

    async def _journal(self, key: str, event: MessageEvent, platform_id: str | None,
                       sent_at: float | None) -> JournalEntry | Taken | _Refused:
        adapter = self.adapters.get(event.route.platform)
        if not await admitted(event, self.config, adapter, self.pairing):
            log.info("message_unauthorized", platform=event.route.platform,
                     chat_id=event.route.chat_id, user_id=event.route.user_id)
            await offer_pairing(event, adapter, self.pairing, self.acting)
            return "unauthorized"
        if (problem := message_problem(event)) is not None:
            log.info("message_refused", platform=event.route.platform,
                     chat_id=event.route.chat_id, reason=problem)
            return _Refused(problem)
        entry = await self.inbound.record(event, key, platform_id=platform_id, sent_at=sent_at)
        if entry is None:
            log.info("message_seen_before", platform=event.route.platform,
                     platform_id=platform_id)
            return "duplicate"
        return entry

    async def _from_journal(self, key: str, event: MessageEvent,
                            taking: _Taking) -> MessageOutcome:
        try:
            taken = await taking
        except Exception:
            # not journaled, so not acknowledged: the platform or the page sends it again
            log.exception("message_not_journaled", platform=event.route.platform)
            await self._apologise_without_session(event)
            return "failed"
        if isinstance(taken, _Refused):
            await self._say_refused(event, taken.reason)
            return "refused"
        if isinstance(taken, str):
            return "duplicate" if taken == "duplicate" else "unauthorized"
        if taken.id in self._steered:  # given to the turn that was under way
            self._steered.discard(taken.id)
            self.inbound.finished(taken.id)
            return "handled"
        waiting = self._steering.get(key)
        if waiting and taking in waiting:  # its own turn now: no other turn takes it
            waiting.remove(taking)
        return await self.handle_entry(key, taken)

    async def handle_entry(self, key: str, entry: JournalEntry, *,
                            replayed: bool = False) -> MessageOutcome:
        """A journaled message's turn: not run when too old, noted when late, not begun
        once stopping (it stays journaled, for the next life)."""
        if not self._accepting:
            log.info("message_left_for_next_life", entry_id=entry.id, session_key=key)
            await self.inbound.hand_over([entry.id])  # (on a shared store: to a survivor)
            return "shutdown"
        if not await self.acting():  # this life is over: a survivor takes the entry
            log.warning("message_left_to_survivor", entry_id=entry.id, session_key=key)
            return "shutdown"
        if self.intake.too_old(entry, replayed=replayed):
            self.intake.skip(entry)  # recorded as skipped once its note went out
            return "skipped"
        if not await self.inbound.started(entry.id, replayed=replayed):
            return "duplicate"  # queued live and replayed both: the other one has it
        if self.inbound.handler is not None:  # a shared store: one instance at a time
            await wait_until_not_delivered_elsewhere(self.store.db, key,
                                                     life_prefix(self.inbound.handler))
        try:
            return await self._handle(
                key, entry.event, note=self.intake.late_note(entry, replayed=replayed),
                journal_id=entry.id, dedupe_key=entry.dedupe_key,
                replayed=replayed)
        finally:
            self.inbound.finished(entry.id)

    def _skipped(self, entries: list[JournalEntry]) -> None:
        for entry in entries:
            self.inbound.finished(entry.id, "skipped")

    async def _tell_in_lane(self, entry: JournalEntry, text: str) -> None:
        result = await self.run_in_lane(entry.session_key, lambda: self.tell(entry, text))
        if not isinstance(result, SendResult) or not result.ok:
            raise RuntimeError(f"the note was not sent: {getattr(result, 'error', result)}")

    async def tell(self, entry: JournalEntry, text: str) -> SendResult:
        """A system line in the entry's conversation, in its transcript too."""
        session = await self.store.get_or_create(entry.session_key, entry.event.route)
        return await self.send(session, entry.event.route, text, kind="system")

    def run_in_lane(self, session_key: str, work: Work) -> asyncio.Future[Any]:
        """Run ``work`` after everything already queued for this conversation (a
        notification for a session mid-turn waits here and runs right after it)."""
        return self.lanes.run(session_key, work)

    @property
    def _lanes(self) -> dict[str, Lane]:
        return self.lanes.by_key

    async def _handle(self, key: str, event: MessageEvent, *, note: str | None = None,
                      journal_id: int | None = None, dedupe_key: str | None = None,
                      replayed: bool = False) -> MessageOutcome:
        """An authorized, journaled message's turn (``note``: said before it).

        ``dedupe_key`` names its replies the same way when a crash makes it run again,
        so a platform that deduplicates (Discord's nonce) posts each once."""
        with structlog.contextvars.bound_contextvars(session_key=key):
            try:
                session = await self.store.get_or_create(key, event.route)
                session = self.store.touch(session, event.route)
                self.store.record_message(session.id, "user", transcript_text(event),
                                          inbound_id=journal_id)
            except Exception:
                # the store failed: say so, and keep the conversation's lane alive
                log.exception("message_not_recorded", platform=event.route.platform)
                await self._apologise_without_session(event)
                return "failed"
            turn = Turn(event=event, session=session, runner=self,
                        sent_ops=_replied(journal_id) if journal_id is not None else None,
                        dedupe_key=dedupe_key, may_stream=not replayed,
                        journal_id=journal_id)
            self.metrics.turns.labels("message").inc()
            if note is not None:  # not a reply: the message is not answered by it
                await self.send(session, event.route, note, kind="system",
                                dedupe_key=f"{dedupe_key}:note" if dedupe_key else None)
            ctx = SessionContext(route=event.route, session_key=key, session_id=session.id,
                                 tab_id=event.tab_id)
            with session_context(ctx), handling(journal_id), \
                    structlog.contextvars.bound_contextvars(session_id=session.id), \
                    tracing.span("message", inbound_id=journal_id, session_key=key,
                                 session_id=session.id, platform=event.route.platform,
                                 chat_id=event.route.chat_id, thread_id=event.route.thread_id,
                                 text=tracing.text(event.text)):
                try:
                    await self._run_turn(turn)
                except Exception:
                    log.exception("turn_failed")
                    await self._apologise(turn)
                    return "failed"
        return "handled"

    async def notification_turn(
            self, session: SessionEntry, route: Route, notification: Notification,
            sent_ops: Callable[[SendResult], Sequence[Op]] | None = None, *,
            hold_replies: bool = False) -> Turn:
        """Give ``session`` a turn for a notification: an internal event, never user text.

        Call it from the session's lane (see :meth:`run_in_lane`). ``hold_replies``: the
        turn's replies are kept in ``turn.held``, not sent — its chat cannot take them
        now, and the router sends them joined with what else waits there.
        """
        event = MessageEvent(
            text=notification.text, route=route, message_id=route.message_id, internal=True,
            metadata={"notification_id": notification.id, "kind": notification.kind,
                      "job_id": notification.job_id})
        turn = Turn(event=event, session=session, runner=self, sent_ops=sent_ops,
                    dedupe_key=notification.idempotency_key, notice=notification.info,
                    held=[] if hold_replies else None)
        self.metrics.turns.labels("notification").inc()
        ctx = SessionContext(route=route, session_key=session.session_key,
                             session_id=session.id, tab_id=notification.tab_id)
        with session_context(ctx), structlog.contextvars.bound_contextvars(
            session_key=session.session_key, session_id=session.id,
            notification_id=notification.id, job_id=notification.job_id,
        ):
            await self.agent.run_notification(turn, notification)
            if notification.file_path:
                await post_artifact(self, turn, notification.file_path)
        return turn

    async def _run_turn(self, turn: Turn) -> None:
        command = parse_command(turn.event.text)
        if command is not None and await run_gateway_command(turn, *command):
            return
        adapter = self.adapters.get(turn.route.platform)
        async with signs_of_life(adapter, turn.route):
            if not await take_files(turn, adapter, self.config):
                return
            async with live_reply(adapter, turn):
                await self.agent.run_turn(turn)

    async def tool_status(self, route: Route, text: str) -> None:
        """Tell the conversation what the turn is doing (where its platform shows it)."""
        adapter = self.adapters.get(route.platform)
        if adapter is not None:
            try:
                await adapter.status(route, text)
            except Exception as exc:
                log.debug("status_failed", platform=route.platform, error=str(exc))

    async def _apologise(self, turn: Turn) -> None:
        try:
            await turn.reply("Sorry, that message could not be handled; the error is in "
                             "the gateway log.", kind="system")
        except Exception:
            log.exception("apology_failed")

    async def _say_refused(self, event: MessageEvent, reason: str) -> None:
        """Why a message was not taken, to its chat (in its lane, in order); nothing of
        it is stored, so the transcript has neither."""
        adapter = self.adapters.get(event.route.platform)
        if adapter is None:
            return
        result = await adapter.send(event.route, reason, kind="system")
        if not result.ok:
            log.warning("refusal_not_sent", platform=event.route.platform,
                        chat_id=event.route.chat_id, error=result.error)

    async def _apologise_without_session(self, event: MessageEvent) -> None:
        adapter = self.adapters.get(event.route.platform)
        if adapter is None:
            return
        # once a minute per chat: while the store is broken a platform that redelivers
        # (Telegram's offset does not move) would otherwise get one apology a second
        chat = (event.route.platform, event.route.chat_id)
        now = time.monotonic()
        if now - self._apologised.get(chat, -APOLOGY_SECONDS) < APOLOGY_SECONDS:
            return
        self._apologised[chat] = now
        try:
            await adapter.send(event.route, "Sorry, that message could not be recorded; "
                               "the error is in the gateway log.", kind="system")
        except Exception:
            log.exception("apology_failed")

    async def resume_session(self, session: SessionEntry, earlier_id: str) -> SessionEntry:
        """Make an earlier session of ``session``'s conversation its live one again (see
        :meth:`SessionStore.resume`). ``session`` ends with reason ``resume`` and its work
        reports as an ended session's does (its delegations are interrupted, as at
        ``/new``); the resumed session's own notices parked while it had ended are
        offered again, in the same write, and the router is told."""
        ended, resumed = await self.store.resume(session.id, earlier_id,
                                                 with_ops=Outbox.offer_again_ops)
        for listener in self.session_end_listeners:
            await listener(ended)
        for resumed_listener in self.session_resumed_listeners:
            resumed_listener(resumed)
        return resumed

    async def rotate_session(self, session: SessionEntry, reason: str, *,
                             route: Route | None = None,
                             seed: Callable[[str], Sequence[Op]] | None = None
                             ) -> SessionEntry:
        """End ``session`` and start its successor under the same key.

        ``compression`` continues the conversation (the successor records the
        lineage); any other reason ends it, and whatever it had running is
        told (delegations are interrupted). ``seed``: see :meth:`SessionStore.rotate`.
        """
        lineage = reason == "compression"
        successor = await self.store.rotate(session.id, reason, lineage=lineage, route=route,
                                            seed=seed)
        if not lineage:
            for listener in self.session_end_listeners:
                await listener(session)
        return successor

    # output ------------------------------------------------------------------

    async def send(self, session: SessionEntry, route: Route, text: str, *,
                   kind: MessageKind = "reply",
                   recorded_with: Callable[[SendResult], Sequence[Op]] | None = None,
                   dedupe_key: str | None = None, live: LiveReply | None = None,
                   notice: NoticeInfo | None = None, choices: Sequence[Choice] = ()
                   ) -> SendResult:
        """Send ``text`` to ``route`` and record it in the session's transcript.

        Recorded once it went out, in one write with ``recorded_with(result)`` (a
        notification's sent id): a crash leaves the transcript and the outbox
        agreeing on whether the notice was said — never a second copy in the
        transcript when the outbox sends it again. A send with such a record returns
        once it is committed, so the sender's next send starts after it. ``live``: the
        turn's reply being written, which the text finishes.
        """
        result = await self.post(route, text, kind=kind, session_id=session.id,
                                 dedupe_key=dedupe_key, live=live, notice=notice,
                                 choices=choices)
        if not result.ok:
            return result
        if recorded_with is None:
            self.store.record_message(session.id, kind, text, notice=notice)
            return result
        try:
            await self.store.record_sent(session.id, kind, text, with_ops=recorded_with(result),
                                         notice=notice)
        except Exception:  # whatever the store raised: it went out, and is not sent again
            # now. Unrecorded, its row stays claimed; the next start settles it as after a
            # crash
            log.exception("send_not_recorded", session_id=session.id, platform=route.platform,
                          message_id=result.message_id)
        return result

    async def send_file(self, session: SessionEntry, route: Route, path: str,
                        caption: str | None = None) -> SendResult:
        """Post the file at ``path`` to ``route`` (see :func:`outgoing_files.send_file`)."""
        return await send_file(self, session, route, path, caption)

    async def post(self, route: Route, text: str, *, kind: MessageKind = "reply",
                   session_id: str | None = None, dedupe_key: str | None = None,
                   live: LiveReply | None = None, notice: NoticeInfo | None = None,
                   choices: Sequence[Choice] = ()) -> SendResult:
        """Send ``text`` to ``route`` without recording it in any transcript; with
        ``choices``, their buttons under it (where the platform has buttons)."""
        adapter = self.adapters.get(route.platform)
        if adapter is None:
            log.error("send_no_adapter", platform=route.platform, session_id=session_id)
            return SendResult.failed(f"platform {route.platform!r} is not running")
        if choices:
            result = await adapter.send_choices(route, text, choices, kind=kind,
                                                session_id=session_id)
        elif live is not None:
            result = await live.finish(text, kind=kind, session_id=session_id,
                                       dedupe_key=dedupe_key)
        else:
            result = await adapter.send(route, text, kind=kind, session_id=session_id,
                                        dedupe_key=dedupe_key, notice=notice)
        if result.ok:
            self.metrics.sent_to(route.platform).inc()
        else:
            log.warning("send_failed", platform=route.platform, chat_id=route.chat_id,
                        thread_id=route.thread_id, error=result.error)
        return result

    # introspection and shutdown ----------------------------------------------

    def platform_connected(self, platform: str) -> None:
        """An adapter is (back) online: whatever waited for it may go now."""
        for listener in self.platform_listeners:
            listener(platform)

    def open_tabs(self, platform: str, chat_id: str) -> set[str]:
        """Tabs open on a conversation, for platforms that have tabs (the web chat)."""
        adapter = self.adapters.get(platform)
        return adapter.open_tabs(chat_id) if adapter is not None else set()

    def status_lines(self, turn: Turn) -> list[str]:
        waiting = self.lanes.waiting(turn.session.session_key)
        busy = len(list(self.lanes.busy_keys))
        return [
            f"messages waiting in this conversation: {waiting}",
            f"conversations mid-turn: {busy}",
            *self.agent.status_lines(turn),
        ]

    @property
    def busy_session_keys(self) -> Iterable[str]:
        return self.lanes.busy_keys

    def lane_route(self, session_key: str) -> Route | None:
        """Where a conversation lives, from the live-session cache (no I/O)."""
        entry = self.store.cached_live(session_key)
        return entry.route if entry is not None else None

    def stop_turn(self, session_key: str) -> bool:
        """End the turn under way in this conversation — its model call, its foreground
        command — keeping what it recorded; the conversation's next work goes on."""
        return self.lanes.stop(session_key)

    def is_busy(self, session_key: str) -> bool:
        return self.lanes.is_busy(session_key)

    async def conversation_idle(self, session_key: str) -> None:
        """Until the conversation has nothing running or queued (at once when it has not)."""
        await self.lanes.idle(session_key)

    @property
    def accepting(self) -> bool:
        """False once the gateway is shutting down."""
        return self._accepting

    def stop_accepting(self) -> None:
        """Begin no message's turn from now on: what arrives, or waits in a lane, is
        journaled and left for the next life. Turns under way, and notices already in
        a lane, go on."""
        self._accepting = False

    async def hand_over_left(self) -> int:
        """Once stopping, on a shared store: the messages journaled here whose turns will
        not begin go to the other instances now — except a conversation's with a turn
        under way here, each handed over when its lane reaches it, after that turn."""
        return await self.inbound.hand_over(keep=set(self.lanes.busy_keys))

    async def drain(self, timeout: float) -> bool:
        """Stop accepting and let the work in the lanes finish; True when all did."""
        self._accepting = False
        return await self.lanes.drain(timeout)


def _settle_taken(task: _Taking, journaled: asyncio.Future[Taken]) -> None:
    if journaled.done():
        return
    if task.cancelled() or task.exception() is not None:
        journaled.set_result("failed")  # the lane's work logs the error and says so
    else:
        result = task.result()
        journaled.set_result(result if isinstance(result, str) else
                             "refused" if isinstance(result, _Refused) else "journaled")


def _replied(journal_id: int) -> Callable[[SendResult], Sequence[Op]]:
    def ops(result: SendResult) -> Sequence[Op]:
        return [Inbound.replied_op(journal_id)]
    return ops
