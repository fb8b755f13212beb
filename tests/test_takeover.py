"""What a dead instance left on a shared store, taken over by survivors exactly once.

A life's unfinished journal entries go to one survivor (two asking at once split them,
never share one); a dead instance's running jobs are reported lost once, and not at
all when the instance came back first (it re-attaches them itself).
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gateway.cluster.instances import Instance
from gateway.cluster.lives import claimer_name
from gateway.delivery.outbox import Outbox
from gateway.inbound.journal import Inbound
from gateway.sessions.store import SessionStore
from gateway.words.events import MessageEvent
from gateway.words.return_address import ReturnAddress
from gateway.words.route import Route
from tests.conftest import make_config
from tests.test_cluster import LEASE, crash
from tools.job_takeover import report_lost
from tools.jobs import JobManager

TOPIC = Route("memory", "group", "-100", thread_id="42", user_id="1")
KEY = "agent:main:memory:group:-100:42"


@pytest.fixture
async def pg_store(pg_fresh_url: str) -> AsyncIterator[SessionStore]:
    async with SessionStore(pg_fresh_url) as store:
        yield store


async def life(store: SessionStore, name: str, lease: float = 60) -> tuple[Instance, str]:
    instance = Instance(store.db, name, lease_seconds=lease)
    await instance.start()
    return instance, claimer_name((instance.name, instance.epoch))


async def expired(instance: Instance) -> None:
    """Wait until the store counts ``instance``'s lease as run out."""
    crash(instance)
    await asyncio.sleep(instance.lease_seconds + 0.2)


async def test_a_dead_lifes_messages_go_to_one_survivor_each(pg_store: SessionStore) -> None:
    dead, dead_life = await life(pg_store, "vps1", lease=LEASE)
    journal = Inbound(pg_store.db)
    journal.handler = dead_life
    for n in range(20):
        await journal.record(MessageEvent(text=f"m{n}", route=TOPIC), KEY, platform_id=f"u{n}")
    survivors = []
    for name in ("vps2", "vps3"):
        survivor = Inbound(pg_store.db)
        survivor.handler = (await life(pg_store, name))[1]
        survivors.append(survivor)
    assert await survivors[0].unfinished() == []  # its owner still runs
    await expired(dead)
    taken = await asyncio.gather(*(s.unfinished() for s in survivors))
    texts = [e.event.text for entries in taken for e in entries]
    assert sorted(texts) == sorted(f"m{n}" for n in range(20))  # each once, none lost
    assert [await s.unfinished() for s in survivors] == [[], []]  # and only once


async def test_a_stalled_lifes_late_writes_leave_what_a_survivor_took(
        pg_store: SessionStore) -> None:
    stalled, stalled_life = await life(pg_store, "vps1", lease=LEASE)
    journal = Inbound(pg_store.db)
    journal.handler = stalled_life
    entries = [await journal.record(MessageEvent(text=f"m{n}", route=TOPIC), KEY,
                                    platform_id=f"u{n}") for n in range(2)]
    survivor = Inbound(pg_store.db)
    survivor.handler = (await life(pg_store, "vps2"))[1]
    await expired(stalled)
    assert len(await survivor.unfinished()) == 2
    # the stalled life's writes, queued before the stall, come through only now
    first, second = (e.id for e in entries if e is not None)
    assert not await journal.started(first)  # its turn does not begin: it is vps2's
    journal.finished(second)
    await pg_store.db.flush()
    assert await survivor.started(first, replayed=True)
    assert await survivor.started(second, replayed=True)  # not marked handled by vps1


@pytest.fixture
async def job_of_vps1(pg_store: SessionStore, tmp_path: Path
                      ) -> AsyncIterator[tuple[JobManager, str]]:
    jobs = JobManager(pg_store.db, Outbox(pg_store.db), make_config(tmp_path / "home"))
    jobs.instance = "vps1"
    session = await pg_store.get_or_create(KEY, TOPIC)
    record = await jobs.start("sleep 30", ReturnAddress(KEY, session.id, TOPIC),
                              cwd=tmp_path)
    await asyncio.sleep(0.1)  # followed, as it would be
    await jobs.detach()  # vps1 lets go of it as a dead daemon would
    yield jobs, record.id
    assert record.pid is not None
    os.killpg(record.pid, signal.SIGKILL)


async def test_a_dead_instances_running_job_is_reported_lost_once(
        pg_store: SessionStore, job_of_vps1: tuple[JobManager, str]) -> None:
    jobs, job_id = job_of_vps1
    vps1, _ = await life(pg_store, "vps1", lease=LEASE)
    assert await report_lost(jobs, ["vps1"]) == 0  # still live
    await expired(vps1)
    assert await asyncio.gather(report_lost(jobs, ["vps1"]), report_lost(jobs, ["vps1"])) in (
        [1, 0], [0, 1])
    (notice,) = await jobs.outbox.list()
    assert notice.job_id == job_id and notice.address.route == TOPIC
    assert f"Job {job_id} was running on instance vps1, which stopped answering" in notice.text
    assert (await jobs.get(job_id)).state == "lost"  # type: ignore[union-attr]


async def test_an_instance_that_came_back_keeps_its_running_job(
        pg_store: SessionStore, job_of_vps1: tuple[JobManager, str]) -> None:
    jobs, job_id = job_of_vps1
    vps1, _ = await life(pg_store, "vps1", lease=LEASE)
    await expired(vps1)
    await life(pg_store, "vps1")  # restarted before any survivor looked
    assert await report_lost(jobs, ["vps1"]) == 0
    assert await jobs.outbox.list() == []
    assert (await jobs.get(job_id)).state == "running"  # type: ignore[union-attr]
    assert await jobs.recover() == 1  # and it is vps1's to re-attach
    await asyncio.sleep(0.1)
    await jobs.detach()
