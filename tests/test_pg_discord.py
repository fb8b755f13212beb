"""Discord with two instances on one PostgreSQL store: one gateway session per bot.

Discord would give each instance a session of its own and dispatch every message to
both; the lease ``discord:<bot id>`` keeps it to one. Both instances send over REST,
and when the holder stops, the other opens the session and reads back what was said
in between.
"""

from __future__ import annotations

from contextlib import AsyncExitStack
from pathlib import Path

from gateway.config.settings import Config
from gateway.daemon.assembly import Gateway, running_gateway
from gateway.platforms.discord.adapter import DiscordAdapter
from tests.conftest import make_config
from tests.fakes.discord_server import FakeDiscord
from tests.helpers import eventually
from tests.test_discord import ALICE, CHANNEL, fake  # noqa: F401  (fixture)


def answers(server: FakeDiscord, text: str) -> list[str]:
    return [s.content for s in server.sent if s.content.startswith(f"Received: {text}")]


def _config(home: Path, server: FakeDiscord, url: str, name: str) -> Config:
    return make_config(home, store__url=url, instance__name=name,
                       cluster__lease_seconds=3.0, cluster__failover_seconds=3.0,
                       platforms__discord__enabled=True, platforms__discord__token=server.token,
                       platforms__discord__api_base=server.api_base,
                       platforms__discord__gateway_url=server.gateway_url,
                       platforms__discord__guild_ready_timeout_seconds=server.guild_ready_timeout,
                       platforms__discord__allowed_users=[str(ALICE)])


def _adapter(gw: Gateway) -> DiscordAdapter:
    adapter = gw.runner.adapters["discord"].inner  # the platform's own, behind the fence
    assert isinstance(adapter, DiscordAdapter)
    return adapter


async def test_two_instances_keep_one_gateway_session_and_hand_it_over(
        tmp_path: Path, fake: FakeDiscord, pg_fresh_url: str) -> None:  # noqa: F811
    async with AsyncExitStack() as stack:
        one = await stack.enter_async_context(running_gateway(
            _config(tmp_path / "a", fake, pg_fresh_url, "vps1")))
        await _adapter(one).wait_connected(timeout=30)
        await fake.wait_until_ready()
        two = await stack.enter_async_context(running_gateway(
            _config(tmp_path / "b", fake, pg_fresh_url, "vps2")))
        await _adapter(two).wait_connected(timeout=30)  # for sending, at once
        assert not _adapter(two).gateway_here

        await fake.user_message(channel_id=CHANNEL, content="first", author_id=ALICE)
        await eventually(lambda: answers(fake, "first"), timeout=30, what="the answer")
        assert fake.identify_count == 1  # the second instance opened no session

        await fake.user_message(channel_id=CHANNEL, content="/bg echo from-vps2-side",
                                author_id=ALICE)
        await eventually(lambda: [s for s in fake.sent if "from-vps2-side" in s.content
                                  and s.content.startswith("Job ")], timeout=30,
                         what="the job's notice")

        await _adapter(one).disconnect()  # the holder stops: its lease goes with it
        await fake.user_message(channel_id=CHANNEL, content="while moving", author_id=ALICE)
        await eventually(lambda: _adapter(two).gateway_here, timeout=30,
                         what="the session on the second instance")
        await eventually(lambda: answers(fake, "while moving"), timeout=30,
                         what="the message said while the session moved")
        await fake.user_message(channel_id=CHANNEL, content="after", author_id=ALICE)
        await eventually(lambda: answers(fake, "after"), timeout=30, what="the answer")
        assert [len(answers(fake, t)) for t in ("first", "while moving", "after")] == [1, 1, 1]
        assert fake.identify_count == 2  # one session at a time

