"""A stalled instance on a shared store acts no more once a survivor may act for it.

A process that stops renewing — frozen, swapping, cut off from the store — keeps its
turns and its queued sends in memory. When it wakes, its lease may have run out and a
survivor may already be answering its messages. The whole gateway (its real wiring on
PostgreSQL) must then hold every send, turn and job start until it hears from the
store: once told its life is over, it sends nothing, starts nothing, and leaves its
message unfinished for the survivor — never answered twice, never marked handled
without an answer. The stall here is another client holding the store's write lock.
A scheduled run such a life can no longer start stays claimed for a live instance.
What is not a message is held the same way: "typing", tool status, the preview of a
reply being written, an approval prompt, a pairing offer.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gateway.approvals.rules import Need
from gateway.cluster.instances import Instance
from gateway.cluster.lives import LifeOver, claimer_name, may_always_act
from gateway.cluster.rows import dead_instances
from gateway.contract.approval import ApprovalRecord
from gateway.contract.fenced import HeldLive
from gateway.daemon.assembly import Gateway, running_gateway
from gateway.inbound.journal import Inbound
from gateway.messages.auth import offer_pairing
from gateway.messages.signs_of_life import signs_of_life
from gateway.words.context import SessionContext, session_context
from gateway.words.events import MessageEvent, MessageKind, SendResult
from gateway.words.return_address import ReturnAddress
from gateway.words.route import Route
from tests.conftest import make_config
from tests.helpers import eventually, write_lock_held
from tests.memory_platform import MemoryAdapter
from tests.test_schedules import CHAT, START, Clock, runs, say, schedule_config, schedule_id, settle

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
    async with write_lock_held(pg_fresh_url):  # its renewals wait, as in a stall
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


class Watched(MemoryAdapter):
    """Records every call that shows something in a chat, not only sends."""

    supports_pairing = True

    def __init__(self) -> None:
        super().__init__("watched", authenticates_users=False)
        self.calls: list[str] = []

    async def typing(self, route: Route, active: bool) -> None:
        self.calls.append(f"typing {active}")

    async def status(self, route: Route, text: str) -> None:
        self.calls.append(f"status {text}")

    async def ask_approval(self, route: Route, record: ApprovalRecord) -> SendResult:
        self.calls.append(f"approval {record.command}")
        return SendResult.sent("1")

    async def show(self, text: str) -> None:  # the live reply's calls, below
        self.calls.append(f"preview {text}")

    async def finish(self, text: str, *, kind: MessageKind, session_id: str | None,
                     dedupe_key: str | None = None) -> SendResult:
        return await self.send(Route("watched", "dm", "7"), text, kind=kind)

    async def close(self) -> None:
        self.calls.append("preview closed")


async def test_a_stalled_instance_shows_nothing_either_typing_previews_prompts_offers(
        gateway: tuple[Gateway, MemoryAdapter], pg_fresh_url: str) -> None:
    gw, _ = gateway
    instance, runner = gw.instance, gw.runner
    assert instance is not None and runner.approvals is not None
    watched = Watched()
    runner.add_adapter(watched)
    await watched.connect(runner)
    dm = Route("watched", "dm", "7", user_id="7", user_name="eve")
    key = "agent:main:watched:dm:7"
    session = await gw.store.get_or_create(key, dm)

    async def a_turn_through_the_stall() -> None:
        # as the runner holds it: every send fenced there (gateway/contract/fenced.py)
        async with signs_of_life(runner.adapters["watched"], dm):
            await asyncio.sleep(0.05)

    async def its_preview() -> None:
        live = HeldLive(watched, runner.acting, dm)
        await live.show("half a reply")
        await live.status("running make")
        await live.close()

    async with write_lock_held(pg_fresh_url):  # its renewals wait, as in a stall
        await eventually(lambda: not instance.alive, DEADLINE, "vps1 overdue by its own count")
        await asyncio.wait_for(asyncio.gather(
            a_turn_through_the_stall(), its_preview(), runner.tool_status(dm, "reading"),
            offer_pairing(MessageEvent(text="hi", route=dm), watched, runner.pairing,
                          runner.acting)), DEADLINE)
        assert instance.ended is not None  # they let go only when the life was over
    with session_context(SessionContext(dm, key, session.id)):
        asked = await asyncio.wait_for(runner.approvals.ask(
            "terminal", "rm -rf build", {"command": "rm -rf build"},
            Need("deletes files", "terminal:rm")), DEADLINE)
    assert asked.state == "cancelled" and "lease ran out" in (asked.ran or "")
    assert watched.calls == [] and watched.sent == []


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


@pytest.mark.parametrize("gateway", [60.0], indirect=True)  # its own count: still alive
async def test_work_whose_registration_lands_after_the_life_ended_is_neither_kept_nor_run(
        gateway: tuple[Gateway, MemoryAdapter], tmp_path: Path) -> None:
    """The check before the write is not enough: the write itself may wait out a stall
    in the queue. The store's count decides, inside the registering transaction."""
    gw, _ = gateway
    instance = gw.instance
    assert instance is not None and instance.alive
    await gw.store.db.write([("UPDATE instances SET lease_expires_at = 0 WHERE name = ?",
                              ("vps1",))])  # as if this write had waited past the lease
    session = await gw.store.get_or_create(KEY, TOPIC)
    marker = tmp_path / "ran"
    address = ReturnAddress(KEY, session.id, TOPIC)
    with pytest.raises(LifeOver):
        await gw.jobs.start(f"touch {marker}", address, cwd=tmp_path)
    with pytest.raises(LifeOver):
        await gw.delegations.delegate(f"touch {marker}", address)
    await asyncio.sleep(0.5)  # what a started job would have taken to touch its file
    assert await gw.jobs.list() == [] and not marker.exists()
    assert await gw.store.db.fetchall("SELECT id FROM delegations") == []


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
