"""Session lifecycle and delegations: /new, /compress, restarts, and the limit."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gateway.daemon.assembly import Gateway, running_gateway
from gateway.delivery.notifications import NewNotification
from gateway.words.return_address import ReturnAddress
from gateway.words.route import Route
from tests.conftest import make_config
from tests.helpers import eventually, eventually_async, settled
from tests.memory_platform import MemoryAdapter, SentMessage

A = Route("memory", "dm", "100", user_id="100")
B = Route("memory", "dm", "200", user_id="200")


@pytest.fixture
async def gateway(tmp_path: Path) -> AsyncIterator[tuple[Gateway, MemoryAdapter]]:
    adapter = MemoryAdapter("memory", send_delay=0.001)
    async with running_gateway(make_config(tmp_path / "home"), [adapter]) as gw:
        yield gw, adapter


def results(adapter: MemoryAdapter, route: Route | None = None) -> list[SentMessage]:
    return [m for m in adapter.sent if m.kind == "notification" and "Delegation" in m.text
            and (route is None or m.route.chat_id == route.chat_id)]


def delegation_id(reply: SentMessage) -> str:
    return reply.text.split()[2].rstrip(";")


async def live(gw: Gateway, route: Route):
    return await gw.store.live_session(gw.runner.session_key_for(route))


async def test_a_delegation_returns_to_the_conversation_that_started_it(gateway) -> None:
    gw, adapter = gateway
    await adapter.receive("/delegate sleep 0.5; echo from-the-sub-agent", A)
    did = delegation_id(adapter.sent_to(A)[-1])
    for i in range(10):  # the user goes on chatting elsewhere meanwhile
        await adapter.receive(f"meanwhile {i}", B)
    (result,) = await eventually(lambda: results(adapter), what="the delegation result")
    assert result.route.chat_id == A.chat_id
    assert f"Delegation {did} finished" in result.text and "from-the-sub-agent" in result.text
    assert "exit code 0" in result.text
    assert results(adapter, B) == []
    record = await gw.delegations.get(did)
    assert record is not None and record.state == "finished"


async def test_a_result_follows_two_compressions_to_the_live_tip_as_a_turn(gateway) -> None:
    gw, adapter = gateway
    await adapter.receive("/delegate sleep 1; echo survived-compression", A)
    first = await live(gw, A)
    await adapter.receive("/compress", A)
    await adapter.receive("/compress", A)
    tip = await live(gw, A)
    assert tip.id != first.id and tip.parent_session_id is not None
    assert await gw.store.lineage(tip.id) == [first.id, tip.parent_session_id, tip.id]
    (result,) = await eventually(lambda: results(adapter), what="the delegation result")
    assert result.route.chat_id == A.chat_id and "survived-compression" in result.text
    await gw.router.settle()
    tip_lines = [(line.role, line.text) for line in await gw.store.messages(tip.id)]
    assert ("notification", result.text) in tip_lines  # a turn of the tip session
    assert (await gw.store.get(first.id)).end_reason == "compression"


async def test_new_interrupts_a_running_delegation_and_late_results_are_parked(
        gateway) -> None:
    gw, adapter = gateway
    await adapter.receive("/delegate sleep 30; echo never", A)
    did = delegation_id(adapter.sent_to(A)[-1])
    old = await live(gw, A)
    await adapter.receive("/new", A)
    record = await gw.delegations.get(did)
    assert record is not None and record.state == "interrupted"
    assert gw.delegations.running_in(old.session_key) == []
    # a result that still arrives for the ended session
    await gw.outbox.produce([NewNotification(
        f"{did}:async_delegation:late", "async_delegation",
        ReturnAddress(old.session_key, old.id, A), "a late result", job_id=did)])

    async def parked() -> list:
        return await gw.outbox.list("parked")

    (row,) = await eventually_async(parked, what="the late result parked")
    assert row.reason == "owner_ended"
    new = await live(gw, A)
    assert "notification" not in [line.role for line in await gw.store.messages(new.id)]
    assert results(adapter) == []
    assert (await gw.store.get(old.id)).ended_at is not None


async def test_a_fourth_delegation_is_refused_with_a_clear_message(gateway) -> None:
    gw, adapter = gateway
    for _ in range(3):
        await adapter.receive("/delegate sleep 30", A)
    await adapter.receive("/delegate sleep 30", A)
    refusal = adapter.sent_to(A)[-1].text
    assert "3 delegations are already running" in refusal and "limit is 3" in refusal
    assert len(gw.delegations.running_in(gw.runner.session_key_for(A))) == 3
    await adapter.receive("/delegate echo other-conversation-is-fine", B)
    assert "Delegated as" in adapter.sent_to(B)[-1].text
    await adapter.receive("/status", A)
    assert "delegations running here: 3" in adapter.sent_to(A)[-1].text
    await adapter.receive("/new", A)  # ending the session interrupts all three at once
    assert gw.delegations.running_in(gw.runner.session_key_for(A)) == []


async def test_restored_results_obey_the_same_rule_after_a_restart(tmp_path: Path) -> None:
    # the delegation outlasts the drain, so the stop leaves it running
    config = make_config(tmp_path / "home", shutdown__drain_timeout_seconds=0.5)
    first = MemoryAdapter("memory")
    async with running_gateway(config, [first]) as gw:
        await first.receive("hello", A)
        await first.receive("hello", B)
        alive, doomed = await live(gw, A), await live(gw, B)
        await first.receive("/new", B)
        await first.receive("/delegate sleep 30", A)  # running when the daemon stops
        await gw.router.stop()  # from here nothing is delivered before the "crash"
        await gw.outbox.produce([
            NewNotification("r1:async_delegation:result", "async_delegation",
                            ReturnAddress(alive.session_key, alive.id, A), "result for A"),
            NewNotification("r2:async_delegation:result", "async_delegation",
                            ReturnAddress(doomed.session_key, doomed.id, B), "result for B"),
        ])
    for attempt in range(2):  # two restarts: everything is told once, not twice
        adapter = MemoryAdapter("memory")
        async with running_gateway(config, [adapter]) as gw:
            newcomer = Route("memory", "dm", "300", user_id="300")
            await adapter.receive("hi, I am new here", newcomer)
            if attempt == 0:
                sent = adapter.sent
                await eventually(
                    lambda sent=sent: len([m for m in sent if "Delegation" in m.text]) == 1,
                    what="the lost notice")
                await eventually(lambda sent=sent: any("result for A" in m.text for m in sent),
                                 what="A's restored result")
            await settled(gw)
            texts = [m.text for m in adapter.sent if m.kind == "notification"]
            if attempt == 0:
                assert sorted(t.split()[0] for t in texts) == ["Delegation", "result"]
                assert all(m.route.chat_id == A.chat_id for m in adapter.sent
                           if m.kind == "notification")
                assert "was lost" in results(adapter)[0].text
            else:
                assert texts == []
            assert [m.kind for m in adapter.sent_to(newcomer)] == ["reply"]
            parked = await gw.outbox.list("parked")
            assert [(n.text, n.reason) for n in parked] == [("result for B", "owner_ended")]
