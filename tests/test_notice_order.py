"""A conversation's notices keep their order when one of them is refused for a while.

A watch job reports six matching lines and then its end. The platform refuses the
second watch notice again and again (5xx: the adapter spends its tries, the notice
goes back to the outbox for a retry, and again); the notices behind it wait, other
conversations go on, and once the platform takes it the refused notice goes first:
everything arrives once, in the order it was made. On Telegram and Discord, whose
servers can refuse a send. The web chat's sends cannot be refused (a frame to the
open tabs, and the transcript line); its conversation here is one of the others that
go on meanwhile.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import aiohttp
import pytest

import gateway.delivery.router as router_module
import gateway.platforms.discord.adapter as discord_adapter
import gateway.platforms.telegram.adapter as telegram_adapter
from gateway.daemon.assembly import Gateway, running_gateway
from gateway.platforms.web.adapter import WebAdapter
from tests.fakes.discord_server import FakeDiscord
from tests.fakes.telegram_server import FakeTelegram
from tests.helpers import eventually, eventually_async, settled
from tests.test_discord import CHANNEL, DM, discord_config
from tests.test_telegram import ALICE, GROUP, telegram_config
from tests.test_web import Tab, open_tab

#: six watch notices (RW1 … RW6), then the completion; its output shows the last line only
WATCHED = "/watch RW for i in 1 2 3 4 5 6; do echo RW$i; done; echo end"
IN_ORDER = ["RW1", "RW2", "RW3", "RW4", "RW5", "RW6", "finished"]
#: the second watch notice, and no other (the completion shows only "end")
REFUSED = "RW2"
SETTINGS = dict(jobs__watch__cooldown_seconds=0, jobs__tail_lines=1)


@pytest.fixture(autouse=True)
def quick_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    """The real number of tries everywhere, with waits short enough for a test."""
    monkeypatch.setattr(router_module, "REDELIVERY", router_module.RetryPolicy(
        tuple(d / 20 for d in router_module.REDELIVERY.delays)))
    monkeypatch.setattr(telegram_adapter, "SEND", replace(telegram_adapter.SEND,
                                                          delays=(0.01,)))
    for name in ("SEND", "SEND_LATER_PART"):
        policy = getattr(discord_adapter, name)
        monkeypatch.setattr(discord_adapter, name, replace(policy, delays=(0.01,)))


def what(text: str) -> str:
    """Which notice a message is: the watch line it reports, or the job's end."""
    if " finished: " in text:
        return "finished"
    found = re.search(r"\bRW\d\b", text)
    return found.group(0) if found else text


async def refused_and_waiting(gw: Gateway) -> bool:
    """The refused notice went back to the outbox and was tried again, and refused."""
    rows = [n for n in await gw.outbox.list() if n.kind == "watch_match" and REFUSED in n.text]
    return bool(rows) and rows[0].attempts >= 2 and rows[0].state != "delivered"


async def web_notice(tab: Tab) -> str:
    while True:
        frame = await tab.frame(timeout=20)
        if frame.get("kind") == "notification":
            return str(frame["text"])


async def other_conversations_go_on(gw: Gateway, http: aiohttp.ClientSession) -> Tab:
    """A web tab starts a job: its notice is not held by the refused one."""
    web = gw.runner.adapters["web"].inner  # the platform's own, behind the fence
    assert isinstance(web, WebAdapter)
    tab = await open_tab(http, f"http://127.0.0.1:{web.port}")
    await tab.say("/bg echo web-side")
    return tab


async def assert_each_once_in_order(gw: Gateway, texts: list[str]) -> None:
    assert [what(t) for t in texts] == IN_ORDER
    rows = {what(n.text): n for n in await gw.outbox.list() if n.job_id
            and what(n.text) in IN_ORDER}
    assert {n.state for n in rows.values()} == {"delivered"}
    # the ones that waited behind it went back untried: one attempt each, their delivery
    assert rows[REFUSED].attempts > 2
    assert {k: n.attempts for k, n in rows.items() if k != REFUSED} == {
        k: 1 for k in IN_ORDER if k != REFUSED}


@pytest.fixture
async def telegram_fake() -> AsyncIterator[FakeTelegram]:
    async with FakeTelegram() as server:
        yield server


async def test_on_telegram_a_refused_notice_holds_the_ones_behind_it_and_goes_first(
        tmp_path: Path, telegram_fake: FakeTelegram, http: aiohttp.ClientSession) -> None:
    fake = telegram_fake
    fake.fail_next_send(chat_id=GROUP, status=502, description="Bad Gateway", text=REFUSED,
                        count=10_000)
    async with running_gateway(telegram_config(tmp_path / "home", fake, **SETTINGS)) as gw:
        await gw.runner.adapters["telegram"].wait_connected()
        fake.user_message(chat_id=GROUP, chat_type="supergroup", text=WATCHED)
        await eventually_async(lambda: refused_and_waiting(gw), timeout=30,
                               what="the notice refused, retried and refused")
        fake.user_message(chat_id=ALICE, text="/bg echo dm-side")
        tab = await other_conversations_go_on(gw, http)
        assert "web-side" in await web_notice(tab)
        await eventually(lambda: [s for s in fake.sent if s.chat_id == ALICE
                                  and "dm-side" in s.text], timeout=20, what="the DM's notice")
        assert [what(s.text) for s in fake.sent if s.chat_id == GROUP
                and s.text.startswith("Job ")] == ["RW1"]  # the rest wait behind RW2
        fake.stop_failing_sends()  # Telegram takes it again
        await eventually(lambda: [s for s in fake.sent if " finished: " in s.text
                                  and s.chat_id == GROUP], timeout=30, what="the completion")
        await settled(gw, timeout=20)
        await assert_each_once_in_order(gw, [s.text for s in fake.sent if s.chat_id == GROUP
                                             and s.text.startswith("Job ")])


@pytest.fixture
async def discord_fake(discord_endpoints: None) -> AsyncIterator[FakeDiscord]:
    async with FakeDiscord() as server:
        server.add_channel(CHANNEL, "builds")
        yield server


async def test_on_discord_a_refused_notice_holds_the_ones_behind_it_and_goes_first(
        tmp_path: Path, discord_fake: FakeDiscord, http: aiohttp.ClientSession) -> None:
    fake = discord_fake
    # 503: discord.py does not retry it itself, so every refusal reaches the adapter
    fake.fail_next_post(channel_id=CHANNEL, status=503, message="upstream unavailable",
                        content=REFUSED, count=10_000)
    async with running_gateway(discord_config(tmp_path / "home", fake, **SETTINGS)) as gw:
        await gw.runner.adapters["discord"].wait_connected(timeout=30)
        await fake.user_message(channel_id=CHANNEL, content=WATCHED)
        await eventually_async(lambda: refused_and_waiting(gw), timeout=30,
                               what="the notice refused, retried and refused")
        await fake.user_message(channel_id=DM, guild=False, content="/bg echo dm-side")
        tab = await other_conversations_go_on(gw, http)
        assert "web-side" in await web_notice(tab)
        await eventually(lambda: [s for s in fake.sent if s.channel_id == DM
                                  and "dm-side" in s.content], timeout=20,
                         what="the DM's notice")
        assert [what(s.content) for s in fake.sent if s.channel_id == CHANNEL
                and s.content.startswith("Job ")] == ["RW1"]  # the rest wait behind RW2
        fake.stop_failing_posts()  # Discord takes it again
        await eventually(lambda: [s for s in fake.sent if " finished: " in s.content
                                  and s.channel_id == CHANNEL], timeout=30,
                         what="the completion")
        await settled(gw, timeout=20)
        await assert_each_once_in_order(gw, [s.content for s in fake.sent
                                             if s.channel_id == CHANNEL
                                             and s.content.startswith("Job ")])
