"""The one retry policy, and the send it makes patient: a long Discord message's later
parts ride out server errors the first part would give up on."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import pytest

import gateway.platforms.discord.adapter as discord_adapter
from gateway.daemon.assembly import Gateway, running_gateway
from gateway.retry import RetryPolicy
from gateway.words.route import Route
from tests.fakes.discord_server import FakeDiscord
from tests.test_discord import CHANNEL, discord_config


def test_tries_waits_and_the_last_try() -> None:
    policy = RetryPolicy((0.5, 1.0, 2.0), attempts=5)
    assert list(policy.tries()) == [0, 1, 2, 3, 4]
    assert [policy.delay(n) for n in range(5)] == [0.5, 1.0, 2.0, 2.0, 2.0]  # the last repeats
    assert [policy.is_last(n) for n in range(5)] == [False] * 4 + [True]
    assert policy.times(3).attempts == 15 and policy.times(3).delays == policy.delays


def test_until_it_works_and_exponential_with_jitter() -> None:
    forever = RetryPolicy((1.0, 5.0))
    tries = forever.tries()
    assert [next(tries) for _ in range(100)][-1] == 99 and not forever.is_last(10**6)
    assert forever.times(3) is forever
    grows = RetryPolicy.exponential(1.0, 4, jitter=0.2)
    assert grows.attempts == 4 and grows.delays == (1.0, 2.0, 4.0)
    assert all(0.8 * 4.0 <= grows.delay(5) <= 1.2 * 4.0 for _ in range(200))


@pytest.fixture
async def fake(discord_endpoints: None) -> AsyncIterator[FakeDiscord]:
    async with FakeDiscord() as server:
        server.add_channel(CHANNEL, "builds")
        yield server


@pytest.fixture
async def gateway(tmp_path: Path, fake: FakeDiscord,
                  monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Gateway]:
    # the real number of tries, with waits short enough for a test
    for name in ("SEND", "SEND_LATER_PART"):
        policy = getattr(discord_adapter, name)
        monkeypatch.setattr(discord_adapter, name, replace(policy, delays=(0.01,)))
    async with running_gateway(discord_config(tmp_path / "home", fake)) as gw:
        await gw.runner.adapters["discord"].wait_connected(timeout=30)
        yield gw


async def test_part_two_rides_out_four_server_errors_and_arrives_once_in_order(
        gateway: Gateway, fake: FakeDiscord) -> None:
    adapter = gateway.runner.adapters["discord"].inner  # the platform's own, behind the fence
    assert isinstance(adapter, discord_adapter.DiscordAdapter)
    route = Route("discord", "group", str(CHANNEL))
    # 503: discord.py does not retry it itself, so every failure reaches the adapter
    fake.fail_next_post(channel_id=CHANNEL, status=503, message="upstream unavailable",
                        count=4, after=1)
    result = await adapter.send_parts(route, ["part one", "part two", "part three"],
                                      first=True)
    assert result.ok
    assert [s.content for s in fake.sent] == ["part one", "part two", "part three"]
    assert result.message_id == str(fake.sent[-1].message_id)


async def test_a_first_part_gives_up_after_its_four_tries(
        gateway: Gateway, fake: FakeDiscord) -> None:
    adapter = gateway.runner.adapters["discord"].inner  # the platform's own, behind the fence
    assert isinstance(adapter, discord_adapter.DiscordAdapter)
    fake.fail_next_post(channel_id=CHANNEL, status=503, message="upstream unavailable",
                        count=4)
    result = await adapter.send_parts(Route("discord", "group", str(CHANNEL)), ["only"],
                                      first=True)
    assert not result.ok and "server error" in (result.error or "")
    assert fake.sent == []  # and the caller (the outbox) sends it again later, whole
