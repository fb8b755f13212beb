"""Scheduled jobs through the real gateway parts, on a clock the test moves on.

The scheduler's clock is injected: a test sets it just past a run's time and
wakes the scheduler, so runs an hour apart take milliseconds. The runs are real
background jobs.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gateway.daemon.assembly import Gateway, running_gateway
from gateway.words.route import Route
from tests.conftest import make_config
from tests.helpers import eventually, eventually_async
from tests.memory_platform import MemoryAdapter, SentMessage

FORUM = "-1004242"
TOPIC42 = Route("memory", "group", FORUM, thread_id="42", user_id="1")
TOPIC17 = Route("memory", "group", FORUM, thread_id="17", user_id="1")
GENERAL = Route("memory", "group", FORUM, user_id="1")
CHAT = Route("memory", "dm", "1", user_id="1")


class Clock:
    def __init__(self, start: float) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now


START = 1_800_000_000.0  # a Friday, 2027-01-15 08:00 UTC


def schedule_config(home: Path, **overrides: object):
    return make_config(home, schedules__timezone="UTC", **overrides)


@pytest.fixture
def clock() -> Clock:
    return Clock(START)


@pytest.fixture
async def gateway(tmp_path: Path, clock: Clock) -> AsyncIterator[tuple[Gateway, MemoryAdapter]]:
    adapter = MemoryAdapter("memory", send_delay=0.001)
    async with running_gateway(schedule_config(tmp_path / "home"), [adapter],
                               clock=clock) as gw:
        yield gw, adapter


async def say(adapter: MemoryAdapter, text: str, route: Route, anchor: str | None = None) -> str:
    assert await adapter.receive(text, route.with_anchor(anchor) if anchor else route,
                                 message_id=anchor) == "handled"
    return adapter.sent_to(route)[-1].text


def schedule_id(reply: str) -> str:
    found = re.match(r"Schedule (s[0-9a-f]+):", reply)
    assert found, reply
    return found[1]


def runs(adapter: MemoryAdapter, sid: str) -> list[SentMessage]:
    return [m for m in adapter.sent if m.kind == "notification"
            and m.text.startswith(f"Schedule {sid} ") and "the run of" in m.text]


async def move_to(gw: Gateway, clock: Clock, t: float) -> None:
    clock.now = t
    gw.scheduler.wake()


async def settle(gw: Gateway) -> None:
    """Every run started has ended and every notice is delivered."""
    async def idle() -> bool:
        await gw.scheduler.tick()
        # started counts too: a run whose job ended while the gateway was down is
        # finished only when its completion is committed, after the restart
        claimed = await gw.store.db.fetchone(
            "SELECT COUNT(*) FROM schedule_runs WHERE state IN ('claimed', 'started')")
        pending = await gw.store.db.fetchone(
            "SELECT COUNT(*) FROM notifications WHERE state IN ('pending', 'claimed')")
        return gw.jobs.running == 0 and claimed[0] == 0 and pending[0] == 0
    await eventually_async(idle, timeout=30, what="the schedules to settle")
    await gw.router.settle()


# --- creating and the way back ------------------------------------------------------------

async def test_every_reports_each_run_in_its_topic_under_its_message(gateway, clock) -> None:
    gw, adapter = gateway
    reply = await say(adapter, "/every 10m echo from-42", TOPIC42, anchor="m42")
    sid = schedule_id(reply)
    assert "every 10m (UTC), next run 2027-01-15 08:10 UTC" in reply
    other = schedule_id(await say(adapter, "/every 15m echo from-17", TOPIC17, anchor="m17"))
    for minute in (10, 15, 20, 30):
        await move_to(gw, clock, START + minute * 60 + 1)
        await say(adapter, f"chatter at {minute}", TOPIC42)
        await say(adapter, f"chatter at {minute}", GENERAL)
        await settle(gw)
    assert len(runs(adapter, sid)) == 3 and len(runs(adapter, other)) == 2
    for m in runs(adapter, sid):
        assert (m.route.thread_id, m.route.message_id) == ("42", "m42")
        assert "from-42" in m.text and "finished: exit code 0" in m.text
    for m in runs(adapter, other):
        assert (m.route.thread_id, m.route.message_id) == ("17", "m17")
    assert not [m for m in adapter.sent_to(GENERAL) if m.kind == "notification"]
    first = runs(adapter, sid)[0].text
    assert first.startswith(f"Schedule {sid} (every 10m): the run of 2027-01-15 08:10 UTC.")
    assert "Next run: 2027-01-15 08:20 UTC." in first


async def test_cron_and_at_schedules_run_at_their_times_and_a_one_shot_only_once(
        gateway, clock) -> None:
    gw, adapter = gateway
    cron = schedule_id(await say(adapter, "/cron '0 9 * * 1-5' echo standup", CHAT))
    once = schedule_id(await say(adapter, "/at 08:30 echo once", CHAT))
    plus = schedule_id(await say(adapter, "/at +20m echo soon", CHAT))
    for t in ("08:20", "08:31", "09:01"):
        hours, minutes = map(int, t.split(":"))
        await move_to(gw, clock, START + (hours - 8) * 3600 + minutes * 60)
        await settle(gw)
    assert [len(runs(adapter, s)) for s in (cron, once, plus)] == [1, 1, 1]
    assert "No runs are left." in runs(adapter, once)[0].text
    await move_to(gw, clock, START + 3 * 86400 + 3600 + 60)  # Monday 09:01, after a weekend
    await settle(gw)
    assert [len(runs(adapter, s)) for s in (cron, once, plus)] == [2, 1, 1]


async def test_schedules_lists_pauses_resumes_runs_now_and_removes(gateway, clock) -> None:
    gw, adapter = gateway
    sid = schedule_id(await say(adapter, "/every 1h echo hourly", CHAT))
    listing = await say(adapter, "/schedules", CHAT)
    assert sid in listing and "every 1h" in listing and "next 2027-01-15 09:00 UTC" in listing
    assert "not run yet" in listing
    assert "No schedules" in await say(adapter, "/schedules", TOPIC42)  # its own only
    assert "No schedule" in await say(adapter, f"/schedules pause {sid}", TOPIC42)
    assert "is paused" in await say(adapter, f"/schedules pause {sid}", CHAT)
    await move_to(gw, clock, START + 2 * 3600 + 1)
    await settle(gw)
    assert runs(adapter, sid) == []  # paused through two due times
    resumed = await say(adapter, f"/schedules resume {sid}", CHAT)
    assert "next run 2027-01-15 11:00 UTC" in resumed  # not the times it was paused through
    assert "runs now" in await say(adapter, f"/schedules run {sid}", CHAT)
    await settle(gw)
    assert len(runs(adapter, sid)) == 1 and "hourly" in runs(adapter, sid)[0].text
    listing = await say(adapter, "/schedules", CHAT)
    assert "exit code 0" in listing
    assert "is removed" in await say(adapter, f"/schedules remove {sid}", CHAT)
    await move_to(gw, clock, START + 4 * 3600)
    await settle(gw)
    assert len(runs(adapter, sid)) == 1
    assert "No schedules" in await say(adapter, "/schedules", CHAT)


@pytest.mark.parametrize(("command", "problem"), [
    ("/cron '61 * * * *' echo x", "not valid"),
    ("/cron '0 9 * *' echo x", "five fields"),
    ("/every 10s echo x", "shorter than the minimum"),
    ("/every soon echo x", "is not an interval"),
    ("/at 2020-01-01 09:00 echo x", "in the past"),
    ("/at --tz Mars/Olympus 09:00 echo x", "unknown timezone 'Mars/Olympus'"),
    ("/every 10m", "Usage: /every"),
    ("/cron '0 9 * * *'", "Usage: /cron"),
    ("/schedules explode s1", "Usage: /schedules"),
])
async def test_bad_input_names_the_problem_and_stores_nothing(gateway, command, problem) -> None:
    gw, adapter = gateway
    reply = await say(adapter, command, CHAT)
    assert problem in reply, reply
    assert await gw.scheduler.list() == []


async def test_a_conversation_may_have_only_so_many_schedules(tmp_path: Path, clock) -> None:
    adapter = MemoryAdapter("memory")
    config = schedule_config(tmp_path / "home", schedules__max_per_conversation=2)
    async with running_gateway(config, [adapter], clock=clock) as gw:
        for _ in range(2):
            schedule_id(await say(adapter, "/every 1h echo x", CHAT))
        reply = await say(adapter, "/every 1h echo x", CHAT)
        assert "already has 2 schedules" in reply and "max_per_conversation" in reply
        assert len(await gw.scheduler.list()) == 2
        schedule_id(await say(adapter, "/every 1h echo x", TOPIC42))  # per conversation


async def test_a_schedule_in_another_timezone_says_its_times_there(gateway, clock) -> None:
    gw, adapter = gateway
    reply = await say(adapter, "/every --tz Asia/Tokyo 1d echo x", CHAT)
    assert "(Asia/Tokyo), next run 2027-01-16 17:00 JST" in reply


# --- overlap, missed runs, crashes -----------------------------------------------------------

async def test_a_run_longer_than_the_interval_skips_and_counts_the_next_times(
        gateway, clock, tmp_path: Path) -> None:
    gw, adapter = gateway
    gate = tmp_path / "gate"
    sid = schedule_id(await say(
        adapter, f"/every 10m while [ ! -e {gate} ]; do sleep 0.05; done; echo run-done", CHAT))
    await move_to(gw, clock, START + 601)
    await eventually(lambda: gw.jobs.running == 1, what="the first run")
    for minute in (20, 30):
        await move_to(gw, clock, START + minute * 60 + 1)
        await gw.scheduler.tick()
        assert gw.jobs.running == 1  # never two runs of one schedule at once
    gate.touch()
    await settle(gw)
    (first,) = runs(adapter, sid)
    assert "2 later scheduled times were skipped: this run was still going." in first.text
    gate.unlink()
    await move_to(gw, clock, START + 40 * 60 + 1)
    await eventually(lambda: gw.jobs.running == 1, what="the next run")
    gate.touch()
    await settle(gw)
    assert "skipped" not in runs(adapter, sid)[1].text  # told once


@pytest.mark.parametrize(("policy", "ran"), [("skip", 0), ("once", 1), ("all", 3)])
async def test_times_missed_while_the_daemon_was_down_follow_the_policy_with_one_note(
        tmp_path: Path, clock, policy: str, ran: int) -> None:
    config = schedule_config(tmp_path / "home", schedules__missed=policy)
    first = MemoryAdapter("memory")
    async with running_gateway(config, [first], clock=clock) as gw:
        sid = schedule_id(await say(first, "/every 10m echo run-$HOMING_JOB_ID", CHAT))
    clock.now = START + 35 * 60  # down across 08:10, 08:20 and 08:30
    second = MemoryAdapter("memory")
    async with running_gateway(config, [second], clock=clock) as gw:
        await settle(gw)
        notes = [m for m in second.sent if f"Schedule {sid}" in m.text and "passed" in m.text]
        assert len(notes) == 1, notes
        note = notes[0].text
        assert "3 scheduled times passed while the gateway was down" in note
        assert f"schedules.missed: {policy}" in note and "Next run: 2027-01-15 08:40 UTC" in note
        assert len(runs(second, sid)) == ran
        if policy == "all":  # oldest first
            times = [re.search(r"the run of (\S+ \S+)", m.text)[1] for m in runs(second, sid)]
            assert times == ["2027-01-15 08:10", "2027-01-15 08:20", "2027-01-15 08:30"]
    third = MemoryAdapter("memory")
    async with running_gateway(config, [third], clock=clock) as gw:
        await settle(gw)
        assert third.sent == []  # told once, run once: a second restart adds nothing


async def test_a_run_claimed_when_the_daemon_died_is_started_once_after_the_restart(
        tmp_path: Path, clock) -> None:
    config = schedule_config(tmp_path / "home")
    first = MemoryAdapter("memory")

    class DiedAfterTheClaim(BaseException):  # not an error the scheduler handles: a crash
        pass

    async with running_gateway(config, [first], clock=clock) as gw:
        sid = schedule_id(await say(first, "/every 10m echo claimed-run", CHAT))

        async def die(*args: object) -> None:
            raise DiedAfterTheClaim

        gw.scheduler._start_run = die  # type: ignore[method-assign]
        clock.now = START + 601
        with pytest.raises(DiedAfterTheClaim):  # claims 08:10, advances, starts nothing
            await gw.scheduler.tick()
        (state,) = await gw.store.db.fetchone("SELECT state FROM schedule_runs")
        assert state == "claimed"
    second = MemoryAdapter("memory")
    async with running_gateway(config, [second], clock=clock) as gw:
        await settle(gw)
        (run,) = runs(second, sid)
        assert "the run of 2027-01-15 08:10 UTC" in run.text and "claimed-run" in run.text
        rows = await gw.store.db.fetchall("SELECT state FROM schedule_runs")
        assert rows == [("finished",)]


async def test_a_run_in_flight_across_a_restart_is_followed_to_its_end_once(
        tmp_path: Path, clock) -> None:
    config = schedule_config(tmp_path / "home")
    first = MemoryAdapter("memory")
    async with running_gateway(config, [first], clock=clock) as gw:
        sid = schedule_id(await say(first, "/every 10m sleep 1; echo in-flight; exit 2", CHAT))
        await move_to(gw, clock, START + 601)
        await eventually(lambda: gw.jobs.running == 1, what="the run")
        await gw.router.stop()
    second = MemoryAdapter("memory")
    async with running_gateway(config, [second], clock=clock) as gw:
        await settle(gw)
        (run,) = runs(second, sid)
        assert "finished: exit code 2" in run.text and "in-flight" in run.text
        assert "Next run: 2027-01-15 08:20 UTC" in run.text


# --- where runs report ------------------------------------------------------------------------

async def test_runs_report_into_the_conversation_after_new_and_compress(gateway, clock) -> None:
    gw, adapter = gateway
    sid = schedule_id(await say(adapter, "/every 10m echo still-here", CHAT))
    sessions = []
    for step, command in enumerate(("/new", "/compress")):
        await say(adapter, command, CHAT)
        live = await gw.store.live_session(gw.runner.session_key_for(CHAT))
        sessions.append(live.id)
        await move_to(gw, clock, START + (step + 1) * 600 + 1)
        await settle(gw)
        latest = runs(adapter, sid)[-1]
        assert latest.route.chat_id == CHAT.chat_id and "[from an ended session" not in latest.text
        transcript = [line.text for line in await gw.store.messages(live.id)]
        assert any("still-here" in text for text in transcript)  # in the live session
    assert len(runs(adapter, sid)) == 2


async def test_a_schedule_whose_place_is_gone_pauses_saying_why(gateway, clock) -> None:
    gw, adapter = gateway
    from gateway.words.events import SendResult

    sid = schedule_id(await say(adapter, "/every 10m echo into-the-void", TOPIC42))
    adapter.scripted_failures[FORUM] = [
        SendResult.failed("message thread not found", permanent=True)]
    await move_to(gw, clock, START + 601)

    async def paused() -> bool:
        (record,) = await gw.scheduler.list()
        return record.paused

    await eventually_async(paused, what="the schedule paused")
    (record,) = await gw.scheduler.list()
    assert record.pause_reason.startswith("route_gone") and "thread not found" in (
        record.pause_reason)
    parked = await gw.outbox.list("parked")
    assert [n.reason for n in parked] == ["route_gone"]
    await move_to(gw, clock, START + 3600)
    await settle(gw)
    assert len(await gw.outbox.list()) == 1  # no more runs into the void
    assert "paused (route_gone" in (await gw.scheduler.list())[0].line()
    assert sid in (await gw.scheduler.list())[0].line()


async def test_without_an_injected_clock_runs_come_on_the_real_one(tmp_path: Path) -> None:
    adapter = MemoryAdapter("memory")
    config = make_config(tmp_path / "home", schedules__min_interval_seconds=1)
    async with running_gateway(config, [adapter]) as gw:
        sid = schedule_id(await say(adapter, "/every 1s echo tick", CHAT))
        await eventually(lambda: len(runs(adapter, sid)) >= 2, timeout=30, what="two runs")
        await gw.scheduler.pause(sid)
        first, second = (re.search(r"the run of (.+?)\.\n", m.text)[1]
                         for m in runs(adapter, sid)[:2])
        assert first != second  # two scheduled times, one run each


# --- after review: long downtime, busy restarts, pauses, limits --------------------------------

@pytest.mark.parametrize(("policy", "max_age", "ran", "says"), [
    ("all", 300, 5, "The latest 5 run now, oldest first"),
    ("once", 86400, 1, "It runs once now, for 2027-01-25 08:00 UTC"),
    ("all", 20, 0, "None was run: all were older than schedules.max_missed_age_seconds"),
])
async def test_ten_days_of_a_minutely_schedule_missed(tmp_path: Path, clock, policy: str,
                                                      max_age: int, ran: int, says: str) -> None:
    config = schedule_config(tmp_path / "home", schedules__missed=policy,
                             schedules__max_missed_age_seconds=max_age)
    first = MemoryAdapter("memory")
    async with running_gateway(config, [first], clock=clock) as gw:
        sid = schedule_id(await say(first, "/every 1m echo minutely", CHAT))
    clock.now = START + 10 * 86400 + 30  # down for ten days
    second = MemoryAdapter("memory")
    async with running_gateway(config, [second], clock=clock) as gw:
        await settle(gw)
        (note,) = [m.text for m in second.sent if "passed while" in m.text]
        assert "14,400 scheduled times passed" in note and says in note, note
        assert len(runs(second, sid)) == ran
        if ran:
            last = re.search(r"the run of (\S+ \S+)", runs(second, sid)[-1].text)[1]
            assert last == "2027-01-25 08:00"  # the latest time, not an old one


async def test_times_missed_behind_a_run_still_under_way_wait_for_it(
        tmp_path: Path, clock) -> None:
    config = schedule_config(tmp_path / "home", schedules__missed="once")
    gate = tmp_path / "gate"
    first = MemoryAdapter("memory")
    async with running_gateway(config, [first], clock=clock) as gw:
        sid = schedule_id(await say(
            first, f"/every 10m while [ ! -e {gate} ]; do sleep 0.05; done; echo ran", CHAT))
        await move_to(gw, clock, START + 601)
        await eventually(lambda: gw.jobs.running == 1, what="the 08:10 run")
        await gw.router.stop()
    clock.now = START + 45 * 60  # down across 08:20, 08:30 and 08:40
    second = MemoryAdapter("memory")
    async with running_gateway(config, [second], clock=clock) as gw:
        note = await eventually(lambda: [m.text for m in second.sent if "passed while" in m.text],
                                what="the note")
        assert "It runs once now after the run still under way, for 2027-01-15 08:40" in note[0]
        gate.touch()
        await settle(gw)
        times = [re.search(r"the run of (\S+ \S+)", m.text)[1] for m in runs(second, sid)]
        assert times == ["2027-01-15 08:10", "2027-01-15 08:40"]  # one after the other
        assert not any("skipped" in m.text for m in runs(second, sid))  # nothing was


async def test_a_pause_stops_runs_already_waiting_to_start(tmp_path: Path, clock) -> None:
    config = schedule_config(tmp_path / "home", schedules__missed="all")
    gate = tmp_path / "gate"
    first = MemoryAdapter("memory")
    async with running_gateway(config, [first], clock=clock) as gw:
        sid = schedule_id(await say(
            first, f"/every 10m while [ ! -e {gate} ]; do sleep 0.05; done; echo ran", CHAT))
    clock.now = START + 35 * 60
    second = MemoryAdapter("memory")
    async with running_gateway(config, [second], clock=clock) as gw:
        await eventually(lambda: gw.jobs.running == 1, what="the first of three")
        assert "is paused" in await say(second, f"/schedules pause {sid}", CHAT)
        gate.touch()
        await settle(gw)
        assert len(runs(second, sid)) == 1
        states = sorted(r[0] for r in await gw.store.db.fetchall(
            "SELECT state FROM schedule_runs"))
        assert states == ["cancelled", "cancelled", "finished"]


async def test_one_shots_that_ran_do_not_count_against_the_limit(tmp_path: Path, clock) -> None:
    adapter = MemoryAdapter("memory")
    config = schedule_config(tmp_path / "home", schedules__max_per_conversation=2)
    async with running_gateway(config, [adapter], clock=clock) as gw:
        for minute in (1, 2):
            schedule_id(await say(adapter, f"/at +{minute}m echo once", CHAT))
        await move_to(gw, clock, START + 180)
        await settle(gw)
        schedule_id(await say(adapter, "/at +5m echo third", CHAT))
        assert [r.spec.describe().startswith("once") for r in await gw.scheduler.list()] == [
            True]


async def test_a_skip_count_waits_for_a_notice_to_say_it(tmp_path: Path, clock) -> None:
    config = schedule_config(tmp_path / "home", notifications__background="error")
    gate = tmp_path / "gate"
    adapter = MemoryAdapter("memory")
    async with running_gateway(config, [adapter], clock=clock) as gw:
        sid = schedule_id(await say(
            adapter, f"/every 10m while [ ! -e {gate} ]; do sleep 0.05; done; "
                     f"[ -e {tmp_path}/fail ] && exit 1; echo fine", CHAT))
        await move_to(gw, clock, START + 601)
        await eventually(lambda: gw.jobs.running == 1, what="a run")
        await move_to(gw, clock, START + 1201)
        await gw.scheduler.tick()  # skipped: the first still runs
        gate.touch()
        await settle(gw)
        assert runs(adapter, sid) == []  # it succeeded: nothing is sent in "error" mode
        (tmp_path / "fail").touch()
        await move_to(gw, clock, START + 1801)
        await settle(gw)
        (failed,) = runs(adapter, sid)
        assert "1 later scheduled time was skipped" in failed.text  # not lost on the way


async def test_a_claimed_run_is_started_by_one_starter_only(gateway, clock) -> None:
    gw, adapter = gateway
    from tools.schedule_runs import Claim, RunTaken

    sid = schedule_id(await say(adapter, "/every 10m echo once-only", CHAT))
    record = (await gw.scheduler.list())[0]
    await gw.store.db.write([(
        "INSERT INTO schedule_runs (schedule_id, scheduled_for, state, reason, claimed_at) "
        "VALUES (?, ?, 'claimed', 'due', 0)", (sid, START + 600))])
    run = Claim(START + 600, "due")
    # as two daemons on one store would: both try to start the same claimed run
    results = await asyncio.gather(gw.scheduler._start_run(record, run),
                                   gw.scheduler._start_run(record, run),
                                   return_exceptions=True)
    assert sum(isinstance(r, RunTaken) for r in results) == 1
    await settle(gw)
    assert len(runs(adapter, sid)) == 1 and len(await gw.jobs.list()) == 1


async def test_a_message_the_platform_refuses_does_not_pause_the_schedule(gateway, clock) -> None:
    gw, adapter = gateway
    from gateway.words.events import SendResult

    schedule_id(await say(adapter, "/every 10m echo x", CHAT))
    adapter.scripted_failures[CHAT.chat_id] = [SendResult.failed(
        "rejected: message is too long", permanent=True, route_gone=False)]
    await move_to(gw, clock, START + 601)
    await settle(gw)
    assert [n.reason for n in await gw.outbox.list("parked")] == ["rejected"]
    (record,) = await gw.scheduler.list()
    assert not record.paused


async def test_a_daily_schedule_made_on_the_eve_of_a_dst_change_keeps_its_hour(
        tmp_path: Path) -> None:
    from datetime import datetime
    from zoneinfo import ZoneInfo

    berlin = ZoneInfo("Europe/Berlin")
    clock = Clock(datetime(2027, 3, 27, 9, 0, tzinfo=berlin).timestamp())
    adapter = MemoryAdapter("memory")
    async with running_gateway(schedule_config(tmp_path / "home"), [adapter],
                               clock=clock) as gw:
        reply = await say(adapter, "/every --tz Europe/Berlin 1d echo daily", CHAT)
        assert "next run 2027-03-28 09:00 CEST" in reply
        sid = schedule_id(reply)
        for day in (28, 29):
            await move_to(gw, clock, datetime(2027, 3, day, 9, 0, 30, tzinfo=berlin).timestamp())
            await settle(gw)
        times = [re.search(r"the run of (.+?)\.\n", m.text)[1] for m in runs(adapter, sid)]
        assert times == ["2027-03-28 09:00 CEST", "2027-03-29 09:00 CEST"]
