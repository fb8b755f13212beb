"""An instance's lease is renewed while its process is well but busy: the event loop held
by a long step, or the store's write queue held by a long batch (gateway/cluster/renewal.py).
A busy instance must not fence itself, nor let another instance take its lease over.

Each stall starts just before a renewal is due and lasts most of a lease: longer than the
renewal interval, shorter than the lease. Waits are for events, with generous deadlines."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gateway.cluster.instances import Instance, Lease
from gateway.cluster.rows import list_instances
from tests.helpers import eventually, eventually_async, write_lock_held
from tests.test_cluster import DEADLINE, Cluster, Told, renewals

#: long enough that a loaded machine's own pauses stay well inside it
LEASE = 4.0
#: most of a lease: past two renewals due, short of the lease
STALL = 0.8 * LEASE


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "state.db")
    url: str = request.getfixturevalue("pg_fresh_url")
    return url


@pytest.fixture
async def cluster(store_url: str) -> AsyncIterator[Cluster]:
    c = Cluster(store_url)
    try:
        yield c
    finally:
        await c.close()


async def holding(cluster: Cluster) -> tuple[Instance, Lease, Told, Told]:
    """``busy`` holding ``telegram:1`` and ``other`` watching it, both steady."""
    busy = await cluster.instance("busy", lease_seconds=LEASE)
    other = await cluster.instance("other", lease_seconds=LEASE)
    told_busy, told_other = Told(), Told()
    lease = Lease(busy, "telegram:1")
    lease.watch(told_busy.acquired, told_busy.lost)
    await eventually(lambda: told_busy.holding, DEADLINE, "busy holding the lease")
    Lease(other, "telegram:1").watch(told_other.acquired, told_other.lost)
    return busy, lease, told_busy, told_other


async def just_before_a_renewal(instance: Instance) -> None:
    """Right after a renewal reached the store, wait until the next one is nearly due."""
    await renewals(instance, 1)
    await asyncio.sleep(0.9 * LEASE / 3)


async def still_the_holder(busy: Instance, lease: Lease, told_busy: Told,
                           told_other: Told) -> None:
    assert busy.alive and busy.ended is None
    assert lease.held
    await renewals(busy, 2)  # it goes on renewing, and nobody took over meanwhile
    assert busy.ended is None and busy.alive and lease.held
    assert told_busy.events == [("acquired", 1)]  # never told to stop polling
    assert told_other.events == []
    (row,) = [r for r in await list_instances(busy.db) if r.name == busy.name]
    assert row.epoch == busy.epoch and row.state(time.time()) == "live"


async def test_an_instance_whose_loop_is_blocked_for_most_of_a_lease_stays_the_holder(
        cluster: Cluster) -> None:
    busy, lease, told_busy, told_other = await holding(cluster)
    await just_before_a_renewal(busy)
    time.sleep(STALL)  # noqa: ASYNC251 (a long step that never yields: the loop waits)
    alive_after_the_stall = busy.alive
    assert alive_after_the_stall, "the busy instance fenced itself"
    await still_the_holder(busy, lease, told_busy, told_other)


async def test_an_instance_whose_write_queue_is_held_by_a_long_batch_stays_the_holder(
        pg_fresh_url: str) -> None:
    """On PostgreSQL writes run side by side: a batch that takes most of a lease holds
    the store's write queue, not the instance's row (on SQLite every write takes the
    file's one write lock, the renewal's too)."""
    cluster = Cluster(pg_fresh_url)
    try:
        busy, lease, told_busy, told_other = await holding(cluster)
        await just_before_a_renewal(busy)
        batch = asyncio.ensure_future(busy.db.write(
            [("SELECT pg_sleep(?)", (STALL,))]))  # everything queued behind it waits
        writes_behind = [busy.db.write([("SELECT 1", ())]) for _ in range(20)]
        await asyncio.wait_for(asyncio.gather(batch, *writes_behind), DEADLINE)
        assert busy.alive and busy.ended is None, "the busy instance fenced itself"
        await still_the_holder(busy, lease, told_busy, told_other)
    finally:
        await cluster.close()


async def test_a_blocked_loop_still_ends_a_life_whose_lease_ran_out_meanwhile(
        cluster: Cluster) -> None:
    """Self-fencing stays: a stall longer than the lease, with the renewals unable to get
    through, leaves an instance that does not count itself alive, and never comes back."""
    busy, lease, told_busy, _ = await holding(cluster)
    async with write_lock_held(cluster.url):  # no renewal gets through
        time.sleep(LEASE * 1.2)  # noqa: ASYNC251 (the loop held past the lease)
        assert not busy.alive and not lease.held
        reason = await asyncio.wait_for(busy.wait_ended(), DEADLINE)
    assert "ran out" in reason
    await eventually(lambda: told_busy.events == [("acquired", 1), ("lost", None)], DEADLINE,
                     "the watch told to stop using the lease")
    await asyncio.sleep(LEASE / 3)
    assert not busy.alive and busy.ended == reason
    await eventually_async(lambda: _expired(busy), DEADLINE, "busy's lease run out")


async def _expired(instance: Instance) -> bool:
    (row,) = [r for r in await list_instances(instance.db) if r.name == instance.name]
    return row.state(time.time()) == "expired"


async def test_a_lease_moved_to_another_holder_is_let_go_at_the_next_renewal(
        cluster: Cluster) -> None:
    """The renewal extends the leases held in its own transaction, and says which it no
    longer holds (an operator moved it, a survivor took it): the watch is told to stop."""
    busy, lease, told_busy, _ = await holding(cluster)
    await busy.db.write([("UPDATE leases SET holder = 'other', holder_epoch = 1, epoch = 2 "
                          "WHERE name = 'telegram:1'", ())])
    await eventually(lambda: ("lost", None) in told_busy.events, DEADLINE,
                     "busy told to stop using the lease")
    assert not lease.held and busy.alive and busy.ended is None
    await renewals(busy, 2)  # the instance itself goes on
    assert busy.alive and busy.ended is None
