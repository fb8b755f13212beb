"""The router: takes pending notifications from the outbox to their owners.

Woken the moment a notification is committed (and on a slow timer, for rows
another process added or that wait for a retry). For each claimed row it asks
the ownership rule where the row belongs, then puts the delivery into the
owner's lane — so a busy owner keeps its mail in order — and finally records
the outcome: delivered, retried later, or parked with a reason.

A conversation's notices go out in the order they were made. One that waits for
a retry holds the ones behind it: the claim leaves later rows of its conversation
in the outbox (gateway/delivery/outbox.py), and the ones already queued behind it in the
lane are given back untried (:class:`_Hold`), so its retry goes first.

When the platform says a conversation cannot take its waiting notices one by one now
(a flood limit), they go out together, in one message (gateway/delivery/merged_notices.py):
those posted as they are, and the model's answers to those that give it a turn — each
turn run in order in the lane, its replies held back to join the message.

A claimed batch is delivered as a batch. Notices posted as they are (no model turn, no
file) whose conversation's lane is idle are posted inline: the router holds those
lanes (gateway/messages/lanes.py) and one task for the whole batch posts each
conversation's notices in order, a few conversations at a time so one slow chat does
not stall the others — no task or future a notice. Their transcript lines and send
records are gathered into the next group commit (one ``executemany`` a statement), and
their outcomes are written together as every outcome is. Anything else — a model's
turn, a file, a conversation with work in its lane — goes through the lane as before.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol

import structlog

from gateway.cluster.lives import claimer_name
from gateway.config.registry import dedupes_sends
from gateway.delivery.merged_notices import (
    Delivery,
    Member,
    Outgoing,
    Sendable,
    in_messages,
    merged_info,
    merged_text,
    notice_text,
    owner_of,
)
from gateway.delivery.notifications import Notification
from gateway.delivery.outbox import DeliveryOutcome as _Outcome
from gateway.delivery.outbox import Outbox, attempt_outcome, delivered_op
from gateway.delivery.ownership import Decision, DeliverNotice, DeliverTurn, Park, find_owners
from gateway.retry import RetryPolicy
from gateway.sessions.store import TRANSCRIPT_LINE, SessionStore, transcript_row
from gateway.store.group_commit import Op
from gateway.store.migrations import OUTBOX_CHANNEL
from gateway.tracing import tracing
from gateway.words.events import MessageKind, NoticeInfo, SendResult, reply_key
from gateway.words.route import Route
from gateway.words.session_key import SessionKeyError, parse_session_key, platform_prefix

if TYPE_CHECKING:
    from gateway.contract.adapter import Adapter, LiveReply
    from gateway.words.session_entry import SessionEntry

log = structlog.get_logger(__name__)


class _Lanes(Protocol):
    """What the router reads of the conversations' lanes: what each holds."""

    @property
    def by_key(self) -> Mapping[str, object]: ...

    def waiting(self, session_key: str) -> int: ...

    def is_busy(self, session_key: str) -> bool: ...

    def queued_last(self, session_key: str, done: asyncio.Future[Any]) -> bool: ...

    def queued(self, session_key: str) -> list[asyncio.Future[Any]]: ...

    def withdraw(self, session_key: str, done: asyncio.Future[Any]) -> bool: ...

    def hold(self, session_key: str) -> bool: ...

    def held_by(self, session_key: str, holder: asyncio.Task[Any]) -> None: ...

    def release(self, session_key: str) -> None: ...


class _PostsAsIs(Protocol):
    def posts_as_is(self, notification: Notification) -> bool: ...


class _Timings(Protocol):
    @property
    def delivery_latency(self) -> Any: ...

    @property
    def turns(self) -> Any: ...


class _TurnSent(Protocol):
    @property
    def sent(self) -> Sequence[SendResult]: ...

    @property
    def held(self) -> Sequence[str] | None: ...


class RouterHost(Protocol):
    """What the router asks of the message path (the runner): the adapters and the
    conversations' lanes, a notification's turn in its lane, and a send."""

    platform_listeners: list[Callable[[str], None]]

    @property
    def adapters(self) -> Mapping[str, Adapter]: ...

    @property
    def agent(self) -> _PostsAsIs: ...

    @property
    def lanes(self) -> _Lanes: ...

    @property
    def metrics(self) -> _Timings: ...

    def open_tabs(self, platform: str, chat_id: str) -> set[str]: ...

    def run_in_lane(self, session_key: str,
                    work: Callable[[], Awaitable[Any]]) -> asyncio.Future[Any]: ...

    async def notification_turn(
            self, session: SessionEntry, route: Route, notification: Notification,
            sent_ops: Callable[[SendResult], Sequence[Op]] | None = None, *,
            hold_replies: bool = False) -> _TurnSent: ...

    async def send(self, session: SessionEntry, route: Route, text: str, *,
                   kind: MessageKind = "reply",
                   recorded_with: Callable[[SendResult], Sequence[Op]] | None = None,
                   dedupe_key: str | None = None, live: LiveReply | None = None,
                   notice: NoticeInfo | None = None) -> SendResult: ...

    async def post(self, route: Route, text: str, *, kind: MessageKind = "reply",
                   session_id: str | None = None, dedupe_key: str | None = None,
                   live: LiveReply | None = None, notice: NoticeInfo | None = None
                   ) -> SendResult: ...

CLAIM_BATCH = 500
#: conversations of one batch posted at once: sends to different chats overlap while
#: each conversation's own notices go in order
INLINE_CONVERSATIONS = 64
#: how long an idle router waits for a wake-up before it looks anyway (rows another
#: process added). Read at every wait, so tests can set it to an hour: a notice that
#: is delivered at all then was woken for, not found by the poll (invariant 8)
IDLE_POLL_SECONDS = 5.0
DISCONNECTED_RETRY_SECONDS = 5.0
MAX_TURN_FAILURES = 5
#: a notice whose delivery failed waits this long before the next try (its attempts count)
REDELIVERY = RetryPolicy((1.0, 2.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0))
#: a notice this life was no longer allowed to send is due again this soon, for a
#: survivor; no attempt counted (before, each withheld send backed off further, and a
#: survivor could wait 300 s for a notice nobody had tried)
WITHHELD_RETRY_SECONDS = 1.0


@dataclass(slots=True)
class _Hold:
    """A conversation's notice that failed and goes back for a retry: the notices queued
    behind it in the lane go back too, untried, rather than overtake it."""

    notification_id: int
    #: the claims begun before its retry was written number up to this (None: not
    #: written yet). A claim begun later saw the retry in the outbox, which keeps back
    #: every later row of the conversation: a later row such a claim took means the
    #: notice no longer waits (delivered, taken by a tool, parked, or due again)
    written_by_claim: int | None = None


class Router:
    def __init__(self, outbox: Outbox, store: SessionStore, runner: RouterHost,
                 *, name: str | None = None) -> None:
        self.outbox = outbox
        self.store = store
        self.runner = runner
        self.name = name or claimer_name()
        self._wake = asyncio.Event()
        self._loop_task: asyncio.Task[None] | None = None
        #: claimed notifications whose outcome is not recorded yet
        self._open = 0
        #: outcomes waiting for the next write, and the one task that writes them
        self._outcomes: list[tuple[Notification, _Outcome]] = []
        self._recorder: asyncio.Task[None] | None = None
        self._recorded = asyncio.Event()
        #: "a platform is back" wake-ups under way (kept: a task nobody holds can vanish)
        self._releases: set[asyncio.Task[None]] = set()
        #: claims begun so far, and by conversation the notice that waits for a retry
        self._claims = 0
        self._holds: dict[str, _Hold] = {}
        #: by conversation, the delivery still open for notices to join
        self._gathering: dict[str, Delivery] = {}
        #: deliveries queued in their lanes and not started, by their lane's future
        self._queued: dict[asyncio.Future[Any], Delivery] = {}
        #: batches being posted inline (see the module's story), one task each
        self._inline: set[asyncio.Task[None]] = set()
        #: inline posts by the commit that records them, told once it is through
        self._committing: dict[asyncio.Future[object], list[tuple[Notification, _Outcome]]] = {}
        #: a notice posted inline counts as the owner's turn for it, as in the lane
        self._notice_turns = runner.metrics.turns.labels("notification")
        self._stopping = False
        #: the loop waits for a wake-up; with no delivery under way, the router is idle
        self._waiting = False
        self._idle = asyncio.Event()

    # lifecycle -------------------------------------------------------------

    async def start(self) -> None:
        self.outbox.subscribe(self.wake)
        # notices committed by other processes or instances (PostgreSQL's NOTIFY)
        self.outbox.db.listen(OUTBOX_CHANNEL, lambda _payload: self.wake())
        self.runner.platform_listeners.append(self._platform_back)
        self._loop_task = asyncio.create_task(self._run(), name=self.name)

    async def stop(self) -> None:
        """Claim nothing more; deliveries under way finish (see :meth:`settle`).

        The loop is asked to stop rather than cancelled: a cancel landing
        mid-claim would leave the claimed rows with nobody to deliver them.
        """
        self._stopping = True
        self.outbox.unsubscribe(self.wake)
        if self._platform_back in self.runner.platform_listeners:
            self.runner.platform_listeners.remove(self._platform_back)
        self.wake()
        if self._loop_task is not None:
            await asyncio.gather(self._loop_task, return_exceptions=True)
            self._loop_task = None
        await asyncio.gather(*self._releases, return_exceptions=True)

    def wake(self) -> None:
        self._idle.clear()
        self._wake.set()

    def _platform_back(self, platform: str) -> None:
        """Notices held back while a platform was down are due again at once."""
        task = asyncio.get_running_loop().create_task(self._release_waiting(platform))
        self._releases.add(task)
        task.add_done_callback(self._releases.discard)

    async def _release_waiting(self, platform: str) -> None:
        await self.outbox.make_due(platform_prefix(platform))
        self.wake()

    async def settle(self) -> None:
        """Wait until every claimed notification has an outcome (tests, shutdown)."""
        while self._open:
            self._recorded.clear()
            await self._recorded.wait()

    @property
    def unsettled(self) -> int:
        """Claimed notifications whose outcome is not recorded yet."""
        return self._open

    @property
    def idle(self) -> bool:
        """Nothing to do until woken: the loop waits, no wake-up is pending, and every
        notification it claimed has an outcome (one released for a retry later counts
        as settled until the retry is due)."""
        return self._waiting and not self._wake.is_set() and not self._open

    async def wait_idle(self) -> None:
        """Wait until a running router is :attr:`idle`.

        "Delivered exactly once" can be counted only then: whatever a restart put
        back to pending, or a claim still had in hand, has been sent by that time —
        waiting a while instead would only hope so.
        """
        while not self.idle:
            self._idle.clear()
            await self._idle.wait()

    def _note_idle(self) -> None:
        if self.idle:
            self._idle.set()

    # the loop --------------------------------------------------------------

    async def _run(self) -> None:
        while not self._stopping:
            self._wake.clear()
            try:
                self._claims += 1
                claim = self._claims
                batch = await self.outbox.claim(self.name, CLAIM_BATCH)
                await self._forget_gone_holds(claim)
                if batch:
                    await self._dispatch_or_release(batch, claim)
                    if len(batch) == CLAIM_BATCH:
                        continue
                timeout = await self._idle_timeout()
            except Exception:
                log.exception("router_cycle_failed", router=self.name)
                timeout = DISCONNECTED_RETRY_SECONDS
            if self._stopping:
                return
            self._waiting = True
            self._note_idle()
            try:
                async with asyncio.timeout(timeout):
                    await self._wake.wait()
            except TimeoutError:
                pass
            finally:
                self._waiting = False
                self._idle.clear()

    async def _idle_timeout(self) -> float:
        due = await self.outbox.next_due_at()
        if due is None:
            return IDLE_POLL_SECONDS
        return min(IDLE_POLL_SECONDS, max(0.0, due - time.time()))

    async def _decide(self, batch: list[Notification]) -> list[Decision]:
        return await find_owners(batch, self.store, self.runner.open_tabs, self.runner.adapters)

    async def _decide_again(self, notices: list[Notification]) -> list[Decision]:
        """The rule asked again for notices whose owner ended while they waited in its
        lane: the new answer joins each notice's trace beside the first."""
        decisions = await self._decide(notices)
        if tracing.enabled:
            for n, decision in zip(notices, decisions, strict=True):
                _trace_owner(n, decision, again=True)
        return decisions

    async def _dispatch_or_release(self, batch: list[Notification], claim: int) -> None:
        """Decide every row of a batch, then queue deliveries in outbox order.

        If deciding fails, the rows go back to pending rather than staying
        claimed with nobody to deliver them. No task per row: each delivery runs
        in its owner's lane, and its outcome joins the batch's one write.
        """
        try:
            decisions = await self._decide(batch)
        except Exception as exc:
            log.exception("router_decide_failed", rows=len(batch))
            for n in batch:
                await self.outbox.release(n.id, self.name, f"routing failed: {exc!r}",
                                          DISCONNECTED_RETRY_SECONDS)
            return
        self._open += len(batch)
        if tracing.enabled:
            for n, decision in zip(batch, decisions, strict=True):
                _trace_decision(n, decision, self.name)
        as_is = [not isinstance(d, Park) and self._posts_as_is(n, d)
                 for n, d in zip(batch, decisions, strict=True)]
        budgets = _Budgets(self.runner, Counter(
            _chat_of(d.route) for d, posted in zip(decisions, as_is, strict=True)
            if posted and not isinstance(d, Park)))
        inline: dict[str, list[Member]] = {}
        #: conversations held for this batch that later notices may still join inline
        held: set[str] = set()
        for n, decision, posted in zip(batch, decisions, as_is, strict=True):
            if isinstance(decision, Park):
                self._record(n, _parked(decision))
                continue
            member = Member(n, decision, claim)
            key = n.session_key
            if posted:
                if self._gather(member, budgets):
                    held.discard(key)  # what comes next in it queues behind the gathering
                    continue
                if key in held or self._hold(key, held):
                    inline.setdefault(key, []).append(member)
                    budgets.spend(decision)
                    continue
            held.discard(key)  # a turn queued behind the held lane: later notices too
            # turns and labelled notices alike go through the conversation's
            # lane, so its notices keep their order
            self._queue(Delivery([member]), budgets)
        if inline:
            self._post_inline(inline)

    def _hold(self, key: str, held: set[str]) -> bool:
        """Hold the conversation's lane for this batch's inline posts when it is idle:
        nothing under way or queued there, no notice of it waiting for a retry."""
        if key in self._holds or not self.runner.lanes.hold(key):
            return False
        held.add(key)
        return True

    def _post_inline(self, groups: dict[str, list[Member]]) -> None:
        lanes = self.runner.lanes
        task = asyncio.get_running_loop().create_task(self._deliver_inline(groups),
                                                      name=f"{self.name}:inline")
        for key in groups:
            lanes.held_by(key, task)
        self._inline.add(task)
        task.add_done_callback(self._inline.discard)

    async def _deliver_inline(self, groups: dict[str, list[Member]]) -> None:
        """Post each held conversation's notices, in order, a few conversations at once;
        each lane is released the moment its conversation's notices are out."""
        waiting = iter(list(groups.items()))

        async def post_groups() -> None:
            for key, members in waiting:
                try:
                    await self._post_group(key, members)
                except Exception:  # (its notices went back; the others go on)
                    log.exception("notification_group_failed", session_key=key)

        try:
            workers = min(INLINE_CONVERSATIONS, len(groups))
            if workers == 1:
                await post_groups()
            else:
                await asyncio.gather(*(post_groups() for _ in range(workers)))
        finally:
            for key, members in waiting:  # cancelled (a drain ran out): they go back
                self.runner.lanes.release(key)
                for m in members:
                    self._record(m.notification, _STOPPING)

    async def _post_group(self, key: str, members: list[Member]) -> None:
        """One conversation's notices of the batch, in order; its lane released after.

        As in the lane: one a tool took meanwhile is left out, one whose owner ended
        meanwhile is asked about again, and once one is refused (a retry) the rest wait
        behind it, untried."""
        index = 0
        try:
            fresh: dict[int, Decision] = {}
            if not all(self._still_live(m.decision) for m in members):
                again = [m.notification for m in members if not self._still_live(m.decision)]
                fresh = dict(zip((n.id for n in again), await self._decide_again(again),
                                 strict=True))
            for index, m in enumerate(members):  # noqa: B007 - the finally reads it
                n = m.notification
                if not self.outbox.delivering(n.id):
                    self._record(n, _Outcome("consumed"))
                    continue
                try:
                    if (behind := self._waits_behind([m])) is not None:
                        outcome = _Outcome("held", reason=f"waits behind notification {behind}")
                    else:
                        decision = fresh.get(n.id, m.decision)
                        if isinstance(decision, Park):
                            outcome = _parked(decision)
                        elif (outcome := await self._post_as_is(n, decision)
                              ).state == "delivered":
                            continue  # recorded with its send (see _post_as_is)
                except Exception as exc:
                    log.error("notification_delivery_crashed", notification_ids=[n.id],
                              session_key=key, exc_info=exc)
                    outcome = _Outcome("retry", reason=f"delivery crashed: {exc!r}",
                                       retry_in=_backoff(n))
                finally:
                    self.outbox.delivered(n.id)
                if outcome.state == "retry" and key not in self._holds:
                    self._holds[key] = _Hold(n.id)
                self._record(n, outcome)
            index = len(members)
        finally:
            self.runner.lanes.release(key)
            for m in members[index:]:  # cancelled mid-way: they go back
                self._record(m.notification, _STOPPING)

    async def _post_as_is(self, n: Notification, decision: Sendable) -> _Outcome:
        """A notice's text posted in its owner's route. Once it went out, its transcript
        line and its row marked delivered (with the message's id: the send's record) are
        gathered into the next commit, one write: no moment where the send is recorded
        and the row still open, or the other way round. The delivered outcome is told
        (:meth:`_committed`) once that commit is through; any other is the caller's."""
        if not self._connected(decision.route.platform):
            return _DISCONNECTED
        text = notice_text(n, decision)
        info = n.info
        if isinstance(decision, DeliverTurn):  # (a late notice is no one's turn)
            self._notice_turns.inc()
        key = reply_key(n.idempotency_key, 0)
        if await self._sent_before(n, decision.route, key):
            result = SendResult.sent(None)
        else:
            result = await self.runner.post(decision.route, text, kind="notification",
                                            session_id=decision.session.id, dedupe_key=key,
                                            notice=info)
            if tracing.enabled:
                _trace_send(n, decision.route, result)
        outcome = _from_sends(n, [result])
        if outcome.state == "delivered":
            committed = self.outbox.db.gather([
                (TRANSCRIPT_LINE, transcript_row(decision.session.id, "notification", text,
                                                 notice=info)),
                delivered_op(n.id, self.name, outcome.message_id, time.time())])
            waiting = self._committing.get(committed)
            if waiting is None:
                waiting = self._committing[committed] = []
                committed.add_done_callback(self._committed)
            waiting.append((n, outcome))
            # the conversation's next send waits for this record: a kill can repeat the
            # one send under way, never the batch before it (the commit still gathers the
            # records of every conversation posting meanwhile)
            await asyncio.wait([committed])
        return outcome

    def _committed(self, committed: asyncio.Future[object]) -> None:
        """The commit that recorded inline posts is through (or failed): what recording
        an outcome does after its write, for all of them at once."""
        batch = self._committing.pop(committed, [])
        try:
            if committed.cancelled() or committed.exception() is not None:
                # the rows stay claimed, as after a crash: the next start settles them (a
                # recorded send counts as delivered; this one's record did not commit)
                log.error("notification_outcomes_not_recorded", rows=len(batch),
                          error=repr(None if committed.cancelled() else committed.exception()))
            else:
                self.outbox.settled(batch)
                self._after_recorded(batch)
        finally:
            self._closed(len(batch))

    def _posts_as_is(self, n: Notification, decision: Decision) -> bool:
        """A notice whose delivery only posts its text (no turn of the model, no file) —
        one of a merged message sent before among them: a model's answer was marked so
        only after its turn, which is not run twice."""
        if n.file_path is not None or isinstance(decision, Park):
            return False
        return (isinstance(decision, DeliverNotice) or n.merged_into is not None
                or self.runner.agent.posts_as_is(n))

    def _answers(self, n: Notification, decision: Decision) -> bool:
        """A notice whose delivery is the model's turn, its answer what is posted."""
        return isinstance(decision, DeliverTurn) and not self._posts_as_is(n, decision)

    def _gather(self, member: Member, budgets: _Budgets) -> bool:
        """Put ``member`` into a delivery of several notices in one message: the one its
        conversation has open, or a new one when the platform cannot take the waiting
        notices of the conversation's chat one by one now. False: it goes alone."""
        n = member.notification
        key = n.session_key
        open_ = self._gathering.get(key)
        budgets.place(member.decision)
        if (open_ is not None and open_.done is not None
                and self.runner.lanes.queued_last(key, open_.done) and open_.takes(member)):
            open_.members.append(member)
            return True
        # (one of a merged message sent before goes merged again; one that may have
        # gone out alone before a stop goes alone again, under the key it had)
        if n.merged_into is None and (n.interrupted or not budgets.short(member.decision)):
            return False
        adapter = self.runner.adapters[member.decision.route.platform]
        self._queue(Delivery([member], gathering=True, limit=adapter.message_limit,
                             merged_into=n.merged_into), budgets)
        return True

    def _queue(self, delivery: Delivery, budgets: _Budgets) -> None:
        key = delivery.session_key
        budgets.spend(delivery.members[0].decision)
        delivery.done = self.runner.run_in_lane(key, partial(self._deliver_in_lane, delivery))
        delivery.done.add_done_callback(partial(self._lane_done, delivery))
        self._queued[delivery.done] = delivery
        if delivery.gathering:
            self._gathering[key] = delivery

    def _lane_done(self, delivery: Delivery, pending: asyncio.Future[object]) -> None:
        self._queued.pop(pending, None)
        members = [m.notification for m in delivery.members]
        if pending.cancelled():
            outcomes = [_STOPPING] * len(members)
        elif (exc := pending.exception()) is not None:
            log.error("notification_delivery_crashed", notification_ids=[n.id for n in members],
                      session_key=delivery.session_key, exc_info=exc)
            # one retry time for them all: notices merged before stay one message
            crashed = _Outcome("retry", reason=f"delivery crashed: {exc!r}",
                               retry_in=max(_backoff(n) for n in members))
            outcomes = [crashed] * len(members)
        else:
            result = pending.result()
            # not outcomes: the lane was shut down before this delivery ran
            outcomes = result if isinstance(result, list) else [_STOPPING] * len(members)
        for n, outcome in zip(members, outcomes, strict=True):
            self._record(n, outcome)

    def _record(self, n: Notification, outcome: _Outcome) -> None:
        self._outcomes.append((n, outcome))
        if self._recorder is None or self._recorder.done():
            self._recorder = asyncio.get_running_loop().create_task(self._record_outcomes())

    async def _record_outcomes(self) -> None:
        """Write the outcomes gathered meanwhile, together, until none are left."""
        while self._outcomes:
            batch, self._outcomes = self._outcomes, []
            try:
                await self.outbox.record_outcomes(self.name, batch)
            except Exception:
                # the rows stay claimed; the next start settles them as after a crash
                # (a recorded send counts as delivered, anything else is sent again).
                # A retry that was not written holds nothing back: the outbox would not
                # keep the later rows behind it, and they would be given back forever
                log.exception("notification_outcomes_not_recorded", rows=len(batch))
                for n, _ in batch:
                    if self._holding(n):
                        del self._holds[n.session_key]
            else:
                self._after_recorded(batch)
            finally:
                self._closed(len(batch))

    def _closed(self, count: int) -> None:
        """``count`` notices whose outcomes are written (or given up on): the router is
        settled once none is open."""
        self._open -= count
        if not self._open:
            self._recorded.set()
        self._note_idle()

    def _after_recorded(self, batch: list[tuple[Notification, _Outcome]]) -> None:
        now = time.time()
        held = False
        if tracing.enabled:
            for n, outcome in batch:
                tracing.event("notice.recorded", parent=n.trace_parent, notification_id=n.id,
                              outcome=attempt_outcome(outcome), reason=_reason(outcome.reason),
                              message_id=outcome.message_id, retry_in=outcome.retry_in or None)
        for n, outcome in batch:
            if outcome.state == "delivered":
                self.runner.metrics.delivery_latency.observe(max(0.0, now - n.created_at))
                log.info("notification_delivered", notification_id=n.id, kind=n.kind,
                         session_key=n.session_key, job_id=n.job_id,
                         message_id=outcome.message_id)
            elif outcome.state == "consumed":
                log.info("notification_consumed_before_delivery", notification_id=n.id,
                         job_id=n.job_id)
            elif outcome.state == "retry":
                log.warning("notification_retry", notification_id=n.id, kind=n.kind,
                            session_key=n.session_key, job_id=n.job_id,
                            error=outcome.reason, retry_in=outcome.retry_in)
                if self._holding(n):
                    self._holds[n.session_key].written_by_claim = self._claims
                self._schedule_wake(outcome.retry_in)
            elif outcome.state == "withheld":
                log.info("notification_withheld", notification_id=n.id,
                         session_key=n.session_key, reason=outcome.reason,
                         due_in=outcome.retry_in)
                self._schedule_wake(outcome.retry_in)  # for whoever may send it then
            elif outcome.state == "held":
                held = True
                log.info("notification_held_back", notification_id=n.id,
                         session_key=n.session_key, behind=outcome.reason)
        if held:  # the claim decides whether they wait still (their notice may be gone)
            self.wake()

    async def _forget_gone_holds(self, claim: int) -> None:
        """Forget the refused notices that no longer wait for their retry: taken by
        ``process wait``, claimed by another instance, or by this claim (its retry is
        under way; refused again, it is held again). Asked after a claim begun once the
        retry was written; a conversation with nothing more would keep it forever."""
        written = {hold.notification_id: key for key, hold in self._holds.items()
                   if hold.written_by_claim is not None and hold.written_by_claim < claim}
        if not written:
            return
        waiting = await self.outbox.still_pending(list(written))
        for notification_id, key in written.items():
            hold = self._holds.get(key)
            if (notification_id not in waiting and hold is not None
                    and hold.notification_id == notification_id):
                del self._holds[key]

    def _holding(self, n: Notification) -> bool:
        hold = self._holds.get(n.session_key)
        return hold is not None and hold.notification_id == n.id

    # delivering ------------------------------------------------------------

    async def _deliver_in_lane(self, delivery: Delivery) -> list[_Outcome]:
        """Runs in the owner's lane: check ownership again, then give the owner its turn
        (or post the notices gathered by now in one message); one outcome per member.

        A notice a tool took while it waited here is left out. One queued behind a
        notice of its conversation that failed meanwhile goes back untried.
        """
        delivery.gathering = False  # what comes now goes into the next one
        key = delivery.session_key
        if self._gathering.get(key) is delivery:
            del self._gathering[key]
        if delivery.done is not None:
            self._queued.pop(delivery.done, None)
        self._take_along(delivery)
        taken = {m.notification.id: self.outbox.delivering(m.notification.id)
                 for m in delivery.members}
        going = [m for m in delivery.members if taken[m.notification.id]]
        outcomes = {m.notification.id: _Outcome("consumed") for m in delivery.members
                    if not taken[m.notification.id]}
        if going:
            first = going[0].notification
            try:
                if (behind := self._waits_behind(going)) is not None:
                    held = _Outcome("held", reason=f"waits behind notification {behind}")
                    outcomes.update((m.notification.id, held) for m in going)
                elif len(going) == 1:
                    outcomes[first.id] = await self._deliver(first, going[0].decision)
                else:
                    outcomes.update(await self._deliver_together(going, delivery.merged_into))
            except BaseException:  # crashed or cancelled: it goes back, ahead of the rest
                self._holds[key] = _Hold(first.id)
                raise
            finally:
                for m in going:
                    self.outbox.delivered(m.notification.id)
            retried = [m.notification.id for m in going
                       if outcomes[m.notification.id].state == "retry"]
            if retried:  # (the first of them: one parked meanwhile holds nothing)
                self._holds[key] = _Hold(retried[0])
        return [outcomes[m.notification.id] for m in delivery.members]

    def _take_along(self, delivery: Delivery) -> None:
        """When the chat cannot take one by one what waits for it now, the notices
        queued right behind ``delivery`` in its lane (for the same owner, nothing else
        between: notices posted as they are, and notices whose answer is the model's)
        join it: they go out together, in order, in as few messages as the platform's
        length allows, rather than each waiting out the flood limit in a message of its
        own. Measured as the delivery starts, so what was queued while the chat still
        had room is taken along too."""
        if not self._may_merge(delivery):
            return
        key = delivery.session_key
        owner = owner_of(delivery.members[0].decision)
        behind: list[Delivery] = []
        for done in self.runner.lanes.queued(key):
            later = self._queued.get(done)
            if (later is None or not self._may_merge(later)
                    or owner_of(later.members[0].decision) != owner):
                break
            behind.append(later)
        if not behind:
            return
        route = delivery.members[0].decision.route
        room = _Budgets(self.runner, Counter()).room_now(route)
        if room is None or room >= 0:  # (it counts what waits in the chat's lanes)
            return
        for later in behind:
            assert later.done is not None
            if not self.runner.lanes.withdraw(key, later.done):
                break
            del self._queued[later.done]
            if self._gathering.get(key) is later:
                del self._gathering[key]
            delivery.members.extend(later.members)
            later.members = []
            later.done.set_result([])  # (its notices' outcomes are this delivery's)
        log.info("notices_taken_along", session_key=key, notices=len(delivery.members),
                 room=room)

    def _may_merge(self, delivery: Delivery) -> bool:
        """A delivery whose notices may go in one message with others: no file, none of
        a merged message sent before nor one a stop may have sent alone. (One that gives
        the model a turn joins with its answer, :meth:`_answer_held`.)"""
        return delivery.merged_into is None and all(
            m.notification.file_path is None and not m.notification.interrupted
            and m.notification.merged_into is None for m in delivery.members)

    def _waits_behind(self, going: Sequence[Member]) -> int | None:
        """The id of the notice of their conversation that waits for a retry and that
        these must not overtake; None when they may go."""
        first = going[0]
        hold = self._holds.get(first.notification.session_key)
        ids = {m.notification.id for m in going}
        if hold is None or (first.notification.id < hold.notification_id
                            and hold.notification_id not in ids):
            return None
        seen = hold.written_by_claim is not None and first.claim > hold.written_by_claim
        if hold.notification_id in ids or seen:  # its retry is under way, or it is gone
            del self._holds[first.notification.session_key]
            return None
        return hold.notification_id

    def _still_live(self, decision: Decision) -> bool:
        """An owner that is still the live session needs no second look."""
        return (isinstance(decision, DeliverTurn)
                and self.store.is_live_session(decision.session.id))

    async def _deliver(self, n: Notification, decision: Decision) -> _Outcome:
        if not self._still_live(decision):
            (decision,) = await self._decide_again([n])
        if isinstance(decision, Park):
            return _parked(decision)
        return await self._deliver_to(n, decision)

    async def _deliver_to(self, n: Notification, decision: Sendable) -> _Outcome:
        if isinstance(decision, DeliverNotice):
            return await self._deliver_notice(n, decision)
        if not self._connected(decision.route.platform):
            return _DISCONNECTED
        if await self._sent_before(n, decision.route, reply_key(n.idempotency_key, 0)):
            return await self._recorded_unsent([Outgoing(n, decision)])
        turn = await self._turn(n, decision)
        return turn if isinstance(turn, _Outcome) else _from_sends(n, turn.sent)

    async def _turn(self, n: Notification, decision: DeliverTurn, *,
                    hold_replies: bool = False) -> _TurnSent | _Outcome:
        """The owner's turn for ``n`` (``hold_replies``: see :meth:`_answer_held`); the
        outcome instead when the turn failed."""
        try:
            with tracing.span("notice.turn", parent=n.trace_parent, notification_id=n.id,
                              session_id=decision.session.id):
                turn = await self.runner.notification_turn(
                    decision.session, decision.route, n, sent_ops=self._sent_ops(n),
                    hold_replies=hold_replies)
            if tracing.enabled and not hold_replies:  # (held replies: traced as they go)
                for result in turn.sent:
                    _trace_send(n, decision.route, result)
        except Exception as exc:
            log.exception("notification_turn_failed", notification_id=n.id)
            if n.attempts + 1 >= MAX_TURN_FAILURES:
                return _Outcome("parked", reason="turn_failed", detail=repr(exc))
            return _Outcome("retry", reason=f"turn failed: {exc!r}", retry_in=_backoff(n))
        return turn

    async def _answer_held(self, n: Notification, decision: Decision) -> Outgoing | _Outcome:
        """The model's turn for a notice that goes out with others (its chat cannot take
        them one by one): run now, in order in the owner's lane as every turn, its replies
        held back and joined as its answer in their message. The outcome instead when
        there is nothing to send: the turn failed, or said nothing."""
        if not self._still_live(decision):  # (a turn before it may have compressed)
            (decision,) = await self._decide_again([n])
        if isinstance(decision, Park):
            return _parked(decision)
        if not isinstance(decision, DeliverTurn):  # (its session ended: as it is)
            return Outgoing(n, decision)
        if not self._connected(decision.route.platform):
            return _DISCONNECTED
        turn = await self._turn(n, decision, hold_replies=True)
        if isinstance(turn, _Outcome):
            return turn
        if not turn.held:
            return _from_sends(n, turn.sent)
        return Outgoing(n, decision, answer="\n\n".join(turn.held))

    async def _post_answer(self, answered: Outgoing) -> _Outcome:
        """A held answer in a message of its own (it alone fills one), as its turn would
        have sent it: recorded by its send, under the key of the turn's first reply."""
        n, where = answered.notification, answered.decision
        if not self._connected(where.route.platform):
            return _DISCONNECTED
        result = await self.runner.send(where.session, where.route, answered.text,
                                        kind="notification", recorded_with=self._sent_ops(n),
                                        dedupe_key=reply_key(n.idempotency_key, 0),
                                        notice=n.info)
        if tracing.enabled:
            _trace_send(n, where.route, result)
        return _from_sends(n, [result])

    async def _deliver_notice(self, n: Notification, decision: DeliverNotice) -> _Outcome:
        if not self._connected(decision.route.platform):
            return _DISCONNECTED
        key = reply_key(n.idempotency_key, 0)
        if await self._sent_before(n, decision.route, key):
            return await self._recorded_unsent([Outgoing(n, decision)])
        result = await self.runner.send(decision.session, decision.route,
                                        notice_text(n, decision), kind="notification",
                                        recorded_with=self._sent_ops(n), dedupe_key=key,
                                        notice=n.info)
        if tracing.enabled:
            _trace_send(n, decision.route, result)
        return _from_sends(n, [result])

    async def _deliver_together(self, going: Sequence[Member],
                                merged_into: int | None) -> dict[int, _Outcome]:
        """Several notices of one conversation in one message, each whole and in order;
        the send and its record mark every one of them delivered, in one write. One
        that gives the model a turn has it first, in its place, and its answer goes in
        the message instead (:meth:`_answer_held`).

        One whose owner changed while they waited (its session ended meanwhile) goes
        with the others of its owner now, in a message of its own: a message has one
        session and one route. Once one of these messages (or turns) is refused, those
        after it go back untried, behind it."""
        # as for one notice: an owner reset while these waited is asked about again
        again = [m.notification for m in going if not self._still_live(m.decision)]
        fresh = dict(zip((n.id for n in again), await self._decide_again(again) if again else [],
                         strict=True))
        outcomes: dict[int, _Outcome] = {}
        sending: list[Outgoing] = []
        for place, m in enumerate(going):
            n = m.notification
            decision = fresh.get(n.id, m.decision)
            going_out: Outgoing | _Outcome = (
                _parked(decision) if isinstance(decision, Park) else
                await self._answer_held(n, decision) if self._answers(n, decision) else
                Outgoing(n, decision))
            if isinstance(going_out, Outgoing):
                sending.append(going_out)
                continue
            outcomes[n.id] = going_out
            if going_out.state == "retry":  # (its turn failed: what comes after waits)
                held = _Outcome("held", reason=f"waits behind notification {n.id}")
                outcomes |= {later.notification.id: held for later in going[place + 1:]}
                break
        runs = [group for run in _by_owner(sending) for group in self._in_messages(run)]
        for index, run in enumerate(runs):
            if len(run) == 1:
                (one,) = run
                sent = {one.notification.id: await (
                    self._post_answer(one) if one.answer is not None
                    else self._deliver_to(one.notification, one.decision))}
            else:  # (a set marked before and still whole keeps its mark)
                whole = merged_into is not None and len(runs) == 1
                sent = await self._send_merged(run, merged_into if whole else None)
            outcomes |= sent
            refused = next((i for i, o in sent.items() if o.state == "retry"), None)
            if refused is not None:
                held = _Outcome("held", reason=f"waits behind notification {refused}")
                outcomes |= {out.notification.id: held for later in runs[index + 1:]
                             for out in later}
                break
        return outcomes

    def _in_messages(self, run: list[Outgoing]) -> list[list[Outgoing]]:
        adapter = self.runner.adapters.get(run[0].decision.route.platform)
        return in_messages(run, adapter.message_count) if adapter is not None else [run]

    async def _send_merged(self, run: Sequence[Outgoing],
                           merged_into: int | None) -> dict[int, _Outcome]:
        """One message carrying ``run``'s notices (one owner's), recorded by its send."""
        first, where = run[0].notification, run[0].decision
        ids = [o.notification.id for o in run]
        if not self._connected(where.route.platform):
            return {i: _DISCONNECTED for i in ids}
        if merged_into is None:  # marked first: after a crash they go together again
            merged_into = await self.outbox.merge(ids, self.name)

        def sent(result: SendResult) -> list[Op]:
            return [self.outbox.sent_op(i, self.name, result.message_id) for i in ids]

        notices = [o.notification for o in run]
        # the message's own name: sent again after a crash it is the same post to a
        # platform that deduplicates, though a notice of it was taken meanwhile
        key = f"{first.session_key}:merged:{merged_into}"
        interrupted = next((n for n in notices if n.interrupted), None)
        if interrupted is not None and await self._sent_before(interrupted, where.route, key):
            return dict.fromkeys(ids, await self._recorded_unsent(run))
        result = await self.runner.send(
            where.session, where.route, merged_text([o.text for o in run]),
            kind="notification", recorded_with=sent, notice=merged_info(notices),
            dedupe_key=key)
        log.info("notices_sent_together", session_key=first.session_key,
                 notification_ids=ids, merged_into=merged_into, ok=result.ok)
        if tracing.enabled:
            for n in notices:
                _trace_send(n, where.route, result, merged_into=merged_into)
        # one outcome for the set: one retry time, so it stays one message
        outcome = _from_sends(max(notices, key=lambda n: n.attempts), [result])
        return dict.fromkeys(ids, outcome)

    async def _sent_before(self, n: Notification, route: Route, dedupe_key: str) -> bool:
        """Whether a notice whose claim ended with its gateway, unrecorded (the send under
        way at a kill), already went out: asked of the platform where it can tell (its
        own record of the send keyed ``dedupe_key``). Where it cannot, the notice is sent
        again; a platform that deduplicates the key posts it once all the same, and on
        any other (Telegram) the person may see it twice, logged as ``maybe_repeated``."""
        if not n.interrupted:
            return False
        adapter = self.runner.adapters.get(route.platform)
        # looked for after the anchor the work started under: the owner's route may
        # have moved on since (a message read back after the restart)
        address = n.address
        where = (route if address is None or address.route.message_id is None
                 else replace(route, message_id=address.route.message_id))
        answer: bool | None = None
        if adapter is not None:
            try:
                answer = await adapter.delivered(where, dedupe_key)
            except Exception as exc:  # a look that failed: not known, as on Telegram
                log.warning("send_lookup_failed", notification_id=n.id,
                            platform=route.platform, error=repr(exc))
        if answer:
            log.info("notification_sent_before_stop", notification_id=n.id,
                     session_key=n.session_key, job_id=n.job_id)
            return True
        if answer is None and not dedupes_sends(route.platform):
            log.warning("maybe_repeated", notification_id=n.id, session_key=n.session_key,
                        job_id=n.job_id, platform=route.platform,
                        reason="its gateway stopped after the send began and before its "
                               "record; the platform cannot tell whether it went out")
        return False

    async def _recorded_unsent(self, run: Sequence[Outgoing]) -> _Outcome:
        """The record of a send the platform says went out before the stop (``run``'s
        notices, one owner's, alone or in one message): its transcript line and sent
        ids, written now, and delivered without a second send."""
        first, decision = run[0].notification, run[0].decision
        notices = [o.notification for o in run]
        text = run[0].text if len(run) == 1 else merged_text([o.text for o in run])
        info = first.info if len(notices) == 1 else merged_info(notices)
        result = SendResult.sent(None)
        await self.store.record_sent(
            decision.session.id, "notification", text, notice=info,
            with_ops=[self.outbox.sent_op(n.id, self.name, None) for n in notices])
        return _from_sends(first, [result])

    def _sent_ops(self, n: Notification) -> Callable[[SendResult], list[Op]]:
        def ops(result: SendResult) -> list[Op]:
            return [self.outbox.sent_op(n.id, self.name, result.message_id)]
        return ops

    def _connected(self, platform: str) -> bool:
        adapter = self.runner.adapters.get(platform)
        return adapter is not None and adapter.connected

    def _schedule_wake(self, delay: float) -> None:
        asyncio.get_running_loop().call_later(max(delay, 0.0), self.wake)


class _Budgets:
    """What each chat can still take while a batch's deliveries are queued.

    A platform's budget is the chat's, not one conversation's: Telegram's 20 messages
    a minute are a group's, all its forum topics together. So a chat is short when the
    notices all its conversations still want one by one exceed what it takes now, less
    the work its lanes already hold and each delivery queued since.
    """

    def __init__(self, runner: RouterHost, wanted: Counter[tuple[str, str]]) -> None:
        self._runner = runner
        #: by chat, the batch's notices posted as they are and not placed yet
        self._wanted = wanted
        #: by chat, once asked: the sends it takes now (None: no limit)
        self._room: dict[tuple[str, str], int | None] = {}

    def place(self, decision: Sendable) -> None:
        """A notice counted in ``wanted`` is being placed (alone or in a message)."""
        self._wanted[_chat_of(decision.route)] -= 1

    def short(self, decision: Sendable) -> bool:
        """Whether the chat cannot take one by one the notices it still wants, the one
        just placed included."""
        chat = _chat_of(decision.route)
        if chat not in self._room:
            self._room[chat] = self.room_now(decision.route)
        room = self._room[chat]
        return room is not None and room < self._wanted[chat] + 1

    def spend(self, decision: Sendable) -> None:
        """A delivery was queued for the chat: one send less of its room."""
        chat = _chat_of(decision.route)
        room = self._room.get(chat)
        if room is not None:
            self._room[chat] = room - 1

    def room_now(self, route: Route) -> int | None:
        """What the chat takes now less the work its lanes hold."""
        adapter = self._runner.adapters.get(route.platform)
        room = adapter.send_room(route) if adapter is not None else None
        if room is None:
            return None
        lanes = self._runner.lanes
        queued = 0  # (the work under way in a lane takes its part too)
        for key in list(lanes.by_key):
            try:
                parts = parse_session_key(key)
            except SessionKeyError:
                continue
            if (parts.platform, parts.chat_id) == (route.platform, route.chat_id):
                queued += lanes.waiting(key) + lanes.is_busy(key)
        return room - queued


def _trace_decision(n: Notification, decision: Decision, claimer: str) -> None:
    """The claim and the ownership rule's answer, in the notice's trace."""
    tracing.event("notice.claimed", parent=n.trace_parent, notification_id=n.id,
                  kind=n.kind, claimer=claimer, attempt=n.attempts + 1)
    _trace_owner(n, decision)


def _trace_owner(n: Notification, decision: Decision, again: bool = False) -> None:
    owner = ("parked" if isinstance(decision, Park) else
             "late" if isinstance(decision, DeliverNotice) else "live")
    tracing.event("notice.owner", parent=n.trace_parent, notification_id=n.id,
                  owner=owner, again=again or None, session_id=None if isinstance(decision, Park)
                  else decision.session.id,
                  reason=decision.reason if isinstance(decision, Park) else None,
                  detail=tracing.text(decision.detail or "") if isinstance(decision, Park)
                  else None)


def _reason(reason: str | None) -> str | None:
    """A reason as a span may carry it: its words before any quoted error ("turn failed:
    ValueError('…')" is "turn failed"), whole only where telemetry.include_text allows."""
    if reason is None or tracing.include_text:
        return reason
    return reason.split(":", 1)[0]


def _trace_send(n: Notification, route: Route, result: SendResult,
                merged_into: int | None = None) -> None:
    """A send attempt in the notice's trace (``merged_into``: the message it went in
    with others of its conversation)."""
    tracing.event("notice.send", parent=n.trace_parent, notification_id=n.id,
                  platform=route.platform, chat_id=route.chat_id, thread_id=route.thread_id,
                  ok=result.ok, error=result.error, retry_after=result.retry_after,
                  message_id=result.message_id, merged_into=merged_into)


def _chat_of(route: Route) -> tuple[str, str]:
    """What a platform's send budget belongs to."""
    return route.platform, route.chat_id


_DISCONNECTED = _Outcome("retry", reason="platform disconnected",
                         retry_in=DISCONNECTED_RETRY_SECONDS)


_STOPPING = _Outcome("retry", reason="gateway stopping", retry_in=0.0, untried=True)


def _by_owner(sending: list[Outgoing]
              ) -> list[list[Outgoing]]:
    """``sending`` in runs of one owner each, in their order."""
    runs: list[list[Outgoing]] = []
    for item in sending:
        if runs and owner_of(runs[-1][0].decision) == owner_of(item.decision):
            runs[-1].append(item)
        else:
            runs.append([item])
    return runs


def _parked(decision: Park) -> _Outcome:
    return _Outcome("parked", reason=decision.reason, detail=decision.detail)


def _from_sends(n: Notification, results: Sequence[SendResult]) -> _Outcome:
    """A delivery succeeded when its last send did: that is the one that carries the
    notice (or the agent's answer to it). Earlier parts that failed are not retried —
    a retry would repeat the parts that went out."""
    if not results or results[-1].ok:
        last = next((r.message_id for r in reversed(results) if r.message_id), None)
        return _Outcome("delivered", message_id=last)
    result = results[-1]
    if result.untried:
        return _Outcome("withheld", reason=result.error, retry_in=WITHHELD_RETRY_SECONDS)
    if result.permanent:
        return _Outcome("parked", reason="route_gone" if result.route_gone else "rejected",
                        detail=result.error)
    if result.retry_after is not None:
        return _Outcome("retry", reason=result.error, retry_in=result.retry_after,
                        platform_wait=True)
    return _Outcome("retry", reason=result.error, retry_in=_backoff(n))


def _backoff(n: Notification) -> float:
    return REDELIVERY.delay(n.attempts)
