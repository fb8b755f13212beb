"""The Telegram adapter: the real python-telegram-bot against a local fake Bot API."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from gateway.config.settings import Config
from gateway.daemon.assembly import Gateway, running_gateway
from gateway.platforms.telegram.adapter import TelegramAdapter
from tests.conftest import make_config
from tests.fakes.telegram_server import FakeTelegram, SentRecord
from tests.helpers import eventually, eventually_async, running_command, settled, write_lock_held
from tests.test_cli import _env, run_cli

FORUM, OTHER_FORUM, GROUP = -1001, -1002, -1003
ALICE = 1


@pytest.fixture
async def fake() -> AsyncIterator[FakeTelegram]:
    async with FakeTelegram() as server:
        yield server


def telegram_config(home: Path, fake: FakeTelegram, **overrides: object) -> Config:
    return make_config(
        home, platforms__telegram__enabled=True, platforms__telegram__token=fake.token,
        platforms__telegram__base_url=fake.base_url,
        platforms__telegram__base_file_url=fake.base_file_url,
        platforms__telegram__allowed_users=[str(ALICE)],
        platforms__telegram__messages_per_second=1000,
        platforms__telegram__group_messages_per_minute=1000, **overrides)


@pytest.fixture
async def gateway(tmp_path: Path, fake: FakeTelegram) -> AsyncIterator[Gateway]:
    async with running_gateway(telegram_config(tmp_path / "home", fake)) as gw:
        adapter = gw.runner.adapters["telegram"].inner  # the platform's own, behind the fence
        assert isinstance(adapter, TelegramAdapter)
        await adapter.wait_connected()
        yield gw


def daemon_env(home: Path, fake: FakeTelegram) -> dict[str, str]:
    """A home whose config runs the real daemon (``homing run``) against the fake."""
    home.mkdir()
    (home / "config.yaml").write_text(
        "platforms:\n  web: {port: 0}\n"
        f"  telegram: {{enabled: true, token: '{fake.token}', base_url: '{fake.base_url}', "
        f"base_file_url: '{fake.base_file_url}', allowed_users: ['{ALICE}']}}\n")
    return _env(home)


def to(fake: FakeTelegram, chat_id: int, thread: int | None = None) -> list[SentRecord]:
    return [s for s in fake.sent if s.chat_id == chat_id and s.message_thread_id == thread]


def notices(fake: FakeTelegram) -> list[SentRecord]:
    return [s for s in fake.sent if s.text.startswith("Job ")]


async def all_taken_and_settled(gw: Gateway, fake: FakeTelegram) -> None:
    """Until every update is acknowledged — so the adapter took it in, or left it out on
    purpose — and the gateway has nothing left to do: what was sent by then is all
    that will be."""
    await eventually(lambda: not fake.pending_updates, what="every update acknowledged")
    await settled(gw)


async def test_notices_reach_their_own_chat_and_topic(gateway, fake) -> None:
    starts = {
        "t42": dict(chat_id=FORUM, chat_type="supergroup", is_forum=True, thread_id=42,
                    is_topic_message=True),
        "t17": dict(chat_id=FORUM, chat_type="supergroup", is_forum=True, thread_id=17,
                    is_topic_message=True),
        "general": dict(chat_id=FORUM, chat_type="supergroup", is_forum=True),
        "other42": dict(chat_id=OTHER_FORUM, chat_type="supergroup", is_forum=True,
                        thread_id=42, is_topic_message=True),
        "dm": dict(chat_id=ALICE),
    }
    anchors = {}
    for name, where in starts.items():
        sent = fake.user_message(text=f"/bg sleep 0.5; echo marker-{name}", **where)
        anchors[name] = sent["message_id"]
    for i in range(6):  # chatter in other topics meanwhile
        fake.user_message(chat_id=FORUM, chat_type="supergroup", is_forum=True,
                          thread_id=5 + i % 2, is_topic_message=True, text=f"chatter {i}")
    await eventually(lambda: len(notices(fake)) == len(starts), timeout=30,
                     what="every notice")
    expected = {"t42": (FORUM, 42), "t17": (FORUM, 17), "general": (FORUM, None),
                "other42": (OTHER_FORUM, 42), "dm": (ALICE, None)}
    for name, (chat, thread) in expected.items():
        (notice,) = [n for n in notices(fake) if f"marker-{name}" in n.text]
        assert (notice.chat_id, notice.message_thread_id) == (chat, thread), name
        assert notice.reply_to_message_id == anchors[name], name


async def test_flood_control_and_bad_gateways_lose_nothing_and_keep_order(
        gateway, fake, monkeypatch: pytest.MonkeyPatch) -> None:
    import gateway.platforms.telegram.adapter as telegram
    from gateway.retry import RetryPolicy

    # a send's own backoff after a 502, a tenth as long (Telegram's retry_after is waited out
    # in full)
    monkeypatch.setattr(telegram, "SEND", RetryPolicy(
        tuple(d / 10 for d in telegram.SEND.delays), telegram.SEND.attempts))
    fake.fail_next_send(chat_id=ALICE, status=429, retry_after=1, count=2)
    fake.fail_next_send(chat_id=ALICE, status=502, description="Bad Gateway")
    fake.fail_next_send(chat_id=FORUM, status=429, retry_after=1)
    for i in range(6):
        fake.user_message(chat_id=ALICE, text=f"dm {i}")
        fake.user_message(chat_id=FORUM, chat_type="supergroup", text=f"group {i}")
    await eventually(lambda: len(fake.sent) >= 12, timeout=20, what="twelve replies")
    await all_taken_and_settled(gateway, fake)
    for chat, label in ((ALICE, "dm"), (FORUM, "group")):
        firsts = [s.text.split("\n")[0] for s in to(fake, chat)]
        assert firsts == [f"Received: {label} {i}" for i in range(6)]  # once each, in order


async def test_a_long_output_arrives_in_parts_with_code_blocks_intact(gateway, fake) -> None:
    fake.user_message(chat_id=ALICE, text="/run for i in $(seq 1 30); do "
                                          "printf 'line %03d %0330d\\n' $i 0; done")
    await eventually(lambda: len(to(fake, ALICE)) >= 3, timeout=30, what="the parts")
    await all_taken_and_settled(gateway, fake)  # the turn is over: every part is out
    parts = [s.text for s in to(fake, ALICE)]
    assert sum(len(p) for p in parts) > 10_000
    assert all(len(p.encode("utf-16-le")) // 2 <= 4096 for p in parts)
    for part in parts:
        fences = [line for line in part.splitlines() if line.startswith("```")]
        assert len(fences) % 2 == 0, part[:80]
    assert "line 001" in parts[0] and "line 030" in parts[-1]


@pytest.fixture
def quick_router_poll(monkeypatch: pytest.MonkeyPatch) -> None:
    """A welcome the CLI queued is found by the daemon's slow poll (SQLite wakes no other
    process): every 0.5 s here, not 5. Set before the gateway starts its router."""
    import gateway.delivery.router as router
    monkeypatch.setattr(router, "IDLE_POLL_SECONDS", 0.5)


@pytest.mark.usefixtures("quick_router_poll")
async def test_unknown_users_pair_in_a_dm_and_are_ignored_in_groups(
        gateway, fake, tmp_path: Path) -> None:
    stranger = 99
    fake.user_message(chat_id=GROUP, chat_type="group", user_id=stranger, text="hi all")
    fake.user_message(chat_id=stranger, user_id=stranger, username="bob", text="hello?")
    (offer,) = await fake.wait_for_sent(1)
    assert offer.chat_id == stranger and "homing pairing approve telegram" in offer.text
    code = offer.text.split("homing pairing approve telegram ")[1].split()[0]
    fake.user_message(chat_id=stranger, user_id=stranger, username="bob", text="still there?")
    await all_taken_and_settled(gateway, fake)
    assert len(fake.sent) == 1  # one code, not one per message; nothing in the group

    exit_code, out, err = await run_cli("pairing", "approve", "telegram", code,
                                        env=_env(tmp_path / "home"))
    assert exit_code == 0, err
    assert "@bob" in out and "they are told so" in out
    # told in their chat, by the daemon, once (the CLI only queued it)
    await eventually(lambda: len(fake.sent) == 2, timeout=30, what="the welcome")
    assert fake.sent[1].chat_id == stranger and fake.sent[1].text.startswith("You are in")
    fake.user_message(chat_id=stranger, user_id=stranger, username="bob", text="let me in")
    await eventually(lambda: len(fake.sent) == 3, what="the reply to the approved user")
    assert fake.sent[-1].text.startswith("Received: let me in")
    assert to(fake, GROUP) == []


async def test_a_deleted_topic_parks_the_notice_as_route_gone(gateway, fake, tmp_path) -> None:
    fake.user_message(chat_id=FORUM, chat_type="supergroup", is_forum=True, thread_id=77,
                      is_topic_message=True, text="/bg sleep 0.5; echo into-the-void")
    await fake.wait_for_sent(1)
    fake.deleted_threads.add((FORUM, 77))

    async def parked() -> list:
        return await gateway.outbox.list("parked")

    (row,) = await eventually_async(parked, timeout=30, what="the parked notice")
    assert row.reason == "route_gone" and "thread not found" in (row.last_error or "")
    assert notices(fake) == []  # no silent fallback to the chat root
    code, out, _ = await run_cli("notifications", "--state", "parked",
                                 env=_env(tmp_path / "home"))
    assert code == 0 and "route_gone" in out


async def test_commands_for_us_work_in_groups_and_others_bots_are_ignored(gateway, fake) -> None:
    assert "bg" in {c["command"] for c in fake.commands}  # registered on start
    group = dict(chat_id=GROUP, chat_type="group")
    fake.user_message(text="/status@homing_bot", **group)
    fake.user_message(text="/new@some_other_bot", **group)
    fake.user_message(text="beep", is_bot=True, user_id=555, **group)
    await fake.wait_for_sent(1)
    await all_taken_and_settled(gateway, fake)
    assert len(fake.sent) == 1 and "session key" in fake.sent[0].text


async def test_a_malformed_update_is_skipped_and_the_next_one_served(gateway, fake) -> None:
    fake.raw_update({"message": {"message_id": "not-a-number", "chat": "nope"}})
    fake.user_message(chat_id=ALICE, text="after the junk")
    (reply,) = await fake.wait_for_sent(1)
    assert reply.text.startswith("Received: after the junk")


async def test_kill_9_while_a_topic_job_runs_reports_once_in_that_topic(
        fake: FakeTelegram, tmp_path: Path) -> None:
    from tests.real_daemon import daemon_settled, start_daemon

    env = daemon_env(tmp_path / "home", fake)
    first, _ = await start_daemon(env)
    second = None
    try:
        fake.user_message(chat_id=FORUM, chat_type="supergroup", is_forum=True, thread_id=42,
                          is_topic_message=True, text="/bg sleep 3; echo topic-marker; exit 3")
        (started,) = await fake.wait_for_sent(1, timeout=20)
        assert started.text.startswith("Started job")
        # the update is acknowledged before the crash, as Telegram would have it
        await eventually(lambda: not fake.pending_updates, timeout=20, what="the ack")
        first.kill()
        await first.wait()
        second, _ = await start_daemon(env)
        await eventually(lambda: notices(fake), timeout=30, what="the completion")
        await eventually(lambda: not fake.pending_updates, what="every update acknowledged")
        await daemon_settled(env)
        (notice,) = notices(fake)
        assert (notice.chat_id, notice.message_thread_id) == (FORUM, 42)
        assert "exit code 3" in notice.text and "topic-marker" in notice.text
    finally:
        for proc in (first, second):
            if proc is not None and proc.returncode is None:
                proc.terminate()
                await proc.wait()


async def test_409_conflicts_are_retried_and_polling_goes_on(
        gateway, fake, monkeypatch: pytest.MonkeyPatch) -> None:
    import gateway.platforms.telegram.adapter as telegram
    from gateway.retry import RetryPolicy

    # the poller's own backoff, a tenth as long: three conflicts cost 0.8 s, not 8
    monkeypatch.setattr(telegram, "CONNECT", RetryPolicy(
        tuple(d / 10 for d in telegram.CONNECT.delays), telegram.CONNECT.attempts))
    fake.fail_next_poll(status=409, count=3)
    fake.user_message(chat_id=ALICE, text="after the conflicts")
    (reply,) = await fake.wait_for_sent(1, timeout=30)
    assert reply.text.startswith("Received: after the conflicts")


async def test_telegram_down_at_start_does_not_hold_up_the_gateway(tmp_path: Path) -> None:
    """The web chat serves while Telegram is unreachable; Telegram joins when it is back."""
    import aiohttp

    server = FakeTelegram()
    await server.start()
    config = telegram_config(tmp_path / "home", server)
    await server.stop()  # nothing listens at the configured address now
    async with running_gateway(config) as gw:
        telegram = gw.runner.adapters["telegram"].inner  # the platform's own, behind the fence
        assert not telegram.connected
        web = gw.runner.adapters["web"].inner  # the platform's own, behind the fence
        async with aiohttp.ClientSession() as http, http.ws_connect(
                f"http://127.0.0.1:{web.port}/ws") as ws:
            await ws.receive_json(timeout=20)
            await ws.send_json({"type": "message", "text": "web still works"})
            assert "web still works" in (await ws.receive_json(timeout=20))["text"]
        assert not telegram.connected


async def test_require_mention_and_allowed_chats_in_groups(tmp_path: Path, fake) -> None:
    config = telegram_config(tmp_path / "home", fake,
                             platforms__telegram__require_mention=True,
                             platforms__telegram__allowed_chats=[str(GROUP)])
    async with running_gateway(config) as gw:
        await gw.runner.adapters["telegram"].wait_connected()
        group = dict(chat_id=GROUP, chat_type="group")
        fake.user_message(text="just talking among ourselves", **group)
        fake.user_message(text="@homing_bot are you there?", **group)
        fake.user_message(chat_id=FORUM, chat_type="supergroup", text="@homing_bot elsewhere")
        (reply,) = await fake.wait_for_sent(1)
        await all_taken_and_settled(gw, fake)
        assert len(fake.sent) == 1 and "are you there" in reply.text


async def test_messages_arriving_during_shutdown_are_left_for_the_next_start(
        tmp_path: Path, fake) -> None:
    config = telegram_config(tmp_path / "home", fake)
    running: list[Gateway] = []
    stop = asyncio.Event()

    async def run_until_stopped() -> None:
        async with running_gateway(config) as gw:
            await gw.runner.adapters["telegram"].wait_connected()
            fake.user_message(chat_id=ALICE, text="/run sleep 1.5; echo slow")
            await eventually(lambda: gw.runner.busy_session_keys, what="the slow turn")
            running.append(gw)
            await stop.wait()

    runner = asyncio.create_task(run_until_stopped())
    (stopping,) = await eventually(lambda: running, what="the slow turn under way")
    stop.set()  # shutdown begins; the slow turn is still running
    await eventually(lambda: not stopping.runner.accepting,
                     what="the gateway no longer taking in")
    fake.user_message(chat_id=ALICE, text="sent during shutdown")
    await runner
    assert any("slow" in s.text for s in fake.sent)  # the turn in flight finished
    # not answered by the stopping gateway: left at Telegram (polling had stopped) or,
    # fetched just before, journaled for the next start
    assert not any("sent during shutdown" in s.text for s in fake.sent)
    async with running_gateway(config) as gw:
        await gw.runner.adapters["telegram"].wait_connected()
        await eventually(lambda: any("sent during shutdown" in s.text for s in fake.sent),
                         what="the message served after the restart")
        await all_taken_and_settled(gw, fake)
    assert len([s for s in fake.sent if "sent during shutdown" in s.text]) == 1


async def test_a_stop_while_an_update_is_being_journaled_confirms_it_once_written(
        tmp_path: Path, fake: FakeTelegram) -> None:
    """Stopping cuts the long poll, not the journaling of what it returned: the update
    is written, then confirmed to Telegram, so the next start is not handed it again."""
    config = telegram_config(tmp_path / "home", fake)
    async with running_gateway(config) as gw:
        adapter = gw.runner.adapters["telegram"].inner  # the platform's own, behind the fence
        await adapter.wait_connected()
        async with write_lock_held(str(config.state_location)):  # the journal write waits
            fake.user_message(chat_id=ALICE, text="journaled as the stop began")
            await eventually(lambda: fake.handed_out >= 1, what="the update handed out")
            stopping = asyncio.create_task(adapter.stop_receiving())
            await asyncio.sleep(0.2)  # the stop is under way while the write waits
        await asyncio.wait_for(stopping, 10)
        assert fake.pending_updates == []  # confirmed: not handed out again
        await eventually(lambda: [s for s in fake.sent if "journaled as the stop" in s.text],
                         what="the message answered")
        assert len(await gw.store.db.fetchall("SELECT id FROM inbound")) == 1


async def test_an_update_is_confirmed_to_telegram_only_after_its_journal_commit(
        tmp_path: Path, fake: FakeTelegram, monkeypatch: pytest.MonkeyPatch) -> None:
    """The offset moves past an update only once its journal row has committed: when
    the write fails (the store went away), Telegram still holds the update and hands it
    out again, and it is answered once — never confirmed and lost."""
    config = telegram_config(tmp_path / "home", fake)
    async with running_gateway(config) as gw:
        await gw.runner.adapters["telegram"].wait_connected()
        inbound = gw.runner.inbound
        journal = inbound.record
        #: how many Bot API calls the fake had had when each journal row committed
        committed_at: list[int] = []
        failed: list[bool] = []

        async def record(*args: Any, **kwargs: Any) -> Any:
            if not failed:  # the first write never commits
                failed.append(True)
                raise sqlite3.OperationalError("disk I/O error")
            entry = await journal(*args, **kwargs)
            committed_at.append(len(fake.calls))
            return entry

        monkeypatch.setattr(inbound, "record", record)
        fake.user_message(chat_id=ALICE, text="confirmed once written")
        await eventually(lambda: [s for s in fake.sent if "Received: confirmed" in s.text],
                         timeout=30, what="the update answered")
        await all_taken_and_settled(gw, fake)
        (row,) = await gw.store.db.fetchall("SELECT platform_id FROM inbound")
    update_id = int(row[0])
    assert fake.handed_out >= 2  # handed out again after the failed write
    before_commit = [int(p["offset"]) for m, p in fake.calls[:committed_at[0]]
                     if m == "getUpdates" and p.get("offset") is not None]
    assert all(offset <= update_id for offset in before_commit), before_commit
    answers = [s.text for s in fake.sent if "Received: confirmed" in s.text]
    assert len(answers) == 1


async def test_a_graceful_restart_is_announced_where_work_is_going_on(
        fake: FakeTelegram, tmp_path: Path) -> None:
    import signal

    from gateway.daemon.restart_notices import BACK_ONLINE, RESTARTING
    from tests.real_daemon import daemon_settled, start_daemon

    env = daemon_env(tmp_path / "home", fake)
    topic = dict(chat_id=FORUM, chat_type="supergroup", is_forum=True, thread_id=42,
                 is_topic_message=True)
    first, _ = await start_daemon(env)
    second = None
    try:
        fake.user_message(text="/bg sleep 4; echo topic-done", **topic)
        await fake.wait_for_sent(1, timeout=20)
        fake.user_message(chat_id=ALICE, text="/run sleep 2; echo turn-done")
        await eventually(lambda: not fake.pending_updates, timeout=20, what="the ack")
        await eventually(lambda: running_command("sleep 2; echo turn-done", first.pid),
                         timeout=20, what="the /run turn running its command")
        first.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(first.wait(), 30) == 0
        told = [(s.chat_id, s.message_thread_id) for s in fake.sent if s.text == RESTARTING]
        assert sorted(told, key=str) == sorted([(FORUM, 42), (ALICE, None)], key=str)
        assert any("turn-done" in s.text for s in to(fake, ALICE))  # the turn finished

        second, _ = await start_daemon(env)
        await eventually(lambda: len([s for s in fake.sent if s.text == BACK_ONLINE]) == 2,
                         timeout=30, what="back online in both places")
        back = [(s.chat_id, s.message_thread_id) for s in fake.sent if s.text == BACK_ONLINE]
        assert sorted(back, key=str) == sorted(told, key=str)
        await eventually(lambda: notices(fake), timeout=30, what="the job's completion")
        await eventually(lambda: not fake.pending_updates, what="every update acknowledged")
        await daemon_settled(env)
        (done,) = notices(fake)
        assert (done.chat_id, done.message_thread_id) == (FORUM, 42)
        assert "topic-done" in done.text
    finally:
        for proc in (first, second):
            if proc is not None and proc.returncode is None:
                proc.terminate()
                await proc.wait()


async def test_a_webhook_left_set_is_named_as_the_reason_polling_is_refused(
        tmp_path: Path, fake: FakeTelegram) -> None:
    """Telegram answers 409 both to a second poller and while a webhook is set; the log
    must not send the operator looking for another process when it is the webhook."""
    import structlog

    fake.webhook_url = "https://example.org/hook"  # set by another tool
    with structlog.testing.capture_logs() as logs:
        async with running_gateway(telegram_config(tmp_path / "home", fake)):

            async def conflict() -> list[dict[str, object]]:
                return [e for e in logs if e["event"] == "telegram_conflict"]

            (first, *_) = await eventually_async(conflict, what="the conflict logged")
    assert "webhook" in str(first["hint"]) and "another process" not in str(first["hint"])
    assert fake.webhook_url == "https://example.org/hook"  # not removed behind its back
