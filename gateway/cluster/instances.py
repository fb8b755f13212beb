"""Instances sharing one store, and the single connections one of them holds at a time.

Several Homing instances may share one PostgreSQL store (issue 21). Each is an
:class:`Instance`: a row in ``instances`` under its configured name, taken at start with
the next *epoch* (one more than that name's previous life), and a lease it renews every
third of ``cluster.lease_seconds``. An instance that has not renewed by the time its
lease runs out stops counting itself alive (:attr:`Instance.alive`): it fences itself.
What it does for the cluster — polling, taking over a dead life's work — asks that
first, and what a survivor could do for it too — posting to a chat, beginning a
message's turn, starting a job or a delegation — waits in :meth:`Instance.until_alive`
for the renewal or the end; so by the time a survivor may act on the expiry, the
instance has stopped acting on its own. Once the store says the lease ran out, or
another process started under the same name, that life is over for good and does not
come back by itself (a survivor may already have taken over its work): the daemon starts
again, under a new epoch.

A :class:`Lease` is a resource only one instance may use at a time: a Telegram token's
``getUpdates`` poller (``telegram:<bot id>``), a Discord bot's gateway session
(``discord:<application id>``). It is taken with one conditional upsert (when it is
free, run out, or already ours), renewed in the same transaction as its holder's
instance lease and never outliving it, and released on a clean stop. :meth:`Lease.watch`
keeps trying and says when the lease was won and lost, so a survivor takes over just
after a dead holder's lease has run out — within ``cluster.failover_seconds`` of its
death.

Leases are counted in the store's clock (see gateway/cluster/rows.py, which holds the
rows and statements). The local half of self-fencing uses the monotonic clock only: an
instance counts its lease from before it asked for the renewal, which is never later
than the store's count, so it stops acting before anyone else may start.

Renewals do not go through the store's write queue, nor wait for the event loop: a
thread of their own asks the store on a connection of its own and publishes the new
deadline (gateway/cluster/renewal.py), so neither a batch of writes ahead in the queue
nor a loop busy with a long step lets a lease run out while the process is well. The
statements need no more than their own row's lock (gateway/cluster/rows.py). What the
renewing thread and the loop share — the deadlines, why the life ended — is written
under :attr:`Instance._lock`; everything else stays on the loop.
"""

from __future__ import annotations

import asyncio
import functools
import os
import socket
import sqlite3
import threading
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, NamedTuple

import psycopg
import structlog

import gateway.cluster.rows as rows
from gateway.cluster.lives import Life, claimer_name
from gateway.cluster.renewal import LeaseRenewer, RenewalLink, renewal_link
from gateway.cluster.rows import LeaseRecord, Renewal
from gateway.store.group_commit import StoreClosed

if TYPE_CHECKING:
    from gateway.cluster.rows import Store
    from gateway.config.settings import Config

__all__ = ["Acquired", "Instance", "Lease"]

log = structlog.get_logger(__name__)

#: what a store raises when it cannot be reached or written for now (closed is final)
STORE_ERRORS = (sqlite3.Error, psycopg.Error, OSError)


class Acquired(NamedTuple):
    """What :meth:`Lease.try_acquire` found: whether this instance holds the lease now,
    and the lease's epoch (this tenure's when held; else the holder's, 0 if never held)."""

    held: bool
    epoch: int


class Instance:
    """This daemon's life among the instances sharing the store; see the module's story.

    ``start`` takes the row with the next epoch and starts renewing; ``stop`` stops
    every lease made for it (their ``on_lost`` first, then the release), stops renewing
    and marks the row stopped, so nothing waits for an expiry after a clean stop."""

    def __init__(self, db: Store, name: str, *, lease_seconds: float,
                 host: str | None = None, pid: int | None = None) -> None:
        if lease_seconds <= 0:
            raise ValueError(f"lease_seconds must be positive, not {lease_seconds}")
        self.db = db
        self.name = name
        self.lease_seconds = lease_seconds
        self.host = host if host is not None else socket.gethostname()
        self.pid = pid if pid is not None else os.getpid()
        self._epoch: int | None = None
        #: what the renewing thread writes and the loop reads (the deadlines, _ended)
        self._lock = threading.Lock()
        self._deadline = 0.0  # monotonic: the lease is ours until then, by our own count
        #: monotonic: by then the store's count has run out too (a lease after the last
        #: renewal came back: it committed before that)
        self._surely_over = 0.0
        self._ended: str | None = None
        self._ended_event = asyncio.Event()
        self._stopping = False
        self._wake = asyncio.Event()  # the watch on the count: a stop, or renew now
        self._heard = asyncio.Event()  # set at each renewal, at the end and at stop
        self._loop: asyncio.AbstractEventLoop | None = None
        self._link: RenewalLink | None = None
        self._renewer: LeaseRenewer | None = None
        self._watchdog: asyncio.Task[None] | None = None
        self._leases: list[Lease] = []
        self._log = log.bind(instance=name)

    @classmethod
    def from_config(cls, db: Store, config: Config) -> Instance:
        return cls(db, config.instance.name, lease_seconds=config.cluster.lease_seconds)

    # what the rest asks -------------------------------------------------------------

    @property
    def epoch(self) -> int:
        """This life's epoch (from ``start``)."""
        if self._epoch is None:
            raise RuntimeError(f"instance {self.name} is not started")
        return self._epoch

    @property
    def alive(self) -> bool:
        """Whether this instance may act for the cluster now: started, not stopped, and
        its lease not run out by its own count. False once a renewal is overdue."""
        return (self._epoch is not None and self._ended is None and not self._stopping
                and time.monotonic() < self._deadline)

    @property
    def seconds_left(self) -> float:
        """How long the lease lasts by this instance's count without another renewal."""
        return self._deadline - time.monotonic() if self.alive else 0.0

    @property
    def life(self) -> Life:
        """This life, for the parts that take work on (once started: its epoch)."""
        return Life(name=claimer_name((self.name, self.epoch)), instance=self.name,
                    acting=self.until_alive, over=lambda: self.ended is not None)

    @property
    def ended(self) -> str | None:
        """Why this life is over for good (superseded, run out in the store, the store
        closed), or None."""
        return self._ended

    async def until_alive(self) -> bool:
        """Before this life acts where a survivor could act too (posts a reply, starts a
        job): True once it is :attr:`alive`, False once it never will be again. A life
        whose renewal is overdue — the process stalled, the store was slow — waits here
        for the renewal or for the end, so after a stall it does not answer a message a
        survivor has taken over. (A send already under way as the lease runs out still
        goes: no platform can be told to refuse it.)"""
        while not self.alive:
            if self._epoch is None or self._ended is not None or self._stopping:
                return False
            self._heard.clear()
            try:
                await asyncio.wait_for(self._heard.wait(),
                                       self._surely_over - time.monotonic())
            except TimeoutError:
                if time.monotonic() >= self._surely_over:  # (not renewed meanwhile)
                    self._ran_out_unheard()
        return True

    async def wait_ended(self) -> str:
        """Wait until this life is over for good (not at a clean stop); say why."""
        await self._ended_event.wait()
        assert self._ended is not None
        return self._ended

    # lifecycle ----------------------------------------------------------------------

    async def start(self) -> None:
        """Take the row with the next epoch and start renewing. One object is one life:
        to rejoin after :attr:`ended`, start a new Instance."""
        if self._epoch is not None:
            raise RuntimeError(f"instance {self.name} was already started")
        link = renewal_link(self.db, self.lease_seconds)
        await asyncio.to_thread(link.open)  # before the lease counts
        asked = time.monotonic()
        try:
            epoch, previous, now = await self.db.write(functools.partial(
                rows.register, name=self.name, host=self.host, pid=self.pid,
                lease_seconds=self.lease_seconds))
        except BaseException:
            link.close()
            raise
        with self._lock:
            self._epoch, self._deadline = epoch, asked + self.lease_seconds
            self._surely_over = time.monotonic() + self.lease_seconds
        self._log = self._log.bind(epoch=epoch)
        if previous is not None and previous.state(now) == "live":
            # a crash and a quick restart look the same; the other life, if there is one,
            # ends at its next renewal (it finds the epoch moved on)
            self._log.warning("instance_name_was_live", previous_epoch=previous.epoch,
                              previous_host=previous.host, previous_pid=previous.pid)
        self._log.info("instance_started", host=self.host, pid=self.pid,
                       lease_seconds=self.lease_seconds)
        self._loop = asyncio.get_running_loop()
        self._link = link
        self._renewer = LeaseRenewer(self.name, self.lease_seconds, renew=self._renew,
                                     surely_over=lambda: self._surely_over,
                                     ran_out=self._ran_out_unheard, first_ask=asked)
        self._renewer.start()
        self._watchdog = asyncio.create_task(self._watch_the_count(),
                                             name=f"instance-lease:{self.name}")

    async def stop(self) -> None:
        if self._epoch is None or self._stopping:
            return
        for lease in list(self._leases):
            await lease.stop()
        self._stopping = True
        self._wake.set()
        self._heard.set()
        if self._watchdog is not None:
            await asyncio.gather(self._watchdog, return_exceptions=True)
            self._watchdog = None
        renewer, self._renewer = self._renewer, None
        # a renewal under way is bounded by the lease: once the thread has ended, none
        # can land after the row is marked stopped
        if renewer is not None and not await asyncio.to_thread(
                renewer.stop, self.lease_seconds + 5):
            self._log.warning("instance_lease_renewer_still_running",
                              note="a renewal hangs; it ends with the lease")
        elif self._link is not None:
            self._link.close()
        if self._ended is None:
            try:
                await self.db.write(functools.partial(rows.mark_stopped, name=self.name,
                                                      epoch=self.epoch))
            except (StoreClosed, *STORE_ERRORS) as exc:
                self._log.warning("instance_stop_not_recorded", error=str(exc),
                                  note="its lease runs out by itself")
                return
        self._log.info("instance_stopped")

    async def __aenter__(self) -> Instance:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # renewing (in the renewer's thread, but _watch_the_count) ----------------------

    def _renew(self, within: float) -> bool:
        """One renewal on the renewal link, within ``within`` seconds; the deadlines
        published here, the rest told to the loop. True when this life is over."""
        assert self._link is not None
        held = [(lease, lease.epoch) for lease in tuple(self._leases)
                if lease.epoch is not None]
        asked = time.monotonic()
        renewal = self._link.renew(self.name, self.epoch, self.lease_seconds,
                                   [(lease.name, epoch) for lease, epoch in held], within)
        if self._stopping:
            return True
        if renewal.ended is not None:
            self._end(renewal.ended)
            return True
        lost = set(renewal.lost)
        with self._lock:
            if self._ended is not None:  # the count ran out while the answer was on its way
                return True
            self._deadline = asked + self.lease_seconds
            self._surely_over = time.monotonic() + self.lease_seconds
            for lease, epoch in held:
                if (lease.name, epoch) not in lost:
                    lease._renewed(epoch, self._deadline)
        self._in_loop(self._heard_renewal, renewal, held)
        return False

    def _heard_renewal(self, renewal: Renewal, held: list[tuple[Lease, int | None]]
                       ) -> None:
        """In the loop: what waits for a renewal hears of it; a lease it found taken by
        another instance is let go."""
        self._heard.set()
        for lease, epoch in held:
            if epoch is not None and (lease.name, epoch) in set(renewal.lost):
                lease._lose(epoch)

    async def _watch_the_count(self) -> None:
        """In the loop: end this life once the store's count has surely run out without
        a renewal heard, whatever the renewing thread is waiting for."""
        while not self._stopping and self._ended is None:
            left = self._surely_over - time.monotonic()
            if left <= 0:
                self._ran_out_unheard()
                return
            woken = await _pause(self._wake, left)
            if woken and not self._stopping and self._renewer is not None:
                self._renewer.renew_now()

    def _ran_out_unheard(self) -> None:
        """A lease after the last renewal came back, the store's count has run out too:
        this life is over, whether the store is slow, out of reach or says so later."""
        self._end("its lease ran out before a renewal got through to the store")

    def _end(self, why: str) -> None:
        """This life is over (from either thread); the loop is told."""
        with self._lock:
            if self._ended is not None:
                return
            self._ended = why
        self._in_loop(self._tell_ended, why)

    def _tell_ended(self, why: str) -> None:
        self._ended_event.set()
        self._heard.set()
        self._log.error("instance_fenced", reason=why,
                        note="this instance takes no more part; restart it to rejoin")
        for lease in self._leases:
            lease._wake.set()

    def _in_loop(self, callback: Callable[..., None], *args: object) -> None:
        loop = self._loop
        if loop is None:
            return
        try:
            loop.call_soon_threadsafe(callback, *args)
        except RuntimeError:  # the loop is closed: nobody is left to tell
            pass


class Lease:
    """One resource that one instance at a time may use (``telegram:<bot id>``).

    Either ask :meth:`try_acquire` and :meth:`release` yourself, or let :meth:`watch`
    do it and be told. While held it is renewed with the instance; :attr:`held` turns
    False as soon as the instance's own count says the lease may have run out."""

    def __init__(self, instance: Instance, name: str) -> None:
        if not name or len(name) > 200:
            raise ValueError(f"a lease name is 1 to 200 characters, not {name!r}")
        self.instance = instance
        self.name = name
        self._epoch: int | None = None  # this tenure's lease epoch while we hold it
        self._deadline = 0.0  # monotonic: held until then without a renewal
        self._retry_in = 0.0  # store seconds until the other holder's lease runs out
        self._stopping = False
        self._wake = asyncio.Event()  # the watch on the count: a stop, or renew now
        self._watcher: asyncio.Task[None] | None = None
        self._log = log.bind(instance=instance.name, lease=name)
        instance._leases.append(self)  # renewed with it, stopped with it

    @property
    def epoch(self) -> int | None:
        """This tenure's epoch while this instance holds the lease (by its last word)."""
        return self._epoch

    @property
    def held(self) -> bool:
        """Whether this instance may use the resource now."""
        return (self._epoch is not None and self.instance.alive
                and time.monotonic() < self._deadline)

    async def try_acquire(self) -> Acquired:
        """Take the lease when it is free, run out or already ours (one conditional
        upsert); an instance that is not alive takes nothing."""
        instance = self.instance
        if not instance.alive:
            record = await self.record()
            return Acquired(False, record.epoch if record is not None else 0)
        # the lease ends with the instance's: the instance's count is the lease's
        deadline = instance._deadline
        held, epoch, self._retry_in = await instance.db.write(functools.partial(
            rows.acquire, lease=self.name, name=instance.name, epoch=instance.epoch))
        if not held:
            if self._epoch is not None:
                self._lose(self._epoch)
            return Acquired(False, epoch)
        if self._epoch != epoch:
            self._log.info("lease_acquired", epoch=epoch)
        with instance._lock:  # (the renewing thread extends it)
            self._epoch, self._deadline = epoch, deadline
        return Acquired(True, epoch)

    async def release(self) -> None:
        """Let go at once, so another instance need not wait for an expiry."""
        epoch, self._epoch = self._epoch, None
        if epoch is None:
            return
        instance = self.instance
        await instance.db.write(functools.partial(
            rows.release, lease=self.name, name=instance.name, epoch=instance.epoch,
            lease_epoch=epoch))
        self._log.info("lease_released", epoch=epoch)

    async def holder(self) -> LeaseRecord | None:
        """Who holds the lease now (None: nobody; a run-out lease is nobody's)."""
        now = await rows.store_now(self.instance.db)
        record = await self.record()
        return record if record is not None and record.held(now) else None

    async def record(self) -> LeaseRecord | None:
        """The lease's row as it stands, run out or not."""
        return await rows.lease_record(self.instance.db, self.name)

    # watching -----------------------------------------------------------------------

    def watch(self, on_acquired: Callable[[int], Awaitable[None]],
              on_lost: Callable[[], Awaitable[None]]) -> None:
        """Keep trying for the lease (every third of the lease, and just after the
        holder's runs out); ``on_acquired(epoch)`` once won, ``on_lost()`` once it may
        have run out, been taken, or at :meth:`stop`: stop using the resource there.
        If ``on_acquired`` raises, the lease is let go for another instance to try."""
        if self._watcher is not None:
            raise RuntimeError(f"lease {self.name} is already watched")
        self._watcher = asyncio.create_task(self._watch(on_acquired, on_lost),
                                            name=f"lease:{self.name}")

    async def stop(self) -> None:
        """Stop watching (``on_lost`` first, if it was held) and release the lease."""
        self._stopping = True
        self._wake.set()
        if self._watcher is not None:
            await asyncio.gather(self._watcher, return_exceptions=True)
            self._watcher = None
        await self._release_or_let_run_out()

    async def _watch(self, on_acquired: Callable[[int], Awaitable[None]],
                     on_lost: Callable[[], Awaitable[None]]) -> None:
        interval = self.instance.lease_seconds / 3
        using = False
        while not self._stopping:
            if using and not self.held:
                using = False
                self._log.warning("lease_lost", note="stopping its use")
                await self._tell_lost(on_lost)
            if not using and self.instance.alive:
                using = await self._take(on_acquired)
            if using:
                pause = min(interval, self._deadline - time.monotonic())
            elif self.instance.alive:  # again just after the holder's lease would run out
                pause = min(interval, max(0.0, self._retry_in) + interval / 10)
            else:
                pause = interval
            await _pause(self._wake, pause)
        if using:
            await self._tell_lost(on_lost)

    async def _take(self, on_acquired: Callable[[int], Awaitable[None]]) -> bool:
        try:
            acquired = await self.try_acquire()
        except StoreClosed:
            self._stopping = True
            return False
        except STORE_ERRORS as exc:
            self._log.warning("lease_acquire_failed", error=str(exc))
            self._retry_in = self.instance.lease_seconds / 3
            return False
        if not acquired.held:
            return False
        try:
            await on_acquired(acquired.epoch)
        except Exception:  # it could not start using it: let another instance try
            self._log.exception("lease_on_acquired_failed", epoch=acquired.epoch)
            await self._release_or_let_run_out()
            self._retry_in = self.instance.lease_seconds / 3
            return False
        return True

    async def _tell_lost(self, on_lost: Callable[[], Awaitable[None]]) -> None:
        try:
            await on_lost()
        except Exception:  # the watch goes on: the lease is already not ours
            self._log.exception("lease_on_lost_failed")

    async def _release_or_let_run_out(self) -> None:
        try:
            await self.release()
        except (StoreClosed, *STORE_ERRORS) as exc:
            self._log.warning("lease_release_failed", error=str(exc),
                              note="it runs out by itself")

    # told by the instance -----------------------------------------------------------

    def _renewed(self, epoch: int, deadline: float) -> None:
        """(In the renewing thread, under the instance's lock.)"""
        if self._epoch == epoch:
            self._deadline = deadline

    def _lose(self, epoch: int) -> None:
        if self._epoch == epoch:
            self._epoch = None
            self._log.warning("lease_taken", epoch=epoch, reason="another instance holds it")
            self._wake.set()


async def _pause(wake: asyncio.Event, seconds: float) -> bool:
    """Sleep up to ``seconds``, less if woken; True when woken. The wake-up is cleared
    after the sleep, so one given while the caller was busy elsewhere (a stop, a lost
    lease) is not missed."""
    woken = True
    try:
        async with asyncio.timeout(max(0.0, seconds)):
            await wake.wait()
    except TimeoutError:
        woken = wake.is_set()
    wake.clear()
    return woken
