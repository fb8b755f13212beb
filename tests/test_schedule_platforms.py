"""Scheduled jobs where people are: Telegram forum topics and Discord threads (the real
client libraries against the local fakes), web tabs, the model agent's ``schedule``
tool, the CLI, the REST API, and the real daemon killed while a run is in flight."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import sqlite3
from pathlib import Path

import aiohttp
import pytest

from agent.history import NOTICE_MARK
from gateway.daemon.assembly import running_gateway
from tests.fakes.openai_server import CallTools, ChatRequest, Fail, Response, Say
from tests.helpers import eventually, eventually_async
from tests.model_support import is_notice, model_config, user_says, web_base
from tests.real_daemon import (
    cli_json,
    daemon_settled,
    kill_leftover_jobs,
    run_cli,
    start_daemon,
    web_home,
)
from tests.test_schedules import START, Clock
from tests.test_web import open_tab

SCHEDULE_ID = re.compile(r"Schedule (s[0-9a-f]+)")


def ids_in(text: str) -> str:
    found = SCHEDULE_ID.search(text)
    assert found, text
    return found[1]


async def test_telegram_forum_runs_report_in_their_topics_under_their_messages(
        tmp_path: Path) -> None:
    from tests.fakes.telegram_server import FakeTelegram
    from tests.test_telegram import FORUM, telegram_config

    clock = Clock(START)
    topic = dict(chat_id=FORUM, chat_type="supergroup", is_forum=True, is_topic_message=True)
    async with FakeTelegram() as telegram:
        config = telegram_config(tmp_path / "home", telegram, schedules__timezone="UTC")
        async with running_gateway(config, clock=clock) as gw:
            await gw.runner.adapters["telegram"].wait_connected()
            every = telegram.user_message(text="/every 10m echo topic-42", thread_id=42, **topic)
            cron = telegram.user_message(text="/cron '*/15 * * * *' echo topic-17", thread_id=17,
                                         **topic)
            await eventually(lambda: len(telegram.sent) == 2, what="both replies")
            for minute in (10, 15, 20, 30):
                telegram.user_message(text=f"chatter {minute}", thread_id=42, **topic)
                telegram.user_message(text=f"general {minute}", chat_id=FORUM,
                                      chat_type="supergroup", is_forum=True)
                clock.now = START + minute * 60 + 1
                gw.scheduler.wake()
                await eventually(
                    lambda m=minute: len([s for s in telegram.sent if "the run of" in s.text])
                    == {10: 1, 15: 2, 20: 3, 30: 5}[m], timeout=30, what=f"runs at {minute}")
            results = [s for s in telegram.sent if "the run of" in s.text]
            for sent in results:
                if "topic-42" in sent.text:
                    assert (sent.message_thread_id, sent.reply_to_message_id) == (
                        42, every["message_id"])
                else:
                    assert "topic-17" in sent.text
                    assert (sent.message_thread_id, sent.reply_to_message_id) == (
                        17, cron["message_id"])
            assert sum("topic-42" in s.text for s in results) == 3
            general = [s for s in telegram.sent if s.message_thread_id is None]
            assert general and not [s for s in general if "the run of" in s.text]


async def test_a_schedule_made_in_a_discord_thread_reports_in_that_thread(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import discord

    from tests.fakes.discord_server import FakeDiscord
    from tests.test_discord import CHANNEL, THREAD_A, discord_config

    monkeypatch.setattr(discord.http.Route, "BASE", discord.http.Route.BASE)
    monkeypatch.setattr(discord.gateway.DiscordWebSocket, "DEFAULT_GATEWAY",
                        discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY)
    clock = Clock(START)
    async with FakeDiscord() as fake:
        fake.add_channel(CHANNEL, "builds")
        fake.add_thread(THREAD_A, CHANNEL)
        config = discord_config(tmp_path / "home", fake)
        async with running_gateway(config, clock=clock) as gw:
            await gw.runner.adapters["discord"].wait_connected(timeout=30)
            made = await fake.user_message(content="/every 1h echo in-the-thread",
                                           channel_id=THREAD_A)
            await eventually(lambda: fake.sent, what="the reply")
            clock.now = START + 3601
            gw.scheduler.wake()
            run = await eventually(lambda: [s for s in fake.sent if "the run of" in s.content],
                                   timeout=30, what="the run")
            assert run[0].channel_id == THREAD_A and "in-the-thread" in run[0].content
            assert run[0].message_reference == int(made["id"])


async def test_web_runs_follow_the_conversation_and_no_other_tab_sees_them(
        tmp_path: Path, http) -> None:
    from tests.conftest import make_config

    clock = Clock(START)
    config = make_config(tmp_path / "home", schedules__timezone="UTC")
    async with running_gateway(config, clock=clock) as gw:
        base = f"http://127.0.0.1:{gw.runner.adapters['web'].port}"
        mine, other = await open_tab(http, base), await open_tab(http, base)
        await mine.say("/every 10m echo for-mine")
        ids_in((await mine.frame())["text"])
        for step, command in enumerate(("/new", "/compress")):
            await mine.say(command)
            rotated = await mine.frame()
            clock.now = START + (step + 1) * 600 + 1
            gw.scheduler.wake()
            run = await mine.frame(timeout=30)
            assert run["kind"] == "notification" and "for-mine" in run["text"]
            assert run["session_id"] == rotated["session_id"]  # the live session
        await other.no_frame(0.5)


async def test_the_model_schedules_a_prompt_and_does_it_when_it_comes_due(
        tmp_path: Path, model, http) -> None:
    clock = Clock(START)
    failing, empty = {"on": False}, {"on": False}

    def brain(req: ChatRequest) -> Response:
        if is_notice(req):
            if failing["on"]:
                return Fail(500, "the model is down")
            if empty["on"]:
                return Say("")
            assert "Scheduled task" in req.last["content"]
            assert req.last["content"].startswith(NOTICE_MARK)  # not the user's words
            return Say("Here is your morning summary: all green.")
        if req.last["role"] == "tool":
            result = json.loads(req.last["content"])
            return Say(f"Scheduled {result['schedule_id']} for {result['next_run']}.")
        if user_says(req, "every morning"):
            return CallTools([("schedule", {"action": "create", "cron": "0 9 * * *",
                                            "prompt": "summarise the overnight builds",
                                            "timezone": "UTC"})])
        return Say("ok")

    model.brain = brain
    config = model_config(tmp_path / "home", model, schedules__timezone="UTC",
                          agent__max_retries=0)
    async with running_gateway(config, clock=clock) as gw:
        tab = await open_tab(http, web_base(gw))
        await tab.say("summarise the builds every morning")
        reply = (await tab.frame(timeout=30))["text"]
        assert reply.startswith("Scheduled s") and "2027-01-15 09:00 UTC" in reply
        clock.now = START + 3601
        gw.scheduler.wake()
        done = await tab.frame(timeout=30)
        assert done["kind"] == "notification"
        assert done["text"].endswith("\nHere is your morning summary: all green.")
        async def first_run_over() -> bool:  # its turn is recorded as given
            rows = await gw.store.db.fetchall("SELECT state FROM schedule_runs")
            return rows == [("finished",)]

        await eventually_async(first_run_over, what="the first run's end")
        failing["on"] = True  # the next morning the model fails: the task is still told
        clock.now = START + 86400 + 3601
        gw.scheduler.wake()
        told = (await tab.frame(timeout=30))["text"]
        assert "Scheduled task" in told and "summarise the overnight builds" in told
        assert "could not comment" in told
        await eventually_async(lambda: _all_finished(gw), what="the second run's end")
        failing["on"], empty["on"] = False, True  # and the third it says nothing at all
        clock.now = START + 2 * 86400 + 3601
        gw.scheduler.wake()
        told = (await tab.frame(timeout=30))["text"]
        assert "summarise the overnight builds" in told and "gave no answer" in told


async def _all_finished(gw) -> bool:
    rows = await gw.store.db.fetchall("SELECT state FROM schedule_runs")
    return bool(rows) and all(state == "finished" for (state,) in rows)


async def test_the_cli_and_the_rest_api_list_pause_resume_and_remove(
        tmp_path: Path, http) -> None:
    env = web_home(tmp_path / "home", "schedules: {timezone: UTC}\n")
    daemon, url = await start_daemon(env)
    try:
        tab = await open_tab(http, url.rstrip("/"), "cli-and-rest")
        for command in ("/every 1h echo a", "/cron '0 9 * * *' echo b"):
            await tab.say(command)
            await tab.frame()
        listed = await cli_json("schedules", env=env)
        assert [s["kind"] for s in listed] == ["every", "cron"]
        assert listed[0]["session_key"] == "agent:main:web:dm:cli-and-rest"
        first, second = (s["id"] for s in listed)
        code, out, _ = await run_cli("schedules", "pause", first, env=env)
        assert code == 0 and f"schedule {first} paused" in out
        async with http.get(f"{url}api/schedules") as resp:
            by_id = {s["id"]: s for s in (await resp.json())["schedules"]}
        assert by_id[first]["paused"] is True and by_id[second]["paused"] is False
        async with http.patch(f"{url}api/schedules/{first}", json={"paused": False}) as resp:
            assert resp.status == 200 and (await resp.json())["paused"] is False
        async with http.patch(f"{url}api/schedules/{first}", json={"paused": "no"}) as resp:
            assert resp.status == 400
        async with http.patch(f"{url}api/schedules/nope", json={"paused": True}) as resp:
            assert resp.status == 404
        async with http.delete(f"{url}api/schedules/{second}") as resp:
            assert resp.status == 200 and (await resp.json())["removed"]["id"] == second
        code, _, err = await run_cli("schedules", "remove", second, env=env)
        assert code == 1 and f"no schedule '{second}'" in err
        code, out, _ = await run_cli("schedules", env=env)
        assert first in out and second not in out
        await tab.ws.close()
    finally:
        daemon.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(daemon.wait(), 20) == 0


async def test_kill_9_while_runs_are_in_flight_reports_each_scheduled_time_once(
        tmp_path: Path, http) -> None:
    env = web_home(tmp_path / "home",
                   "schedules: {min_interval_seconds: 1, missed: all}\n")
    try:
        for round_ in range(4):
            daemon, url = await start_daemon(env)
            if round_ == 0:
                tab = await open_tab(http, url.rstrip("/"), "kill-runs")
                await tab.say("/every 1s sleep 0.6; echo scheduled-run")
                await tab.frame()
                await tab.ws.close()
            # the scenario's clock, not a wait for anything: the 1 s schedule comes due
            # once or twice (a run or two in flight), then the daemon dies
            await asyncio.sleep(1.7)
            daemon.send_signal(signal.SIGKILL)
            await daemon.wait()
        daemon, url = await start_daemon(env)
        try:
            (schedule,) = await cli_json("schedules", env=env)
            code, _, _ = await run_cli("schedules", "pause", schedule["id"], env=env)
            assert code == 0

            await daemon_settled(env, timeout=40)  # every run ended and reported
            notes = await cli_json("notifications", env=env)
        finally:
            daemon.send_signal(signal.SIGTERM)
            await asyncio.wait_for(daemon.wait(), 20)
        completions = [n for n in notes if n["kind"] == "completion"]
        times = [re.search(r"the run of (.+?)\.\n", n["text"])[1] for n in completions]
        assert completions and len(times) == len(set(times))  # each scheduled time once
        assert all("scheduled-run" in n["text"] and "exit code 0" in n["text"]
                   for n in completions)
        jobs = await cli_json("jobs", env=env)
        assert len(jobs) == len(completions)  # every run that started was reported
        # and no scheduled time was lost: every second from the first to the last has its
        # run, run once (finished) or skipped because the one before was still going
        with sqlite3.connect(tmp_path / "home" / "state.db") as db:
            runs = db.execute("SELECT scheduled_for, state FROM schedule_runs "
                              "ORDER BY scheduled_for").fetchall()
        # (or cancelled: claimed, not yet started, when the pause came)
        assert {state for _, state in runs} <= {"finished", "skipped", "cancelled"}, runs
        cancelled = [t for t, state in runs if state == "cancelled"]
        assert all(t > max(t for t, s in runs if s == "finished") for t in cancelled), runs
        gaps = [b - a for (a, _), (b, _) in zip(runs, runs[1:], strict=False)]
        assert gaps == [1.0] * (len(runs) - 1), gaps
        assert sum(state == "finished" for _, state in runs) == len(completions)
    finally:
        await kill_leftover_jobs(env)


@pytest.fixture
async def http():
    async with aiohttp.ClientSession() as session:
        yield session
