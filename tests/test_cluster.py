"""Instances and leases (gateway/cluster/instances.py) on both stores: SQLite in a temp dir and a
database of the test's own on the throwaway PostgreSQL cluster.

A death is a crash in the same process (the renewing and watching tasks end where they
stand, nothing released) or a holder process killed with SIGKILL. Every wait is for an
event, with a generous deadline; elapsed times are for benches."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from gateway.cluster.instances import Instance, Lease
from gateway.cluster.rows import ACQUIRE, dead_instances, list_instances
from gateway.config.settings import ConfigError, default_instance_name, parse_config
from gateway.store.postgres import PgDatabase
from gateway.store.sqlite import Database
from tests.helpers import eventually, eventually_async, write_lock_held
from tests.real_daemon import run_cli, web_home

#: seconds, renewed every 0.5: for an instance that is to die or be cut off, but not
#: before the test has seen it live (a loaded machine stalls a process for a second)
LEASE = 1.5
#: for one whose renewals must all go through meanwhile: a busy machine's stall is not
#: to end it
STEADY = 4.0
DEADLINE = 15.0  # a generous bound for "eventually", never a measured time
Store = Database | PgDatabase


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "state.db")
    url: str = request.getfixturevalue("pg_fresh_url")
    return url


class Cluster:
    """Stores and instances on one store, all let go of at the end of the test."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.dbs: list[Store] = []
        self.instances: list[Instance] = []

    @property
    def is_postgres(self) -> bool:
        return self.url.startswith("postgresql://")

    async def store(self) -> Store:
        db: Store = PgDatabase(self.url) if self.is_postgres else Database(self.url)
        await db.open()
        self.dbs.append(db)
        return db

    async def instance(self, name: str, db: Store | None = None,
                       lease_seconds: float = LEASE) -> Instance:
        instance = Instance(db or await self.store(), name, lease_seconds=lease_seconds)
        await instance.start()
        self.instances.append(instance)
        return instance

    async def close(self) -> None:
        for instance in reversed(self.instances):
            await instance.stop()
        for db in reversed(self.dbs):
            await db.close()


@pytest.fixture
async def cluster(store_url: str) -> AsyncIterator[Cluster]:
    c = Cluster(store_url)
    try:
        yield c
    finally:
        await c.close()


class Told:
    """What a lease watch was told, in order."""

    def __init__(self) -> None:
        self.events: list[tuple[str, int | None]] = []

    async def acquired(self, epoch: int) -> None:
        self.events.append(("acquired", epoch))

    async def lost(self) -> None:
        self.events.append(("lost", None))

    @property
    def holding(self) -> bool:
        return bool(self.events) and self.events[-1][0] == "acquired"


def crash(instance: Instance) -> None:
    """The instance's process as if it died: renewing and watching stop where they are."""
    stop_renewing(instance)
    for lease in instance._leases:
        if lease._watcher is not None:
            lease._watcher.cancel()


def stop_renewing(instance: Instance) -> None:
    """The renewing thread and the watch on the lease's count stop, nothing released."""
    assert instance._renewer is not None and instance._watchdog is not None
    instance._renewer.stop(wait=0)
    instance._watchdog.cancel()


async def renewals(instance: Instance, count: int) -> None:
    """Wait until ``instance`` has renewed its lease ``count`` more times."""
    async def renewed_at() -> float:
        (row,) = [r for r in await list_instances(instance.db) if r.name == instance.name]
        return row.renewed_at

    seen = [await renewed_at()]

    async def advanced() -> bool:
        now = await renewed_at()
        if now != seen[-1]:
            seen.append(now)
        return len(seen) > count

    await eventually_async(advanced, DEADLINE, f"{count} renewals of {instance.name}")


async def test_two_instances_one_lease_exactly_one_holds_it(cluster: Cluster) -> None:
    a, b = await cluster.instance("a", lease_seconds=STEADY), await cluster.instance(
        "b", lease_seconds=STEADY)
    told = {"a": Told(), "b": Told()}
    for instance in (a, b):
        Lease(instance, "telegram:1").watch(told[instance.name].acquired,
                                            told[instance.name].lost)
    await eventually(lambda: told["a"].holding or told["b"].holding, DEADLINE, "a holder")
    holder, other = (a, b) if told["a"].holding else (b, a)
    await renewals(holder, 3)  # the other keeps trying all along
    assert told[holder.name].events == [("acquired", 1)]
    assert told[other.name].events == []
    current = await holder._leases[0].holder()
    assert current is not None and (current.holder, current.holder_epoch) == (holder.name,
                                                                                holder.epoch)
    assert holder._leases[0].held and not other._leases[0].held


async def test_the_holder_dies_and_the_other_takes_over(cluster: Cluster) -> None:
    a = await cluster.instance("a")
    told_a, told_b = Told(), Told()
    Lease(a, "telegram:1").watch(told_a.acquired, told_a.lost)
    await eventually(lambda: told_a.holding, DEADLINE, "a holding the lease")
    b = await cluster.instance("b", lease_seconds=STEADY)
    lease_b = Lease(b, "telegram:1")
    lease_b.watch(told_b.acquired, told_b.lost)

    crash(a)
    await eventually(lambda: told_b.holding, DEADLINE, "b taking over")
    assert told_b.events == [("acquired", 2)]  # a new holder: the next epoch
    current = await lease_b.holder()
    assert current is not None and current.holder == "b" and current.epoch == 2
    assert not a.alive and not a._leases[0].held  # the dead one counts itself out too
    assert [d.name for d in await dead_instances(b.db)] == ["a"]
    await renewals(b, 2)
    assert told_b.events == [("acquired", 2)]


async def test_a_killed_holder_process_is_taken_over(cluster: Cluster) -> None:
    holder = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.lease_holder", cluster.url, "killed", str(LEASE),
        "discord:7", cwd=Path(__file__).parent.parent, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL)
    try:
        assert holder.stdout is not None
        line = await asyncio.wait_for(holder.stdout.readline(), DEADLINE)
        assert line.decode().split() == ["held", "1"]
        survivor = await cluster.instance("survivor", lease_seconds=STEADY)
        told = Told()
        lease = Lease(survivor, "discord:7")
        lease.watch(told.acquired, told.lost)
        await renewals(survivor, 2)
        current = await lease.holder()
        assert told.events == [] and current is not None and current.holder == "killed"

        holder.send_signal(signal.SIGKILL)
        await holder.wait()
        await eventually(lambda: told.holding, DEADLINE, "the survivor taking over")
        assert told.events == [("acquired", 2)]
        assert [d.name for d in await dead_instances(survivor.db)] == ["killed"]
    finally:
        if holder.returncode is None:
            holder.kill()
            await holder.wait()


async def test_a_clean_stop_releases_at_once(cluster: Cluster) -> None:
    # a lease of a minute: only the release can free it within the test
    a = await cluster.instance("a", lease_seconds=60)
    b = await cluster.instance("b", lease_seconds=60)
    told = Told()
    Lease(a, "telegram:1").watch(told.acquired, told.lost)
    await eventually(lambda: told.holding, DEADLINE, "a holding the lease")
    lease_b = Lease(b, "telegram:1")
    assert (await lease_b.try_acquire()).held is False

    await a.stop()
    assert told.events == [("acquired", 1), ("lost", None)]  # told before it was let go
    assert await lease_b.holder() is None
    assert await lease_b.try_acquire() == (True, 2)
    (row,) = [r for r in await list_instances(b.db) if r.name == "a"]
    assert row.stopped_at is not None and row.state(0) == "stopped"
    assert await dead_instances(b.db) == []  # stopped is not dead: nothing to reconcile


async def test_a_holder_that_cannot_use_the_lease_lets_another_have_it(cluster: Cluster
                                                                      ) -> None:
    a = await cluster.instance("a", lease_seconds=STEADY)
    b = await cluster.instance("b", lease_seconds=STEADY)
    tries: list[int] = []

    async def cannot_start(epoch: int) -> None:
        tries.append(epoch)
        raise ConnectionError("the platform refused the poller")

    Lease(a, "telegram:1").watch(cannot_start, Told().lost)
    await eventually(lambda: tries, DEADLINE, "a trying the lease")
    told = Told()
    Lease(b, "telegram:1").watch(told.acquired, told.lost)
    await eventually(lambda: told.holding, DEADLINE, "b having it")
    assert told.events[0][0] == "acquired" and told.events[0][1] == tries[-1] + 1


async def test_epochs_increase_with_each_life_and_each_holder(cluster: Cluster) -> None:
    db = await cluster.store()
    first = await cluster.instance("a", db, lease_seconds=60)
    assert first.epoch == 1
    await first.stop()
    again = await cluster.instance("a", db, lease_seconds=60)
    assert again.epoch == 2

    other = await cluster.instance("b", db, lease_seconds=60)
    mine, theirs = Lease(again, "telegram:1"), Lease(other, "telegram:1")
    assert await mine.try_acquire() == (True, 1)
    assert await mine.try_acquire() == (True, 1)  # already ours: the same tenure
    assert await theirs.try_acquire() == (False, 1)
    await mine.release()
    assert await theirs.try_acquire() == (True, 2)
    await theirs.release()
    assert await mine.try_acquire() == (True, 3)


async def test_a_restart_under_the_same_name_does_not_inherit_the_lease(cluster: Cluster
                                                                         ) -> None:
    old = await cluster.instance("a")
    told_old, told_new = Told(), Told()
    Lease(old, "telegram:1").watch(told_old.acquired, told_old.lost)
    await eventually(lambda: told_old.holding, DEADLINE, "the old life holding the lease")
    crash(old)
    new = await cluster.instance("a", await cluster.store(), lease_seconds=STEADY)
    assert new.epoch == old.epoch + 1
    lease = Lease(new, "telegram:1")
    assert (await lease.try_acquire()).held is False  # the old life may still be running
    lease.watch(told_new.acquired, told_new.lost)
    await eventually(lambda: told_new.holding, DEADLINE, "the new life taking over")
    assert told_new.events == [("acquired", 2)]


async def test_concurrent_acquires_on_two_connections_give_one_holder(cluster: Cluster
                                                                      ) -> None:
    dbs = [await cluster.store(), await cluster.store()]
    instances = [await cluster.instance(f"i{n}", dbs[n % 2], lease_seconds=60)
                 for n in range(8)]
    for round_ in range(5):
        leases = [Lease(instance, f"telegram:{round_}") for instance in instances]
        results = await asyncio.gather(*(lease.try_acquire() for lease in leases))
        winners = [lease for lease, result in zip(leases, results, strict=True)
                   if result.held]
        assert len(winners) == 1, results
        current = await leases[0].holder()
        assert current is not None and current.holder == winners[0].instance.name
        assert {result.epoch for result in results} == {1}


async def test_the_acquiring_statement_alone_keeps_one_holder_off_the_write_lock(
        pg_fresh_url: str) -> None:
    """Renewal is meant to leave the cluster-wide write lock (docs/postgres-plan.md): the
    upsert must then be the whole guard, on connections racing at the server."""
    from gateway.store.postgres import translate

    cluster = Cluster(pg_fresh_url)
    try:
        instances = [await cluster.instance(f"i{n}", lease_seconds=60) for n in range(8)]
        racers = [await psycopg.AsyncConnection.connect(pg_fresh_url, autocommit=True)
                  for _ in instances]
        try:
            for round_ in range(10):
                async def take(pg: psycopg.AsyncConnection[Any], instance: Instance,
                               lease: str = f"telegram:{round_}") -> bool:
                    now = time.time()
                    cursor = await pg.execute(translate(ACQUIRE), (
                        lease, now, instance.name, instance.epoch, now))
                    return await cursor.fetchone() is not None

                won = await asyncio.gather(*(take(pg, instance)
                                             for pg, instance in zip(racers, instances,
                                                                     strict=True)))
                assert sum(won) == 1, won
        finally:
            for pg in racers:
                await pg.close()
    finally:
        await cluster.close()


async def test_an_instance_that_cannot_renew_fences_itself(cluster: Cluster) -> None:
    a = await cluster.instance("a")
    lease, told = Lease(a, "telegram:1"), Told()
    lease.watch(told.acquired, told.lost)
    await eventually(lambda: told.holding, DEADLINE, "a holding the lease")
    async with write_lock_held(cluster.url):  # every write waits, the renewal too
        await eventually(lambda: not a.alive, DEADLINE, "a fencing itself")
        assert not lease.held
        await eventually(lambda: told.events == [("acquired", 1), ("lost", None)], DEADLINE,
                         "the watch told to stop using the lease")
        # nothing else waits on this life: the hung renewal itself ends it, so it does
        # not linger, neither acting nor gone (and a daemon exits for systemd)
        reason = await asyncio.wait_for(a.wait_ended(), DEADLINE)
        assert "ran out" in reason
        await eventually_async(lambda: dead_instances(a.db), DEADLINE, "a's lease running out")
    assert not a.alive and not lease.held
    assert await lease.try_acquire() == (False, 1)  # a fenced instance takes nothing


async def test_a_second_process_under_the_same_name_ends_the_first(cluster: Cluster
                                                                   ) -> None:
    first = await cluster.instance("a")
    second = await cluster.instance("a", await cluster.store(), lease_seconds=STEADY)
    reason = await asyncio.wait_for(first.wait_ended(), DEADLINE)
    assert "another process started as a" in reason and "instance.name" in reason
    assert not first.alive and second.alive
    await renewals(second, 2)
    assert second.ended is None


# configuration ----------------------------------------------------------------------

@pytest.mark.parametrize(("raw", "field"), [
    ({"cluster": {"failover_seconds": 5}}, "cluster.failover_seconds"),
    ({"cluster": {"lease_seconds": 20}}, "cluster.failover_seconds"),  # the default 15
    ({"cluster": {"lease_seconds": 0}}, "cluster.lease_seconds"),
    ({"cluster": {"lease_seconds": True}}, "cluster.lease_seconds"),
    ({"instance": {"name": "vps1 homing"}}, "instance.name"),
    ({"instance": {"name": "-homing"}}, "instance.name"),
    ({"instance": {"name": "x" * 64}}, "instance.name"),
    ({"instance": {"name": "a/b"}}, "instance.name"),
])
def test_config_errors_name_the_field(raw: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config(raw, {})
    assert [path for path, _ in err.value.problems] == [field]


def test_config_defaults_and_names() -> None:
    config = parse_config({}, {})
    assert config.instance.name == default_instance_name()
    assert config.instance.name.endswith("-homing")
    assert (config.cluster.lease_seconds, config.cluster.failover_seconds) == (10, 15)
    assert parse_config({"instance": {"name": None}}, {}).instance.name == config.instance.name
    assert parse_config({"instance": {"name": "eu-2.homing_b"}}, {}).instance.name == (
        "eu-2.homing_b")
    assert parse_config({"cluster": {"lease_seconds": 4, "failover_seconds": 4}},
                        {}).cluster.failover_seconds == 4
    assert default_instance_name("vps1.example.com") == "vps1-homing"
    assert default_instance_name("odd host!") == "odd-host-homing"
    assert default_instance_name("") == "homing"


# homing status ----------------------------------------------------------------------

async def test_status_lists_instances_and_the_leases_they_hold(tmp_path: Path) -> None:
    env = web_home(tmp_path / "home")
    db = Database(tmp_path / "home" / "state.db")
    await db.open()
    try:
        # a live instance holding a lease, and one that stopped; the lease outlives the test
        holder = Instance(db, "vps1-homing", lease_seconds=600, host="vps1", pid=4242)
        await holder.start()
        assert (await Lease(holder, "telegram:123").try_acquire()).held
        stopped = Instance(db, "vps2-homing", lease_seconds=600, host="vps2", pid=99)
        await stopped.start()
        await stopped.stop()
        stop_renewing(holder)  # the CLI reads the row as it stands
    finally:
        await db.close()

    code, out, err = await run_cli("status", "--json", env=env)
    assert code == 0, err
    report = json.loads(out)
    by_name = {i["name"]: i for i in report["instances"]}
    live = by_name["vps1-homing"]
    times = ("started_at", "renewed_at", "lease_expires_at", "lease_age_seconds",
             "expires_in_seconds")
    assert {k: v for k, v in live.items() if k not in times} == {
        "name": "vps1-homing", "epoch": 1, "host": "vps1", "pid": 4242, "stopped_at": None,
        "state": "live", "leases": ["telegram:123"], "running_jobs": 0}
    assert live["lease_expires_at"] - live["renewed_at"] == pytest.approx(600)
    assert 0 < live["expires_in_seconds"] <= 600 and live["lease_age_seconds"] >= 0
    assert by_name["vps2-homing"]["state"] == "stopped" and by_name["vps2-homing"]["leases"] == []
    (lease,) = report["leases"]
    assert (lease["name"], lease["holder"], lease["holder_epoch"], lease["epoch"],
            lease["held"]) == ("telegram:123", "vps1-homing", 1, 1, True)

    code, out, err = await run_cli("status", env=env)
    assert code == 0, err
    assert "vps1-homing" in out and "telegram:123" in out and "stopped" in out
