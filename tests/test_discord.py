"""The Discord adapter: the real discord.py against a local fake REST API and gateway."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import discord
import pytest

from gateway.config.settings import Config
from gateway.daemon.assembly import Gateway, running_gateway
from gateway.platforms.discord.adapter import DiscordAdapter
from tests.conftest import make_config
from tests.fakes.discord_server import FakeDiscord, SentRecord
from tests.helpers import eventually, eventually_async, running_command, settled

CHANNEL, THREAD_A, THREAD_B, DM = 500, 601, 602, 700
ALICE = 1


@pytest.fixture
async def fake(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[FakeDiscord]:
    # the adapter points discord.py's class-level endpoints at the fake; put them back after
    monkeypatch.setattr(discord.http.Route, "BASE", discord.http.Route.BASE)
    monkeypatch.setattr(discord.gateway.DiscordWebSocket, "DEFAULT_GATEWAY",
                        discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY)
    async with FakeDiscord() as server:
        server.add_channel(CHANNEL, "builds")
        server.add_thread(THREAD_A, CHANNEL)
        server.add_thread(THREAD_B, CHANNEL)
        yield server


def discord_config(home: Path, fake: FakeDiscord, **overrides: object) -> Config:
    return make_config(home, platforms__discord__enabled=True,
                       platforms__discord__token=fake.token,
                       platforms__discord__api_base=fake.api_base,
                       platforms__discord__gateway_url=fake.gateway_url,
                       platforms__discord__guild_ready_timeout_seconds=fake.guild_ready_timeout,
                       platforms__discord__allowed_users=[str(ALICE)], **overrides)


@pytest.fixture
async def gateway(tmp_path: Path, fake: FakeDiscord) -> AsyncIterator[Gateway]:
    async with running_gateway(discord_config(tmp_path / "home", fake)) as gw:
        adapter = gw.runner.adapters["discord"].inner  # the platform's own, behind the fence
        assert isinstance(adapter, DiscordAdapter)
        await adapter.wait_connected(timeout=30)
        yield gw


def notices(fake: FakeDiscord) -> list[SentRecord]:
    return [s for s in fake.sent if s.content.startswith("Job ")]


async def test_notices_reach_their_own_thread_channel_or_dm(gateway, fake) -> None:
    starts = {"channel": dict(channel_id=CHANNEL), "thread-a": dict(channel_id=THREAD_A),
              "thread-b": dict(channel_id=THREAD_B), "dm": dict(channel_id=DM, guild=False)}
    anchors = {}
    for name, where in starts.items():
        message = await fake.user_message(content=f"/bg sleep 0.5; echo marker-{name}", **where)
        anchors[name] = int(message["id"])
    await eventually(lambda: len(notices(fake)) == len(starts), timeout=30, what="every notice")
    for name, where in starts.items():
        (notice,) = [n for n in notices(fake) if f"marker-{name}" in n.content]
        assert notice.channel_id == where["channel_id"], name
        assert notice.message_reference == anchors[name], name
    thread_session = await gateway.store.live_session("agent:main:discord:thread:601:601")
    assert thread_session is not None and thread_session.route.parent_chat_id == str(CHANNEL)


async def test_a_notice_due_while_disconnected_is_delivered_after_the_resume_once(
        gateway, fake) -> None:
    await fake.user_message(channel_id=CHANNEL, content="/bg sleep 1; echo resumed-marker")
    await fake.wait_for_sent(1)
    resumes = fake.resume_count
    fake.set_gateway_down(True)
    await fake.drop_connection(reconnect_op=True, close_code=4000)
    adapter = gateway.runner.adapters["discord"].inner  # the platform's own, behind the fence
    await eventually(lambda: not adapter.connected, what="the adapter noticing")

    async def due_and_waiting() -> list:
        rows = await gateway.outbox.list("pending")
        return [r for r in rows if "resumed-marker" in r.text]

    await eventually_async(due_and_waiting, timeout=30, what="the notice waiting")
    assert notices(fake) == []
    fake.set_gateway_down(False)
    await eventually(lambda: fake.resume_count > resumes, timeout=20, what="the resume")
    await eventually(lambda: notices(fake), timeout=20, what="the notice after the resume")
    await settled(gateway)
    assert len([n for n in notices(fake) if "resumed-marker" in n.content]) == 1


async def test_a_long_output_arrives_in_parts_with_code_blocks_intact(gateway, fake) -> None:
    await fake.user_message(channel_id=CHANNEL, content="/run for i in $(seq 1 25); do "
                            "printf 'row %02d %0190d\\n' $i 0; done")
    await eventually(lambda: len(fake.sent) >= 3, timeout=30, what="the parts")
    await settled(gateway)  # the turn is over: every part is out
    parts = [s.content for s in fake.sent]
    assert sum(len(p) for p in parts) > 5000
    assert all(len(p) <= 2000 for p in parts)
    for part in parts:
        assert len([ln for ln in part.splitlines() if ln.startswith("```")]) % 2 == 0
    assert "row 01" in parts[0] and "row 25" in parts[-1]


async def test_a_notice_for_a_locked_thread_is_parked_route_gone(gateway, fake) -> None:
    await fake.user_message(channel_id=THREAD_A, content="/bg sleep 0.5; echo locked-out")
    await fake.wait_for_sent(1)
    fake.lock_thread(THREAD_A)

    async def parked() -> list:
        return await gateway.outbox.list("parked")

    (row,) = await eventually_async(parked, timeout=30, what="the parked notice")
    assert row.reason == "route_gone" and "locked" in (row.last_error or "")
    assert notices(fake) == []


async def test_unknown_users_and_other_bots_get_nothing(gateway, fake) -> None:
    await fake.user_message(channel_id=CHANNEL, content="hello", author_id=77, username="eve")
    await fake.user_message(channel_id=DM, guild=False, content="hi", author_id=78)
    await fake.user_message(channel_id=CHANNEL, content="beep", author_id=79, bot=True)
    await fake.user_message(channel_id=CHANNEL, content="and me?")  # alice, allowed
    (reply,) = await fake.wait_for_sent(1)
    # the others came first, and each is the gateway's (a conversation's work) from the
    # moment the adapter hands it over: once nothing is left, nothing more is sent
    await settled(gateway)
    assert len(fake.sent) == 1 and reply.content.startswith("Received: and me?")


async def test_an_archived_thread_reopens_for_its_notice(gateway, fake) -> None:
    await fake.user_message(channel_id=THREAD_B, content="/bg sleep 0.5; echo reopened")
    await fake.wait_for_sent(1)
    fake.archive_thread(THREAD_B)
    await eventually(lambda: notices(fake), timeout=30, what="the notice")
    assert notices(fake)[0].channel_id == THREAD_B
    assert fake.channel(THREAD_B)["thread_metadata"]["archived"] is False


async def test_rate_limits_lose_and_reorder_nothing_in_a_channel(gateway, fake) -> None:
    fake.fail_next_post(channel_id=CHANNEL, status=429, retry_after=0.2, count=2)
    for i in range(5):
        await fake.user_message(channel_id=CHANNEL, content=f"msg {i}")
    await eventually(lambda: len(fake.sent) >= 5, timeout=30, what="five replies")
    await settled(gateway)
    assert [s.content.split("\n")[0] for s in fake.sent] == [
        f"Received: msg {i}" for i in range(5)]


async def test_an_invalidated_session_is_taken_up_again(gateway, fake) -> None:
    await fake.invalidate_session(resumable=True)
    await fake.user_message(channel_id=CHANNEL, content="still listening?")
    (reply,) = await fake.wait_for_sent(1, timeout=20)
    assert reply.content.startswith("Received: still listening?")


async def test_a_thread_created_after_connecting_is_still_a_thread(gateway, fake) -> None:
    fake.add_thread(650, CHANNEL)  # not announced to the client: its cache does not know it
    await fake.user_message(channel_id=650, content="hello from a new thread")
    (reply,) = await fake.wait_for_sent(1)
    assert reply.channel_id == 650
    session = await gateway.store.live_session("agent:main:discord:thread:650:650")
    assert session is not None and session.route.parent_chat_id == str(CHANNEL)


async def test_the_first_words_in_a_thread_said_while_the_gateway_was_down_are_answered_there(
        tmp_path: Path, fake) -> None:
    """A thread nobody had talked to the bot in has no journaled message to read back
    from; after a restart it is read back all the same (the guild shows a message in it
    since the gateway was last alive), and its message joins the thread's session."""
    config = discord_config(tmp_path / "home", fake)
    async with running_gateway(config) as gw:
        await gw.runner.adapters["discord"].inner.wait_connected(timeout=30)
        await fake.user_message(channel_id=CHANNEL, content="hello")
        await fake.wait_for_sent(1)
        await settled(gw)
    await fake.user_message(channel_id=THREAD_A, content="first words here")
    async with running_gateway(config) as gw:
        await gw.runner.adapters["discord"].inner.wait_connected(timeout=30)
        replies = await fake.wait_for_sent(2, timeout=30)
        await settled(gw)
        session = await gw.store.live_session(f"agent:main:discord:thread:{THREAD_A}:{THREAD_A}")
    assert [(r.channel_id, r.content.split("\n")[0]) for r in replies] == [
        (CHANNEL, "Received: hello"), (THREAD_A, "Received: first words here")]
    assert session is not None and session.route.parent_chat_id == str(CHANNEL)


async def test_a_notice_for_a_deleted_channel_is_parked_route_gone(gateway, fake) -> None:
    fake.add_channel(510, "temporary")
    await fake.user_message(channel_id=510, content="/bg sleep 0.5; echo gone")
    await fake.wait_for_sent(1)
    fake.delete_channel(510)

    async def parked() -> list:
        return await gateway.outbox.list("parked")

    (row,) = await eventually_async(parked, timeout=30, what="the parked notice")
    assert row.reason == "route_gone"


async def test_a_reply_still_goes_out_while_the_gateway_reconnects(gateway, fake) -> None:
    await fake.user_message(channel_id=CHANNEL, content="/run sleep 1; echo blip-reply")
    await eventually(lambda: running_command("sleep 1; echo blip-reply", os.getpid()),
                     what="the turn running its command")
    fake.set_gateway_down(True)
    await fake.drop_connection(reconnect_op=True, close_code=4000)
    (reply,) = await fake.wait_for_sent(1, timeout=30)
    assert "blip-reply" in reply.content  # replies use REST, which is still there
    fake.set_gateway_down(False)
