"""A stalled instance on a shared store acts no more once a survivor may act for it.

A process that stops renewing — frozen, swapping, cut off from the store — keeps its
turns and its queued sends in memory. When it wakes, its lease may have run out and a
survivor may already be answering its messages. The whole gateway (its real wiring on
PostgreSQL) must then hold every send, turn and job start until it hears from the
store: once told its life is over, it sends nothing, starts nothing, and leaves its
message unfinished for the survivor — never answered twice, never marked handled
without an answer. The stall here is another client holding the store's write lock.
A scheduled run such a life can no longer start stays claimed for a live instance.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gateway.cluster import Instance
from gateway.cluster_store import dead_instances
from gateway.daemon import Gateway, running_gateway
from gateway.events import MessageEvent
from gateway.inbound import Inbound
from gateway.lives import LifeOver, claimer_name, may_always_act
from gateway.notifications import ReturnAddress
from gateway.platforms.memory import MemoryAdapter
from gateway.route import Route

from .conftest import make_config
from .helpers import eventually
from .test_cluster import _write_lock_held
from .test_schedules import CHAT, START, Clock, runs, say, schedule_config, schedule_id, settle

TOPIC = Route("memory", "group", "-100", thread_id="42", user_id="1")
KEY = "agent:main:memory:group:-100:42"
LEASE = 0.5
DEADLINE = 15.0


@pytest.fixture
async def gateway(request: pytest.FixtureRequest, tmp_path: Path, pg_fresh_url: str
                  ) -> AsyncIterator[tuple[Gateway, MemoryAdapter]]:
    """The whole gateway as instance vps1 (its lease ``LEASE``, or the test's parameter),
    with a memory platform beside its web chat."""
    lease = getattr(request, "param", LEASE)
    config = make_config(tmp_path / "home", store__url=pg_fresh_url,
                         instance__name="vps1", cluster__lease_seconds=lease,
                         cluster__failover_seconds=4 * lease)
    async with running_gateway(config) as gw:
        adapter = MemoryAdapter("memory")
        gw.runner.add_adapter(adapter)
        await adapter.connect(gw.runner)
        yield gw, adapter


async def test_a_stalled_instance_whose_life_ended_sends_nothing_and_leaves_its_messages(
        gateway: tuple[Gateway, MemoryAdapter], pg_fresh_url: str, tmp_path: Path) -> None:
    gw, adapter = gateway
    instance, runner = gw.instance, gw.runner
    assert instance is not None
    waiting, begun = [await runner.inbound.record(MessageEvent(text=text, route=TOPIC), KEY,
                                                  platform_id=text)
                      for text in ("not begun yet", "begun before the stall")]
    assert waiting is not None and begun is not None
    assert await runner.inbound.started(begun.id)
    session = await gw.store.get_or_create(KEY, TOPIC)
    address = ReturnAddress(KEY, session.id, TOPIC)
    async with _write_lock_held(pg_fresh_url):  # its renewals wait, as in a stall
        await eventually(lambda: not instance.alive, DEADLINE, "vps1 overdue by its own count")
        held = [asyncio.create_task(work) for work in (
            runner.post(TOPIC, "the begun message's reply"),
            runner.handle_entry(KEY, waiting),
            gw.jobs.start("echo started", address, cwd=tmp_path))]
        reply, outcome, started = await asyncio.wait_for(
            asyncio.gather(*held, return_exceptions=True), DEADLINE)
        # it let go only once the store's count had run out: a survivor may act now
        assert await dead_instances(gw.store.db)
        assert instance.ended is not None and "ran out" in instance.ended
    assert not reply.ok and "lease ran out" in (reply.error or "")  # type: ignore[union-attr]
    assert outcome == "shutdown"
    assert isinstance(started, LifeOver)
    runner.inbound.finished(begun.id)  # its turn ends without a reply: left as it is
    await gw.store.db.flush()
    assert adapter.sent == [] and await gw.jobs.list() == []
    # a survivor takes both over, unanswered, as they stood
    survivor = Instance(gw.store.db, "vps2", lease_seconds=60)
    await survivor.start()
    try:
        journal = Inbound(gw.store.db)
        journal.handler = claimer_name((survivor.name, survivor.epoch))
        taken = await journal.unfinished()
        assert [(e.id, e.state) for e in taken] == [(waiting.id, "received"),
                                                    (begun.id, "started")]
    finally:
        await survivor.stop()


@pytest.mark.parametrize("gateway", [60.0], indirect=True)  # no renewal due meanwhile
async def test_a_renewal_that_comes_late_lets_the_held_send_go_once(
        gateway: tuple[Gateway, MemoryAdapter]) -> None:
    gw, adapter = gateway
    instance = gw.instance
    assert instance is not None
    instance._deadline = 0.0  # its renewal overdue by its own count, not yet by the store's
    assert not instance.alive
    sending = asyncio.create_task(gw.runner.post(TOPIC, "sent after the renewal"))
    for _ in range(5):
        await asyncio.sleep(0)
    assert not sending.done() and adapter.sent == []  # held
    instance._wake.set()  # the renewal comes (its next one would, 20 s on)
    result = await asyncio.wait_for(sending, DEADLINE)
    assert result.ok and instance.alive and instance.ended is None
    assert [m.text for m in adapter.sent] == ["sent after the renewal"]


async def test_a_scheduled_run_a_life_that_is_over_cannot_start_waits_for_a_live_one(
        tmp_path: Path) -> None:
    clock, adapter = Clock(START), MemoryAdapter("memory")
    async with running_gateway(schedule_config(tmp_path / "home"), [adapter],
                               clock=clock) as gw:
        sid = schedule_id(await say(adapter, "/every 10m echo fenced-run", CHAT))

        async def over() -> bool:
            return False
        gw.jobs.acting = over  # as after a stall that ended this life
        clock.now = START + 601
        await gw.scheduler.tick()
        (state,) = await gw.store.db.fetchone("SELECT state FROM schedule_runs")
        assert state == "claimed"  # neither started nor told "could not start"
        assert await gw.outbox.list() == []
        gw.jobs.acting = may_always_act  # a live one: the next life, or a survivor
        await settle(gw)
        (run,) = runs(adapter, sid)
        assert "the run of 2027-01-15 08:10 UTC" in run.text and "fenced-run" in run.text
