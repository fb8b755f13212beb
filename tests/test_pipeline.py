"""The message pipeline under concurrency: no bleed, per-session order."""

from __future__ import annotations

import asyncio
import json
import random

from gateway.messages.runner import GatewayRunner
from gateway.words.route import Route
from tests.helpers import eventually
from tests.memory_platform import MemoryAdapter


def _routes() -> list[Route]:
    """50 chats: a forum group's topics, other groups, DMs, per-user group sessions."""
    forum = "-1009999"
    routes = [Route("memory", "group", forum, thread_id=str(t), user_id="1") for t in range(10, 30)]
    routes += [Route("memory", "group", forum, user_id="1")]  # the General topic
    routes += [Route("memory", "group", f"-100{g}", user_id=str(g)) for g in range(10)]
    routes += [Route("memory", "dm", str(u), user_id=str(u)) for u in range(100, 119)]
    assert len(routes) == 50
    return routes


async def test_200_concurrent_messages_from_50_chats_each_see_their_own_context(
        memory_gateway: tuple[GatewayRunner, MemoryAdapter]) -> None:
    runner, adapter = memory_gateway
    routes = _routes()
    sends = [(routes[i % 50].with_anchor(str(1000 + i))) for i in range(200)]
    random.Random(7).shuffle(sends)

    outcomes = await asyncio.gather(*(adapter.receive("/whoami", r, message_id=r.message_id)
                                      for r in sends))
    assert set(outcomes) == {"handled"}

    replies = [m for m in adapter.sent if m.kind == "reply"]
    assert len(replies) == 200
    seen_anchors = set()
    for message in replies:
        report = json.loads(message.text)
        expected_key = runner.session_key_for(message.route)
        live = await runner.store.live_session(expected_key)
        assert live is not None
        for view in (report["tool"], report["thread"]):  # in the loop and in a worker thread
            assert view["route"] == message.route.to_dict()
            assert view["session_key"] == expected_key
            assert view["session_id"] == live.id
        seen_anchors.add(message.route.message_id)
    assert len(seen_anchors) == 200


async def test_a_session_handles_its_messages_one_at_a_time_in_order(
        memory_gateway: tuple[GatewayRunner, MemoryAdapter]) -> None:
    runner, adapter = memory_gateway
    topic = Route("memory", "group", "-1001", thread_id="42", user_id="1")
    other = Route("memory", "dm", "5", user_id="5")
    futures = [adapter.receive(f"message {i}", topic) for i in range(30)]
    futures += [adapter.receive(f"other {i}", other) for i in range(30)]
    await asyncio.gather(*futures)
    in_topic = [m.text.split("\n")[0] for m in adapter.sent_to(topic)]
    assert in_topic == [f"Received: message {i}" for i in range(30)]
    session = await runner.store.live_session(runner.session_key_for(topic))
    transcript = [(line.role, line.text) for line in await runner.store.messages(session.id)]
    assert transcript[:4] == [("user", "message 0"), ("reply", adapter.sent_to(topic)[0].text),
                              ("user", "message 1"), ("reply", adapter.sent_to(topic)[1].text)]


async def test_turns_never_overlap_within_a_session_but_do_across_sessions(
        tmp_path) -> None:
    from gateway.daemon.assembly import running_gateway
    from tests.conftest import make_config

    adapter = MemoryAdapter("memory")
    async with running_gateway(make_config(tmp_path / "home"), [adapter]):
        one, two = Route("memory", "dm", "1", user_id="1"), Route("memory", "dm", "2",
                                                                  user_id="2")
        probe = "/run echo {n} $(date +%s%N); sleep 0.05; echo {n} $(date +%s%N)"
        await asyncio.gather(*(adapter.receive(probe.format(n=n), route)
                               for n in range(8) for route in (one, two)))

        def intervals(route: Route) -> list[tuple[int, int, int]]:
            spans = []
            for message in adapter.sent_to(route):
                stamps = [line.split() for line in message.text.splitlines()
                          if line[:1].isdigit()]
                spans.append((int(stamps[0][0]), int(stamps[0][1]), int(stamps[1][1])))
            return spans

        for route in (one, two):
            spans = intervals(route)
            assert [n for n, _, _ in spans] == list(range(8))  # in arrival order
            for (_, _, end), (_, start, _) in zip(spans, spans[1:], strict=False):
                assert end <= start  # one turn at a time
        a, b = intervals(one), intervals(two)
        assert any(s1 < e2 and s2 < e1 for _, s1, e1 in a for _, s2, e2 in b)  # in parallel


async def test_a_message_waits_for_its_sessions_turn(
        memory_gateway: tuple[GatewayRunner, MemoryAdapter]) -> None:
    runner, adapter = memory_gateway
    adapter.send_delay = 0.05
    chat = Route("memory", "dm", "9", user_id="9")
    first = adapter.receive("first", chat)
    await eventually(lambda: runner.is_busy(runner.session_key_for(chat)),
                     what="the first turn under way")
    second = adapter.receive("second", chat)
    assert await first == "handled" and await second == "handled"
    assert [m.text.split("\n")[0] for m in adapter.sent_to(chat)] == [
        "Received: first", "Received: second"]


async def test_new_rotates_the_session_and_keeps_the_key(
        memory_gateway: tuple[GatewayRunner, MemoryAdapter]) -> None:
    runner, adapter = memory_gateway
    chat = Route("memory", "dm", "3", user_id="3")
    await adapter.receive("hello", chat)
    key = runner.session_key_for(chat)
    before = await runner.store.live_session(key)
    await adapter.receive("/reset", chat)
    after = await runner.store.live_session(key)
    assert before is not None and after is not None and after.id != before.id
    assert after.session_key == before.session_key
    assert (await runner.store.get(before.id)).end_reason == "new"
    await adapter.receive("/status", chat)
    status = adapter.sent_to(chat)[-1].text
    assert f"session id: {after.id}" in status and f"session key: {key}" in status


async def test_platform_events_cannot_pose_as_internal(
        memory_gateway: tuple[GatewayRunner, MemoryAdapter]) -> None:
    from gateway.words.events import MessageEvent

    runner, _ = memory_gateway
    event = MessageEvent(text="fake notice", route=Route("memory", "dm", "1"), internal=True)
    try:
        runner.submit(event)
    except ValueError:
        pass
    else:
        raise AssertionError("an internal event was accepted from a platform")


async def test_unlisted_users_on_chat_platforms_are_ignored(
        memory_gateway: tuple[GatewayRunner, MemoryAdapter]) -> None:
    runner, _ = memory_gateway
    telegram = MemoryAdapter("telegram", authenticates_users=False)
    runner.add_adapter(telegram)
    await telegram.connect(runner)
    outcome = await telegram.receive("hi", Route("telegram", "dm", "77", user_id="77"))
    assert outcome == "unauthorized"
    assert telegram.sent == []
    runner.config.platforms.telegram.allowed_users.append("@Ann")
    listed = Route("telegram", "dm", "78", user_id="78", user_name="ann")
    assert await telegram.receive("hi", listed) == "handled"
    assert len(telegram.sent) == 1


async def test_a_failing_turn_is_reported_and_the_next_message_works(
        memory_gateway: tuple[GatewayRunner, MemoryAdapter]) -> None:
    runner, adapter = memory_gateway
    chat = Route("memory", "dm", "4", user_id="4")
    original = runner.agent.run_turn

    async def broken(turn):  # the agent raising must not kill the conversation's lane
        raise RuntimeError("boom")

    runner.agent.run_turn = broken
    assert await adapter.receive("hello", chat) == "failed"
    runner.agent.run_turn = original
    assert await adapter.receive("again", chat) == "handled"
    texts = [m.text for m in adapter.sent_to(chat)]
    assert "could not be handled" in texts[0] and texts[1].startswith("Received: again")
