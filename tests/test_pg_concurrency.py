"""Write transactions of two instances side by side on PostgreSQL, without a lock for
every write: what reads, decides and then writes locks what it reads, and a life and
the survivor taking its work over meet at the life's row in ``instances``.

Each test runs two stores on one database (two instances), their write transactions
really concurrent at the server (``gateway.store.postgres._run_batch`` takes no
cluster-wide write lock since issue 35). The interleaving that would go wrong is
forced, not hoped for: a transaction stops after its read (a ``threading`` wait in
the writer thread) until the other has read too — or until PostgreSQL makes one of
them wait for a lock, which is the fix at work.
"""

from __future__ import annotations

import asyncio
import functools
import os
import signal
import threading
import time
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

import psycopg
import pytest

import tools.delegation
import tools.jobs
from gateway.cluster import rows
from gateway.cluster.lives import Life, LifeOver, claimer_name, instance_life
from gateway.cluster.rows import lock_instance, store_now
from gateway.delivery.outbox import Outbox
from gateway.messages.pairing import Pairing, PairingError, PairingRequest
from gateway.sessions.store import SessionStore
from gateway.store.postgres import PgConnection
from gateway.words.return_address import ReturnAddress
from gateway.words.route import Route
from tests.conftest import make_config
from tools.delegation import DelegationManager
from tools.job_takeover import report_lost
from tools.jobs import JobManager

TOPIC = Route("memory", "group", "-100", thread_id="42", user_id="1")
KEY = "agent:main:memory:group:-100:42"
#: seconds a dying life still counts live: its write must find it live within them (a
#: loaded machine's stall is far shorter), the survivor waits them out
MARGIN = 2.0
DEADLINE = 30.0  # a generous bound for a wait, never a measured time


@pytest.fixture
async def two_instances(pg_fresh_url: str
                        ) -> AsyncIterator[tuple[SessionStore, SessionStore]]:
    """Two stores on one database, as two instances have."""
    async with SessionStore(pg_fresh_url) as a, SessionStore(pg_fresh_url) as b:
        yield a, b


def waiting_for_a_lock(url: str) -> bool:
    """Whether some transaction on the database waits for another's lock (a row's, a
    key's)."""
    with psycopg.connect(url, autocommit=True) as watcher:
        row = watcher.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND wait_event_type = 'Lock'").fetchone()
    return row is not None and row[0] > 0


def hold_until(url: str, *done: threading.Event) -> None:
    """In a writer thread, inside its transaction: go on once another transaction waits
    for a lock this one holds, or once one of ``done`` is set."""
    deadline = time.monotonic() + DEADLINE
    while not any(event.is_set() for event in done) and not waiting_for_a_lock(url):
        if time.monotonic() > deadline:
            raise AssertionError("the other transaction neither waited nor finished")
        time.sleep(0.01)


class Meeting:
    """Transactions that stop after a read until each of them has read — or until one
    waits for another's lock (then the lock decides who reads first)."""

    def __init__(self, url: str, parties: int = 2) -> None:
        self.url = url
        self.parties = parties
        self.arrived = 0
        self._lock = threading.Lock()
        self.everyone = threading.Event()

    def arrive(self) -> None:
        with self._lock:
            self.arrived += 1
            if self.arrived >= self.parties:
                self.everyone.set()
        hold_until(self.url, self.everyone)


def meet_after(monkeypatch: pytest.MonkeyPatch, meeting: Meeting, read: str) -> None:
    """Each transaction stops at ``meeting`` after its statement containing ``read``."""
    original = PgConnection.execute

    def execute(self: PgConnection, sql: str, params: Sequence[Any] = (), /
                ) -> psycopg.Cursor[Any]:
        cursor = original(self, sql, params)
        if read in sql:
            meeting.arrive()
        return cursor

    monkeypatch.setattr(PgConnection, "execute", execute)


async def dying_life(store: SessionStore, name: str) -> tuple[Life, float]:
    """A life of ``name`` that renews no more: live for ``MARGIN`` more seconds. The
    life, and when its lease runs out by the store's clock."""
    epoch, _, now = await store.db.write(functools.partial(
        rows.register, name=name, host="test", pid=os.getpid(), lease_seconds=MARGIN))
    return Life(name=claimer_name((name, epoch)), instance=name), now + MARGIN


async def past(store: SessionStore, moment: float) -> None:
    """Wait until the store's clock has passed ``moment``."""
    deadline = time.monotonic() + DEADLINE
    while await store_now(store.db) <= moment:
        assert time.monotonic() < deadline, "the store's clock stood still"
        await asyncio.sleep(0.05)


class StopAfterTheCheck:
    """Stands in for a module's ``still_live_here``: the real check, then the write
    transaction stops until the survivor waits for its lock (or has finished)."""

    def __init__(self, real: Callable[..., None], url: str) -> None:
        self.real = real
        self.url = url
        self.checked = threading.Event()
        self.found_live = False
        self.survivor_done = threading.Event()

    def __call__(self, conn: Any, claimer: str | None, what: str) -> None:
        try:
            self.real(conn, claimer, what)
            self.found_live = True
        finally:
            self.checked.set()
        hold_until(self.url, self.survivor_done)

    async def until_checked(self) -> None:
        assert await asyncio.to_thread(self.checked.wait, DEADLINE), "the life never checked"
        assert self.found_live, (f"the life was over before its check (a stall of more than "
                                 f"{MARGIN} s): the race was not run")


# the fence: a life's write against a survivor taking its work over ------------------------

async def test_a_delegation_begun_as_its_life_ends_is_reported_lost_by_the_survivor(
        two_instances: tuple[SessionStore, SessionStore], pg_fresh_url: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """vps1 finds itself live and registers a delegation; before it commits, its lease
    runs out and vps2 takes over what it left. vps2 must see that delegation (it waits
    for vps1's write) — never leave it running for a life that is over."""
    here, there = two_instances
    life, runs_out = await dying_life(here, "vps1")
    stop = StopAfterTheCheck(tools.delegation.still_live_here, pg_fresh_url)
    monkeypatch.setattr(tools.delegation, "still_live_here", stop)
    forever = asyncio.Event()

    async def subagent(task: str) -> str:
        await forever.wait()
        return "never"

    session = await here.get_or_create(KEY, TOPIC)
    mine = DelegationManager(here.db, Outbox(here.db), here, subagent, life=life)
    survivor = DelegationManager(there.db, Outbox(there.db), there, subagent,
                                 life=Life(name=claimer_name(("vps2", 1)), instance="vps2"))
    try:
        begun = asyncio.create_task(mine.delegate("summarise", ReturnAddress(KEY, session.id,
                                                                             TOPIC)))
        await stop.until_checked()
        await past(there, runs_out)
        try:
            lost = await survivor.recover()
        finally:
            stop.survivor_done.set()
        record = await begun
        assert lost == 1, "the survivor missed the delegation the life wrote as it ended"
        assert (await survivor.get(record.id)).state == "lost"  # type: ignore[union-attr]
        (notice,) = await survivor.outbox.list()
        assert notice.job_id == record.id and "was lost" in notice.text
        # and what the life begins from now on, it does not begin
        with pytest.raises(LifeOver):
            await mine.delegate("again", ReturnAddress(KEY, session.id, TOPIC))
    finally:
        await mine.shutdown()


async def test_a_job_registered_as_its_instance_dies_is_reported_lost_by_the_survivor(
        two_instances: tuple[SessionStore, SessionStore], pg_fresh_url: str,
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The same race for a job: vps1 registers it as its lease runs out, vps2 reports
    vps1's running jobs lost. The job vps1 committed is among them."""
    here, there = two_instances
    life, runs_out = await dying_life(here, "vps1")
    stop = StopAfterTheCheck(tools.jobs.still_live_here, pg_fresh_url)
    monkeypatch.setattr(tools.jobs, "still_live_here", stop)
    session = await here.get_or_create(KEY, TOPIC)
    mine = JobManager(here.db, Outbox(here.db), make_config(tmp_path / "vps1"), life=life)
    survivor = JobManager(there.db, Outbox(there.db), make_config(tmp_path / "vps2"))
    started = asyncio.create_task(mine.start("sleep 30", ReturnAddress(KEY, session.id, TOPIC),
                                             cwd=tmp_path))
    try:
        await stop.until_checked()
        await past(there, runs_out)
        try:
            lost = await report_lost(survivor, ["vps1"])
        finally:
            stop.survivor_done.set()
        record = await started
        assert lost == 1, "the survivor missed the job the instance registered as it died"
        assert (await survivor.get(record.id)).state == "lost"  # type: ignore[union-attr]
        (notice,) = await survivor.outbox.list()
        assert notice.job_id == record.id
    finally:
        stop.survivor_done.set()
        await asyncio.wait({started}, timeout=DEADLINE)
        await mine.detach()
        if started.done() and not started.cancelled() and started.exception() is None:
            pid = started.result().pid
            if pid is not None:
                os.killpg(pid, signal.SIGKILL)


async def test_the_clock_of_a_decision_about_a_life_is_read_after_its_lock(
        two_instances: tuple[SessionStore, SessionStore], pg_fresh_url: str) -> None:
    """A life that waited for a survivor's lock on its row must judge itself by the
    time after that wait (when the survivor found it over), not by the time it asked."""
    here, _ = two_instances
    await dying_life(here, "vps1")
    asked = threading.Event()

    def life_asks(conn: PgConnection) -> float:
        asked.set()
        return lock_instance(conn, "vps1", exclusive=False)[1]

    with psycopg.connect(pg_fresh_url) as survivor:  # (a transaction, until the commit)
        survivor.execute("SELECT name FROM instances WHERE name = 'vps1' FOR UPDATE")
        deciding = asyncio.create_task(here.db.write(life_asks))
        assert await asyncio.to_thread(asked.wait, DEADLINE)
        await asyncio.to_thread(hold_until, pg_fresh_url)
        await asyncio.sleep(0.3)  # the survivor takes its time
        (released,) = survivor.execute(
            "SELECT CAST(EXTRACT(EPOCH FROM clock_timestamp()) AS DOUBLE PRECISION)"
        ).fetchone() or (0.0,)
        survivor.commit()
    assert await deciding >= released


async def test_a_renewal_that_waited_for_a_survivor_does_not_bring_its_life_back(
        two_instances: tuple[SessionStore, SessionStore], pg_fresh_url: str) -> None:
    """A renewal asked while the lease was live, that had to wait for a survivor holding
    the row until after the lease ran out, finds the life over: renewing it then would
    bring back a life whose work the survivor has taken."""
    here, _ = two_instances
    life, runs_out = await dying_life(here, "vps1")
    name_epoch = instance_life(life.name or "")
    assert name_epoch is not None
    with psycopg.connect(pg_fresh_url) as survivor:  # (a transaction, until the commit)
        survivor.execute("SELECT name FROM instances WHERE name = 'vps1' FOR UPDATE")
        renewing = asyncio.create_task(here.db.write(functools.partial(
            rows.renew, name="vps1", epoch=name_epoch[1], lease_seconds=60.0, held=[])))
        await asyncio.to_thread(hold_until, pg_fresh_url)
        await past(here, runs_out)
        survivor.commit()
    renewal = await renewing
    assert renewal.ended is not None and "lease ran out" in renewal.ended
    (expires,) = await here.db.fetchone(
        "SELECT lease_expires_at FROM instances WHERE name = 'vps1'")
    assert expires == pytest.approx(runs_out)


# read, decide, write: decided once ---------------------------------------------------------

async def test_a_pairing_code_approved_on_two_instances_at_once_is_approved_once(
        two_instances: tuple[SessionStore, SessionStore], pg_fresh_url: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    here, there = two_instances
    request = await Pairing(here.db).request("telegram", "42", "ann")
    assert request is not None
    meet_after(monkeypatch, Meeting(pg_fresh_url), "FROM pairing_codes WHERE code = ?")
    answers = await asyncio.gather(Pairing(here.db).approve("telegram", request.code),
                                   Pairing(there.db).approve("telegram", request.code),
                                   return_exceptions=True)
    approved = [a for a in answers if isinstance(a, PairingRequest)]
    refused = [a for a in answers if isinstance(a, PairingError)]
    assert len(approved) == 1 and len(refused) == 1, answers
    assert "already approved" in str(refused[0])


async def test_one_user_asking_on_two_instances_at_once_gets_one_code(
        two_instances: tuple[SessionStore, SessionStore], pg_fresh_url: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    here, there = two_instances
    meet_after(monkeypatch, Meeting(pg_fresh_url), "FROM pairing_codes WHERE platform = ? "
                                                   "AND user_id = ?")
    answers = await asyncio.gather(Pairing(here.db).request("telegram", "42", "ann"),
                                   Pairing(there.db).request("telegram", "42", "ann"))
    assert len([a for a in answers if a is not None]) == 1, answers  # the other: sent already
    assert len(await Pairing(here.db).pending()) == 1
