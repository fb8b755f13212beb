"""The router: takes pending notifications from the outbox to their owners.

Woken the moment a notification is committed (and on a slow timer, for rows
another process added or that wait for a retry). For each claimed row it asks
the ownership rule where the row belongs, then puts the delivery into the
owner's lane — so a busy owner keeps its mail in order — and finally records
the outcome: delivered, retried later, or parked with a reason.

A conversation's notices go out in the order they were made. One that waits for
a retry holds the ones behind it: the claim leaves later rows of its conversation
in the outbox (gateway/outbox.py), and the ones already queued behind it in the
lane are given back untried (:class:`_Hold`), so its retry goes first.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import structlog

from .database import Op
from .events import SendResult
from .lives import claimer_name
from .migrations import OUTBOX_CHANNEL
from .notifications import Notification
from .outbox import DeliveryOutcome as _Outcome
from .outbox import Outbox
from .ownership import Decision, DeliverNotice, DeliverTurn, Park, find_owners
from .retry import RetryPolicy
from .runner import GatewayRunner
from .session_key import platform_prefix
from .store import SessionStore

log = structlog.get_logger(__name__)

CLAIM_BATCH = 500
#: how long an idle router waits for a wake-up before it looks anyway (rows another
#: process added). Read at every wait, so tests can set it to an hour: a notice that
#: is delivered at all then was woken for, not found by the poll (invariant 8)
IDLE_POLL_SECONDS = 5.0
DISCONNECTED_RETRY_SECONDS = 5.0
MAX_TURN_FAILURES = 5
#: a notice whose delivery failed waits this long before the next try (its attempts count)
REDELIVERY = RetryPolicy((1.0, 2.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0))


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
    def __init__(self, outbox: Outbox, store: SessionStore, runner: GatewayRunner,
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
        for n, decision in zip(batch, decisions, strict=True):
            if isinstance(decision, Park):
                self._record(n, _parked(decision))
                continue
            # turns and labelled notices alike go through the conversation's
            # lane, so its notices keep their order
            pending = self.runner.run_in_lane(
                n.session_key, partial(self._deliver_in_lane, n, decision, claim))
            pending.add_done_callback(partial(self._lane_done, n))

    def _lane_done(self, n: Notification, pending: asyncio.Future[object]) -> None:
        if pending.cancelled():
            outcome = _STOPPING
        elif (exc := pending.exception()) is not None:
            log.error("notification_delivery_crashed", notification_id=n.id,
                      session_key=n.session_key, exc_info=exc)
            outcome = _Outcome("retry", reason=f"delivery crashed: {exc!r}",
                               retry_in=_backoff(n))
        else:
            result = pending.result()
            # not an outcome: the lane was shut down before this delivery ran
            outcome = result if isinstance(result, _Outcome) else _STOPPING
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
                self._open -= len(batch)
                if not self._open:
                    self._recorded.set()
                self._note_idle()

    def _after_recorded(self, batch: list[tuple[Notification, _Outcome]]) -> None:
        now = time.time()
        held = False
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
            elif outcome.state == "held":
                held = True
                log.info("notification_held_back", notification_id=n.id,
                         session_key=n.session_key, behind=outcome.reason)
        if held:  # the claim decides whether they wait still (their notice may be gone)
            self.wake()

    def _holding(self, n: Notification) -> bool:
        hold = self._holds.get(n.session_key)
        return hold is not None and hold.notification_id == n.id

    # delivering ------------------------------------------------------------

    async def _deliver_in_lane(self, n: Notification, decision: Decision,
                               claim: int) -> _Outcome:
        """Runs in the owner's lane: check ownership again, then give the owner its turn.

        The owner may have been reset while this waited behind its turn; an
        owner that is still the live session needs no second look. A notice queued
        behind one of its conversation that failed meanwhile goes back untried.
        """
        if not self.outbox.delivering(n.id):  # a tool handed it over while it waited here
            return _Outcome("consumed")
        try:
            if (behind := self._waits_behind(n, claim)) is not None:
                return _Outcome("held", reason=f"waits behind notification {behind}")
            outcome = await self._deliver(n, decision)
        except BaseException:  # crashed or cancelled: it goes back, ahead of the rest
            self._holds[n.session_key] = _Hold(n.id)
            raise
        finally:
            self.outbox.delivered(n.id)
        if outcome.state == "retry":
            self._holds[n.session_key] = _Hold(n.id)
        return outcome

    def _waits_behind(self, n: Notification, claim: int) -> int | None:
        """The id of the notice of ``n``'s conversation that waits for a retry and that
        ``n`` must not overtake; None when ``n`` may go."""
        hold = self._holds.get(n.session_key)
        if hold is None or n.id < hold.notification_id:
            return None
        seen = hold.written_by_claim is not None and claim > hold.written_by_claim
        if n.id == hold.notification_id or seen:  # its retry is under way, or it is gone
            del self._holds[n.session_key]
            return None
        return hold.notification_id

    async def _deliver(self, n: Notification, decision: Decision) -> _Outcome:
        still_live = (isinstance(decision, DeliverTurn)
                      and self.store.is_live_session(decision.session.id))
        if not still_live:
            (decision,) = await self._decide([n])
        if isinstance(decision, Park):
            return _parked(decision)
        if isinstance(decision, DeliverNotice):
            return await self._deliver_notice(n, decision)
        if not self._connected(decision.route.platform):
            return _DISCONNECTED
        try:
            turn = await self.runner.notification_turn(
                decision.session, decision.route, n, sent_ops=self._sent_ops(n))
        except Exception as exc:
            log.exception("notification_turn_failed", notification_id=n.id)
            if n.attempts + 1 >= MAX_TURN_FAILURES:
                return _Outcome("parked", reason="turn_failed", detail=repr(exc))
            return _Outcome("retry", reason=f"turn failed: {exc!r}", retry_in=_backoff(n))
        return _from_sends(n, turn.sent)

    async def _deliver_notice(self, n: Notification, decision: DeliverNotice) -> _Outcome:
        if not self._connected(decision.route.platform):
            return _DISCONNECTED
        ended = decision.session
        label = (f"[from an ended session {ended.id[:8]} ({ended.end_reason or 'ended'}); "
                 f"it was not reopened]")
        result = await self.runner.send(ended, decision.route, f"{label}\n{n.text}",
                                        kind="notification", recorded_with=self._sent_ops(n),
                                        dedupe_key=f"{n.idempotency_key}:0", notice=n.info)
        return _from_sends(n, [result])

    def _sent_ops(self, n: Notification) -> Callable[[SendResult], list[Op]]:
        def ops(result: SendResult) -> list[Op]:
            return [self.outbox.sent_op(n.id, self.name, result.message_id)]
        return ops

    def _connected(self, platform: str) -> bool:
        adapter = self.runner.adapters.get(platform)
        return adapter is not None and adapter.connected

    def _schedule_wake(self, delay: float) -> None:
        asyncio.get_running_loop().call_later(max(delay, 0.0), self.wake)


_DISCONNECTED = _Outcome("retry", reason="platform disconnected",
                         retry_in=DISCONNECTED_RETRY_SECONDS)


_STOPPING = _Outcome("retry", reason="gateway stopping", retry_in=0.0)


def _parked(decision: Park) -> _Outcome:
    return _Outcome("parked", reason=decision.reason, detail=decision.detail)


def _from_sends(n: Notification, results: list[SendResult]) -> _Outcome:
    """A delivery succeeded when its last send did: that is the one that carries the
    notice (or the agent's answer to it). Earlier parts that failed are not retried —
    a retry would repeat the parts that went out."""
    if not results or results[-1].ok:
        last = next((r.message_id for r in reversed(results) if r.message_id), None)
        return _Outcome("delivered", message_id=last)
    result = results[-1]
    if result.permanent:
        return _Outcome("parked", reason="route_gone" if result.route_gone else "rejected",
                        detail=result.error)
    retry_in = result.retry_after if result.retry_after is not None else _backoff(n)
    return _Outcome("retry", reason=result.error, retry_in=retry_in)


def _backoff(n: Notification) -> float:
    return REDELIVERY.delay(n.attempts)
