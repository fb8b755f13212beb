"""Under a platform's flood limits a conversation's waiting notices go out together.

A watch job reports thirty matching lines, then its end, into a group the platform
is limiting: Telegram answers the first notice with a 429 ``retry_after``; Discord's
channel takes three posts in a few seconds (its ``X-RateLimit-*`` headers). What
waits meanwhile arrives in few messages, each carrying several notices whole — job
id, the match, the exit code and duration — every notice once, in the order made,
and each row is recorded delivered once, by the one send that carried it. While
notices wait, ``/status``, ``homing status`` and ``/metrics`` say how many and for
how long.
"""

from __future__ import annotations

import asyncio
import re
import sqlite3
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import aiohttp
import pytest

import gateway.delivery.router as router_module
import gateway.platforms.telegram.adapter as telegram_adapter
from gateway.config.settings import Config
from gateway.daemon.assembly import Gateway, running_gateway
from gateway.delivery.notifications import NewNotification, Notification
from gateway.delivery.outbox import waiting_notices
from gateway.platforms.web.adapter import WebAdapter
from gateway.words.return_address import ReturnAddress
from gateway.words.route import Route
from gateway.words.session_key import build_session_key
from tests.conftest import make_config
from tests.fakes.discord_server import FakeDiscord
from tests.fakes.telegram_server import FakeTelegram
from tests.faults import CrashPoint
from tests.helpers import eventually, eventually_async, settled
from tests.memory_platform import MemoryAdapter, SentMessage
from tests.real_daemon import cli_json, home_env
from tests.test_discord import CHANNEL, discord_config
from tests.test_telegram import FORUM, GROUP, telegram_config

LINES = 30
WATCHED = f"/watch RW for i in $(seq 1 {LINES}); do echo RW$i; done; echo end"
IN_ORDER = [*(f"RW{i}" for i in range(1, LINES + 1)), "finished"]
SETTINGS = dict(jobs__watch__cooldown_seconds=0, jobs__watch__max_notices=LINES + 5,
                jobs__watch__global_max_per_minute=10 * LINES, jobs__tail_lines=1)


def reported(text: str) -> list[str]:
    """The notices a message carries, in its order: the watch lines, the job's end."""
    return [t.rstrip(":") for t in re.findall(r"\bRW\d+\b|\bfinished:", text)]


async def the_jobs_rows(gw: Gateway) -> list[Notification]:
    return sorted((n for n in await gw.outbox.list() if n.job_id), key=lambda n: n.id)


async def assert_together_in_order_each_once(gw: Gateway, messages: list[str]) -> None:
    """The notices arrived in order, each once, several of them in one message; the
    rows that went together were recorded by that one send."""
    assert [t for text in messages for t in reported(text)] == IN_ORDER
    merged = [text for text in messages if "notices at once" in text]
    assert merged and len(messages) < len(IN_ORDER)
    rows = await the_jobs_rows(gw)
    assert len(rows) == len(IN_ORDER) and {n.state for n in rows} == {"delivered"}
    assert {n.attempts for n in rows} == {1}  # none was sent twice or went back
    job_id = rows[0].job_id
    text = "\n".join(messages)
    # each notice whole: its job, its match, and for the end its exit code and duration
    assert text.count(f"Job {job_id} output matched") == LINES
    assert re.search(rf"Job {job_id} finished: exit code 0 (after \d|in under 0\.1 s)", text)
    together: dict[int, set[str | None]] = {}
    for n in rows:
        if n.merged_into is not None:
            together.setdefault(n.merged_into, set()).add(n.sent_message_id)
    assert len(together) == len(merged)
    assert all(len(ids) == 1 and None not in ids for ids in together.values())


@pytest.fixture
async def telegram_fake() -> AsyncIterator[FakeTelegram]:
    async with FakeTelegram() as server:
        yield server


async def test_on_telegram_notices_waiting_out_a_flood_wait_go_together_in_order(
        tmp_path: Path, telegram_fake: FakeTelegram) -> None:
    fake = telegram_fake
    # the first notice (RW1) is told to wait a few seconds; the rest arrive meanwhile
    fake.fail_next_send(chat_id=GROUP, status=429, retry_after=4, text="RW1")
    async with running_gateway(telegram_config(tmp_path / "home", fake, **SETTINGS)) as gw:
        await gw.runner.adapters["telegram"].wait_connected()
        fake.user_message(chat_id=GROUP, chat_type="supergroup", text=WATCHED)
        await eventually(lambda: any(" finished: " in s.text for s in fake.sent), timeout=30,
                         what="the job's end")
        await settled(gw, timeout=20)
        await assert_together_in_order_each_once(
            gw, [s.text for s in fake.sent if s.chat_id == GROUP and "Job " in s.text])


def limited_telegram(home: Path, fake: FakeTelegram, *, per_minute: int) -> Config:
    """Telegram, with a group taking ``per_minute`` messages a minute."""
    return make_config(
        home, platforms__telegram__enabled=True, platforms__telegram__token=fake.token,
        platforms__telegram__base_url=fake.base_url,
        platforms__telegram__group_messages_per_minute=per_minute)


async def addresses_in(gw: Gateway, routes: dict[int, Route]) -> dict[int, ReturnAddress]:
    """A live session for each route, as a conversation there would have."""
    addresses = {}
    for name, route in routes.items():
        key = build_session_key(route)
        session = await gw.store.get_or_create(key, route)
        addresses[name] = ReturnAddress(key, session.id, route)
    return addresses


async def all_delivered(gw: Gateway, count: int) -> None:
    async def delivered() -> bool:
        rows = await gw.outbox.list()
        return len(rows) == count and {n.state for n in rows} == {"delivered"}

    await eventually_async(delivered, timeout=30, what=f"the {count} notices delivered")
    await settled(gw, timeout=20)


#: a forum group's topics, each with a few notices: together more than the group takes
TOPICS = (42, 43, 44, 45, 46)
PER_TOPIC = 4

def crash_at_the_merged_record(gw: Gateway, monkeypatch: pytest.MonkeyPatch) -> CrashPoint:
    """Dies right after a merged message's send, before anything of it is recorded: its
    transcript line and sent ids, and the rows' outcomes."""
    crash = CrashPoint()
    record_sent = gw.store.record_sent

    async def dies_before_the_record(session_id: str, role: str, text: str,
                                     **kw: Any) -> None:
        if "notices at once" not in text:
            await record_sent(session_id, role, text, **kw)
        # else: the process dies before this write (and the sent ids with it) commits

    async def crash_at_the_outcome(claimer: str, outcomes: Any) -> None:
        crash.crash("after the merged send, before anything of it was recorded")

    monkeypatch.setattr(gw.store, "record_sent", dies_before_the_record)
    monkeypatch.setattr(gw.outbox, "record_outcomes", crash_at_the_outcome)
    return crash


async def test_in_a_forum_group_over_its_flood_limit_each_topics_notices_go_together_there(
        tmp_path: Path, telegram_fake: FakeTelegram) -> None:
    """Telegram's limit is the whole group's: five topics with four notices each want 20
    messages of a group that takes 16 a minute, though no topic alone wants more than
    four. Each topic's notices go in one message to that topic, never to another."""
    fake = telegram_fake
    config = limited_telegram(tmp_path / "home", fake, per_minute=len(TOPICS) * PER_TOPIC - 4)
    async with running_gateway(config) as gw:
        await gw.runner.adapters["telegram"].wait_connected()
        addresses = await addresses_in(gw, {topic: Route(
            "telegram", "group", str(FORUM), thread_id=str(topic)) for topic in TOPICS})
        # made in turns, topic after topic, as a busy forum's jobs end
        await gw.outbox.produce([
            NewNotification(f"t{topic}n{i}:completion:0", "completion", addresses[topic],
                            f"Job t{topic}n{i} finished: exit code 0 after {i} s.",
                            job_id=f"t{topic}n{i}")
            for i in range(1, PER_TOPIC + 1) for topic in TOPICS])

        await all_delivered(gw, len(TOPICS) * PER_TOPIC)
    sent = [s for s in fake.sent if s.chat_id == FORUM and "Job " in s.text]
    assert sorted(int(s.message_thread_id or 0) for s in sent) == list(TOPICS)
    for s in sent:
        carried = re.findall(r"\bJob t(\d+)n(\d)\b", s.text)
        assert {int(topic) for topic, _ in carried} == {s.message_thread_id}
        assert [int(i) for _, i in carried] == list(range(1, PER_TOPIC + 1))


async def test_notices_go_together_only_as_many_as_telegram_shows_in_one_message(
        tmp_path: Path, telegram_fake: FakeTelegram) -> None:
    """Telegram measures a message as it shows it, in UTF-16 units: four notices of
    700 emoji each (1,400 units) fit in 4,096 characters of Python but not in one
    message. Each
    message carries the notices it says it carries, each whole, none cut off into the
    next message."""
    fake = telegram_fake
    async with running_gateway(limited_telegram(tmp_path / "home", fake, per_minute=2)) as gw:
        await gw.runner.adapters["telegram"].wait_connected()
        (address,) = (await addresses_in(gw, {0: Route("telegram", "group", str(GROUP))})
                      ).values()
        await gw.outbox.produce([
            NewNotification(f"e{i}:completion:0", "completion", address,
                            f"Job e{i} finished: exit code 0 after 1 s. {'😀' * 700} end-e{i}",
                            job_id=f"e{i}") for i in range(1, 5)])
        await all_delivered(gw, 4)
    sent = [s.text for s in fake.sent if s.chat_id == GROUP]
    assert [i for text in sent for i in re.findall(r"\bJob e(\d)", text)] == ["1", "2", "3", "4"]
    assert any("notices at once" in text for text in sent)
    for text in sent:
        carried = re.findall(r"\bJob e(\d)", text)
        assert carried, "a message with no notice's start: one was cut in two"
        assert re.findall(r"\bend-e(\d)", text) == carried
        assert text.startswith(f"{len(carried)} notices at once") or len(carried) == 1


@pytest.fixture
async def discord_fake(discord_endpoints: None) -> AsyncIterator[FakeDiscord]:
    async with FakeDiscord() as server:
        server.add_channel(CHANNEL, "builds")
        server.limit_posts(CHANNEL, posts=3, per=3.0)
        yield server


async def test_on_discord_notices_over_a_channels_rate_limit_go_together_in_order(
        tmp_path: Path, discord_fake: FakeDiscord) -> None:
    fake = discord_fake
    async with running_gateway(discord_config(tmp_path / "home", fake, **SETTINGS)) as gw:
        await gw.runner.adapters["discord"].wait_connected(timeout=30)
        await fake.user_message(channel_id=CHANNEL, content=WATCHED)
        await eventually(lambda: any(" finished: " in (s.content or "") for s in fake.sent),
                         timeout=40, what="the job's end")
        await settled(gw, timeout=20)
        await assert_together_in_order_each_once(
            gw, [s.content for s in fake.sent
                 if s.channel_id == CHANNEL and s.content and "Job " in s.content])


async def test_waiting_notices_show_in_status_the_cli_and_metrics(
        tmp_path: Path, telegram_fake: FakeTelegram, http: aiohttp.ClientSession,
        monkeypatch: pytest.MonkeyPatch) -> None:
    fake = telegram_fake
    monkeypatch.setattr(telegram_adapter, "SEND", replace(telegram_adapter.SEND,
                                                          delays=(0.01,)))
    monkeypatch.setattr(router_module, "REDELIVERY", router_module.RetryPolicy((0.2,)))
    # the second notice is refused until the test lets it through: the rest wait behind it
    fake.fail_next_send(chat_id=GROUP, status=502, description="Bad Gateway", text="RW2",
                        count=10_000)
    home = tmp_path / "home"
    config = telegram_config(home, fake, **SETTINGS)
    async with running_gateway(config) as gw:
        await gw.runner.adapters["telegram"].wait_connected()
        fake.user_message(chat_id=GROUP, chat_type="supergroup", text=WATCHED)

        async def everything_after_rw1_waits() -> list:
            waiting = await waiting_notices(gw.outbox.db)
            return waiting if waiting and waiting[0].count == len(IN_ORDER) - 1 else []

        (waiting,) = await eventually_async(everything_after_rw1_waits, timeout=30,
                                            what="the notices waiting behind RW2")
        key = waiting.session_key
        assert key.startswith(f"agent:main:telegram:group:{GROUP}")

        # RW2, refused while the test holds it back, has waited since it was made: at
        # least two waits for its retry by now
        async def refused_thrice() -> bool:
            return any("RW2" in n.text and n.attempts >= 3 for n in await gw.outbox.list())

        await eventually_async(refused_thrice, timeout=30, what="RW2 refused three times")
        oldest_made = min(n.created_at for n in await gw.outbox.list()
                          if n.state in ("pending", "claimed"))

        def waited(before: float, after: float, shown: float, rounding: float) -> bool:
            """``shown`` is how long RW2 has waited when it was asked, not a constant."""
            return before - oldest_made - rounding <= shown <= after - oldest_made + rounding

        web = gw.runner.adapters["web"].inner  # the platform's own, behind the fence
        assert isinstance(web, WebAdapter)
        before = time.time()
        async with http.get(f"http://127.0.0.1:{web.port}/metrics") as response:
            metrics = await response.text()
        after = time.time()
        # by platform: a series per conversation would grow without bound
        assert f'homing_notifications_waiting{{platform="telegram"}} {len(IN_ORDER) - 1}.0' \
            in metrics
        assert key not in metrics
        (oldest,) = re.findall(
            r'homing_notification_oldest_wait_seconds{platform="telegram"} (\S+)', metrics)
        assert waited(before, after, float(oldest), rounding=0.0)

        before = time.time()
        status = await cli_json("status", env=home_env(home))
        after = time.time()
        (shown,) = status["waiting_notices"]
        assert (shown["session_key"], shown["count"]) == (key, len(IN_ORDER) - 1)
        assert waited(before, after, shown["oldest_wait_seconds"], rounding=0.05)

        fake.user_message(chat_id=GROUP, chat_type="supergroup", text="/status")
        (answer,) = await eventually(lambda: [s.text for s in fake.sent
                                              if "session key:" in s.text], timeout=20,
                                     what="the /status answer")
        assert re.search(rf"notices waiting here: {len(IN_ORDER) - 1}, the oldest for "
                         rf"\d+ min \d+ s", answer)

        fake.stop_failing_sends()
        await eventually(lambda: any(" finished: " in s.text for s in fake.sent), timeout=30,
                         what="the job's end")
        await settled(gw, timeout=20)
        assert await waiting_notices(gw.outbox.db) == []


async def a_merged_send_dies_before_its_record(
        config: Config, adapter: MemoryAdapter, chat: Route,
        monkeypatch: pytest.MonkeyPatch) -> SentMessage:
    """A life that sends four notices as one message and dies before anything of that
    send is recorded; the message it sent."""
    adapter.room = 0  # the chat takes nothing more now: its notices go together
    async with running_gateway(config, [adapter]) as gw:
        assert await adapter.receive("hello", chat) == "handled"
        session = await gw.store.live_session("agent:main:memory:dm:1")
        assert session is not None
        crash = crash_at_the_merged_record(gw, monkeypatch)
        address = ReturnAddress(session.session_key, session.id, chat)
        await gw.outbox.produce([
            NewNotification(f"j{i}:completion:0", "completion", address,
                            f"Job j{i} finished: exit code {i} after {i} s.", job_id=f"j{i}")
            for i in range(1, 5)])
        await crash.wait()
    (merged,) = [m for m in adapter.sent if m.kind == "notification"]
    assert [f"j{i}" in merged.text for i in range(1, 5)] == [True] * 4
    adapter.room = None  # a new life's limiter knows of no limit yet
    return merged


async def delivered_after_the_restart(config: Config, adapter: MemoryAdapter,
                                      count: int) -> list[Notification]:
    async with running_gateway(config, [adapter]) as gw:
        async def delivered() -> bool:
            rows = await gw.outbox.list()
            return len(rows) == count and {n.state for n in rows} == {"delivered"}

        await eventually_async(delivered, what="the notices delivered after the restart")
        await gw.router.wait_idle()
        return await gw.outbox.list()


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
async def test_a_crash_before_a_merged_send_is_recorded_sends_it_merged_again_never_in_parts(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest,
        backend: str) -> None:
    chat = Route("memory", "dm", "1", user_id="1")
    store = {"store__url": request.getfixturevalue("pg_fresh_url")} if backend != "sqlite" else {}
    config = make_config(tmp_path / "home", platforms__web__enabled=False, **store)
    adapter = MemoryAdapter("memory")
    merged = await a_merged_send_dies_before_its_record(config, adapter, chat, monkeypatch)
    first_life = len(adapter.sent)
    rows = await delivered_after_the_restart(config, adapter, 4)
    # the merged message once more, whole — none of its notices on its own as well
    assert [m.text for m in adapter.sent[first_life:]] == [merged.text]
    assert len({n.sent_message_id for n in rows}) == 1 and {n.attempts for n in rows} == {1}


async def test_a_merged_message_sent_again_is_the_same_post_though_its_first_notice_was_taken(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """After the crash, ``process wait`` took the first notice of the merged message
    (its completion returned inline): what is sent again carries the other three, under
    the same name, so a platform that deduplicates (Discord's nonce) does not post
    them a second time."""
    chat = Route("memory", "dm", "1", user_id="1")
    config = make_config(tmp_path / "home", platforms__web__enabled=False)
    adapter = MemoryAdapter("memory")
    merged = await a_merged_send_dies_before_its_record(config, adapter, chat, monkeypatch)
    first_life = len(adapter.sent)
    with sqlite3.connect(config.state_db) as db:  # as Outbox.consume writes it
        db.execute("UPDATE notifications SET state = 'delivered', reason = 'consumed' "
                   "WHERE job_id = 'j1'")
    await delivered_after_the_restart(config, adapter, 4)
    (again,) = adapter.sent[first_life:]
    assert jobs_in(again.text) == ["j2", "j3", "j4"]
    assert again.dedupe_key == merged.dedupe_key is not None

def jobs_in(text: str) -> list[str]:
    return re.findall(r"\bj\d\b", text)


async def test_under_a_flood_limit_an_ended_sessions_notices_never_join_the_new_sessions(
        tmp_path: Path) -> None:
    """After ``/new``, late notices of the ended session and notices of the new one wait
    together: each message goes to one owner — the ended session's labelled, the live
    session's not — and is written in that owner's transcript only."""
    chat = Route("memory", "dm", "1", user_id="1")
    key = "agent:main:memory:dm:1"
    adapter = MemoryAdapter("memory")
    adapter.room = 0  # the chat takes nothing more now: its notices go together
    config = make_config(tmp_path / "home", platforms__web__enabled=False)
    async with running_gateway(config, [adapter]) as gw:
        assert await adapter.receive("hello", chat) == "handled"
        ended = await gw.store.live_session(key)
        assert ended is not None
        assert await adapter.receive("/new", chat) == "handled"
        live = await gw.store.live_session(key)
        assert live is not None and live.id != ended.id

        def notice(i: int, session_id: str) -> NewNotification:
            return NewNotification(f"j{i}:completion:0", "completion",
                                   ReturnAddress(key, session_id, chat),
                                   f"Job j{i} finished: exit code 0 after {i} s.", job_id=f"j{i}")

        await gw.outbox.produce([notice(1, ended.id), notice(2, live.id), notice(3, live.id),
                                 notice(4, ended.id), notice(5, ended.id)])

        async def delivered() -> bool:
            rows = [n for n in await gw.outbox.list() if n.job_id]
            return len(rows) == 5 and {n.state for n in rows} == {"delivered"}

        await eventually_async(delivered, what="the five notices delivered")
        await gw.router.wait_idle()
        said = {s.id: "\n".join(line.text for line in await gw.store.messages(s.id))
                for s in (ended, live)}
    sent = [m.text for m in adapter.sent if m.kind == "notification"]
    assert [jobs_in(text) for text in sent] == [["j1"], ["j2", "j3"], ["j4", "j5"]]
    assert ["from an ended session" in text for text in sent] == [True, False, True]
    assert jobs_in(said[ended.id]) == ["j1", "j4", "j5"]
    assert jobs_in(said[live.id]) == ["j2", "j3"]


async def test_notices_queued_one_by_one_go_together_when_the_chat_is_short_as_they_go(
        tmp_path: Path) -> None:
    """Three topics' notices came while their lanes were busy and the chat had room,
    so each was queued on its own; when the lanes free, the chat takes one message
    more. Each topic's waiting notices then go together, in order, in one message
    there — not each in a message of its own, waiting out the limit one by one."""
    config = make_config(tmp_path / "home", platforms__web__enabled=False)
    adapter = MemoryAdapter("memory")
    adapter.room = 100
    topics = ("42", "43", "44")
    async with running_gateway(config, [adapter]) as gw:
        addresses = await addresses_in(gw, {int(topic): Route(
            "memory", "group", "1", thread_id=topic) for topic in topics})
        busy = asyncio.Event()
        lanes = [gw.runner.run_in_lane(a.session_key, busy.wait) for a in addresses.values()]
        for i in range(1, 6):
            for topic, address in addresses.items():
                await gw.outbox.produce([NewNotification(
                    f"t{topic}n{i}:completion:0", "completion", address,
                    f"Job t{topic}n{i} finished: exit code 0 after {i} s.",
                    job_id=f"t{topic}n{i}")])
                await eventually(lambda a=address, i=i: gw.runner.lanes.waiting(
                    a.session_key) == i, what="the notice queued on its own")
        adapter.room = 1  # (a flood limit met meanwhile)
        busy.set()
        await asyncio.gather(*lanes)
        await all_delivered(gw, len(topics) * 5)
    for topic in topics:
        sent = [m.text for m in adapter.sent_to(Route("memory", "group", "1", thread_id=topic))
                if m.kind == "notification"]
        assert len(sent) == 1 and sent[0].startswith("5 notices at once")
        assert re.findall(r"\bJob t(\d+)n(\d)\b", sent[0]) == [(topic, str(i))
                                                              for i in range(1, 6)]
