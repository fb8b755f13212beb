"""On a shared store: what an instance that is gone left behind, taken over by a live one.

When an instance crashes (or its host goes away, or it is cut off from the store past
its lease), its work is left half done: notices it had claimed, messages it had
journaled and not answered, delegations it was running, jobs on its host. A live
instance notices the life is over (gateway/cluster/lives.py) and settles each by the rules of
a crash: a claimed notice whose send was recorded is delivered, any other goes out
again once (gateway/delivery/outbox.py); an unanswered message is handled once, or its
conversation told it may not have finished (gateway/messages/replay.py); a delegation is
reported lost; a job is reported lost once its instance's lease has run out, unless
the instance came back first and re-attached it (tools/job_takeover.py).

Every one of those takes its rows in one conditional write, so two survivors never
both take one thing. A cleanly stopped instance leaves no claims and keeps its jobs
(they go on running, for its next start). The messages it takes in and will not begin
once stopping it hands over as it goes (gateway/inbound/journal.py), with a wake-up, so they
are answered here at once rather than after it has ended; what is left when it ends
(the drain ran out) is taken over like a crashed one's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Protocol

import structlog

from gateway.cluster.rows import list_instances, store_now
from gateway.store.group_commit import StoreClosed
from gateway.store.migrations import INBOUND_CHANNEL
from tools.job_takeover import report_lost

if TYPE_CHECKING:
    from gateway.cluster.instances import Instance
    from gateway.delivery.outbox import Outbox
    from tools.delegation import DelegationManager
    from tools.jobs import JobManager

log = structlog.get_logger(__name__)


class TakeoverHost(Protocol):
    """What a takeover asks of the message path (the runner): whether it still takes
    messages in, and a replay of what the journal holds unanswered."""

    @property
    def accepting(self) -> bool: ...

    @property
    def replay(self) -> Callable[[], Awaitable[int]]: ...


class Takeover:
    """Looks every third of a lease for lives that are over; settles what they left."""

    def __init__(self, instance: Instance, outbox: Outbox, runner: TakeoverHost,
                 jobs: JobManager, delegations: DelegationManager) -> None:
        self.instance = instance
        self.outbox = outbox
        self.runner = runner
        self.jobs = jobs
        self.delegations = delegations
        #: lives already settled here: (name, epoch, state) — a dead name that comes
        #: back and dies again is a new life, looked at again
        self._settled: set[tuple[str, int, str]] = set()
        self._task: asyncio.Task[None] | None = None
        #: a stopping instance handed messages over (set again for each wake-up)
        self._handed_over = asyncio.Event()
        self._taking: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._task = asyncio.create_task(self._every_third_of_a_lease(), name="takeover")
        # (also heard when the listener was made again: something may have been missed)
        self.outbox.db.listen(INBOUND_CHANNEL, lambda _payload: self._handed_over.set())
        self._taking = asyncio.create_task(self._take_handed_over(), name="takeover-inbound")

    async def stop(self) -> None:
        for task in (self._task, self._taking):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        self._task = self._taking = None

    async def _take_handed_over(self) -> None:
        """Answer what a stopping instance handed over, in its conversations' lanes."""
        while True:
            await self._handed_over.wait()
            self._handed_over.clear()
            if not (self.instance.alive and self.runner.accepting):
                continue  # this one is stopping too, or fenced: another takes them
            try:
                await self.runner.replay()
            except StoreClosed:
                return
            except Exception:  # the sweep, or the next wake-up, takes them
                log.exception("handed_over_messages_not_taken")

    async def _every_third_of_a_lease(self) -> None:
        while True:
            await asyncio.sleep(self.instance.lease_seconds / 3)
            try:
                await self.sweep()
            except StoreClosed:
                return
            except Exception:  # the next round tries again
                log.exception("takeover_failed")

    async def sweep(self) -> dict[str, int]:
        """Settle what lives that are over left, when there is a new one; counts."""
        if not self.instance.alive:
            return {}
        db = self.outbox.db
        now = await store_now(db)
        over = {(i.name, i.epoch, i.state(now)) for i in await list_instances(db)
                if i.name != self.instance.name and i.state(now) != "live"}
        new = over - self._settled
        if not new:
            return {}
        delivered, requeued = await self.outbox.reconcile_claimed()
        replayed = await self.runner.replay()
        delegations = await self.delegations.recover()
        dead = sorted({name for name, _, state in new if state == "expired"})
        jobs = await report_lost(self.jobs, dead)
        self._settled |= new
        counts = {"notices_delivered": delivered, "notices_requeued": requeued,
                  "messages_replayed": replayed, "delegations_lost": delegations,
                  "jobs_lost": jobs}
        if any(counts.values()):
            log.warning("instance_work_taken_over", instances=sorted(f"{n}:{e}" for n, e, _
                                                                     in new), **counts)
        return counts
