"""Background jobs report back where they started, through the real daemon parts."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gateway.daemon.assembly import Gateway, running_gateway
from gateway.delivery.notifications import NewNotification
from gateway.words.events import SendResult
from gateway.words.return_address import ReturnAddress
from gateway.words.route import Route
from tests.conftest import make_config
from tests.helpers import eventually, eventually_async, settled
from tests.memory_platform import MemoryAdapter, SentMessage

FORUM = "-1009999"


@pytest.fixture
async def gateway(tmp_path: Path) -> AsyncIterator[tuple[Gateway, MemoryAdapter]]:
    adapter = MemoryAdapter("memory", send_delay=0.002)
    config = make_config(tmp_path / "home", jobs__watch__cooldown_seconds=2,
                         jobs__watch__max_notices=3)
    async with running_gateway(config, [adapter]) as gw:
        yield gw, adapter


def notices(adapter: MemoryAdapter) -> list[SentMessage]:
    return [m for m in adapter.sent if m.kind == "notification"]


def job_id_from(reply: SentMessage) -> str:
    return reply.text.split()[2].rstrip(",;")


async def test_notices_go_to_the_topic_and_anchor_that_started_each_job(gateway) -> None:
    gw, adapter = gateway
    starts = {
        "topic 42": Route("memory", "group", FORUM, thread_id="42", user_id="1"),
        "topic 17": Route("memory", "group", FORUM, thread_id="17", user_id="1"),
        "general": Route("memory", "group", FORUM, user_id="1"),
        "dm": Route("memory", "dm", "1", user_id="1"),
        "other group topic 42": Route("memory", "group", "-1008888", thread_id="42",
                                      user_id="1"),
    }
    chatter = [Route("memory", "group", FORUM, thread_id=str(t), user_id="2")
               for t in (5, 6, 7)]
    started = await asyncio.gather(*(
        adapter.receive(f"/bg sleep 0.5; echo marker-{name.replace(' ', '-')}",
                        route.with_anchor(f"anchor-{i}"), message_id=f"anchor-{i}")
        for i, (name, route) in enumerate(starts.items())))
    assert set(started) == {"handled"}
    for _ in range(20):  # foreground chatter in other topics meanwhile
        await asyncio.gather(*(adapter.receive("chatter", r) for r in chatter))
    await eventually(lambda: len(notices(adapter)) == len(starts), what="all notices")
    for i, (name, route) in enumerate(starts.items()):
        mine = [m for m in notices(adapter) if f"marker-{name.replace(' ', '-')}" in m.text]
        assert len(mine) == 1, name
        got = mine[0].route
        assert (got.chat_id, got.thread_id, got.message_id) == (
            route.chat_id, route.thread_id, f"anchor-{i}"), name


async def test_a_watch_reports_while_running_then_disables_then_completes_once(
        gateway, tmp_path: Path) -> None:
    gw, adapter = gateway
    chat = Route("memory", "dm", "7", user_id="7")
    stop = tmp_path / "stop"  # the job prints a match every 0.1 s for 10 s, or until this is
    await adapter.receive(
        f"/watch 'ERROR [0-9]+' i=0; while [ $i -lt 100 ] && [ ! -e {stop} ]; do "
        f"i=$((i + 1)); echo \"ERROR $i\"; sleep 0.1; done", chat)
    job_id = job_id_from(adapter.sent_to(chat)[-1])
    first = await eventually(lambda: notices(adapter), timeout=30, what="a watch notice")
    record = await gw.jobs.get(job_id)
    assert record is not None and record.state == "running"  # arrived while the job ran
    assert first[0].text.startswith(f"Job {job_id} output matched `ERROR [0-9]+`:")

    # the watch turns itself off while the job runs; the job then goes on printing
    # matches (ten more lines), which no notice may tell, before it is let end
    await eventually(lambda: any("watch turned off" in m.text for m in notices(adapter)),
                     timeout=20, what="the watch turned off")
    printed = len(record.log_path.read_text().splitlines())
    await eventually(lambda: len(record.log_path.read_text().splitlines()) >= printed + 10,
                     timeout=20, what="ten more matching lines")
    stop.touch()
    await gw.jobs.wait(job_id)
    await eventually(lambda: any(f"Job {job_id} finished" in m.text for m in notices(adapter)),
                     what="the completion")
    await gw.router.settle()
    kinds = []
    for m in notices(adapter):
        kinds.append("completion" if "finished" in m.text else
                     "disabled" if "watch turned off" in m.text else "match")
    assert kinds == ["match", "match", "match", "disabled", "completion"]
    assert "matching lines were held back since the last notice" in notices(adapter)[1].text
    assert all(m.route.chat_id == "7" for m in notices(adapter))


async def test_a_job_started_before_new_reports_as_a_labelled_notice_without_a_turn(
        gateway) -> None:
    gw, adapter = gateway
    chat = Route("memory", "dm", "3", user_id="3")
    await adapter.receive("/bg sleep 0.5; echo from-the-old-session", chat)
    old = await gw.store.live_session(gw.runner.session_key_for(chat))
    await adapter.receive("/new", chat)
    new = await gw.store.live_session(gw.runner.session_key_for(chat))
    assert old.id != new.id
    notice = (await eventually(lambda: notices(adapter), what="the notice"))[0]
    assert notice.route.chat_id == "3"
    assert f"from an ended session {old.id[:8]}" in notice.text
    await gw.router.settle()
    new_transcript = [line.role for line in await gw.store.messages(new.id)]
    assert "notification" not in new_transcript
    assert (await gw.store.get(old.id)).ended_at is not None  # not reopened


async def test_unprovable_notifications_are_parked_and_sent_nowhere(gateway) -> None:
    gw, adapter = gateway
    route = Route("memory", "dm", "1")
    bad = [
        ("not-a-key", "no_route"),
        ("agent:main:matrix:dm:1", "unknown_platform"),
        ("agent:main:memory:dm:1", "no_route"),  # no such session in the store
    ]
    await gw.outbox.produce([
        NewNotification(f"x{i}:completion:0", "completion", ReturnAddress(key, "nope", route),
                        f"stray {i}") for i, (key, _) in enumerate(bad)])
    async def all_parked() -> list:
        parked = await gw.outbox.list("parked")
        return parked if len(parked) == len(bad) else []

    parked = await eventually_async(all_parked, what="three parked notifications")
    assert sorted((n.session_key, n.reason) for n in parked) == sorted(bad)
    assert adapter.sent == []


async def test_a_busy_owner_keeps_its_notice_until_its_turn_ends(
        gateway, tmp_path: Path) -> None:
    gw, adapter = gateway
    a, b = Route("memory", "dm", "10", user_id="10"), Route("memory", "dm", "11", user_id="11")
    await adapter.receive("/bg sleep 0.3; echo done-a", a)
    job_a = job_id_from(adapter.sent_to(a)[-1])
    await adapter.receive("/bg sleep 0.3; echo done-b", b)
    go_on = tmp_path / "go-on"  # A's turn lasts until this is there
    slow = adapter.receive(f"/run while [ ! -e {go_on} ]; do sleep 0.05; done; echo slow-done",
                           a)
    b_notice = await eventually(
        lambda: [m for m in notices(adapter) if "done-b" in m.text], what="B's notice")
    assert not slow.done()  # B got its notice while A was still mid-turn
    assert not [m for m in notices(adapter) if "done-a" in m.text]
    await gw.jobs.wait(job_a)  # A's job ended and its notice is committed

    async def a_notice_claimed() -> bool:  # the router has it in hand, in A's lane
        return any(n.job_id == job_a for n in await gw.outbox.list("claimed"))

    await eventually_async(a_notice_claimed, what="A's notice claimed")
    await asyncio.sleep(0.2)  # it stays unsent while A's turn goes on
    assert not slow.done()
    assert not [m for m in notices(adapter) if "done-a" in m.text]
    go_on.touch()
    await slow
    await eventually(lambda: [m for m in notices(adapter) if "done-a" in m.text],
                     what="A's notice")
    texts_a = [m.text for m in adapter.sent_to(a)]
    assert texts_a.index(next(t for t in texts_a if "slow-done" in t)) < texts_a.index(
        next(t for t in texts_a if "done-a" in t))
    assert b_notice[0].route.chat_id == "11"


@pytest.mark.parametrize(("mode", "expected"), [
    # a watch job's match, then its completion (whose output is "match" too)
    ("all", ["match", "match", "completion-ok", "completion-fail"]),
    ("result", ["completion-ok", "completion-fail", "match"]),
    ("error", ["completion-fail"]),
    ("off", []),
])
async def test_background_setting_chooses_what_is_sent(tmp_path: Path, mode, expected) -> None:
    adapter = MemoryAdapter("memory")
    config = make_config(tmp_path / mode, notifications__background=mode)
    async with running_gateway(config, [adapter]) as gw:
        chat = Route("memory", "dm", "1", user_id="1")
        await adapter.receive("/bg echo completion-ok", chat)
        await adapter.receive("/bg echo completion-fail; exit 1", chat)
        await adapter.receive("/watch match echo match", chat)
        for job in list(gw.jobs._live):
            await gw.jobs.wait(job)  # returns once its end (and its notices) are committed
        await settled(gw)
        got = sorted(m.text.split("```\n")[1].split("\n")[0] for m in notices(adapter))
        assert got == sorted(expected)


async def test_jobs_and_logs_answer_only_to_their_own_conversation(gateway) -> None:
    gw, adapter = gateway
    mine, other = Route("memory", "dm", "1", user_id="1"), Route("memory", "dm", "2",
                                                                 user_id="2")
    await adapter.receive("/bg echo line-one; sleep 30", mine)
    job_id = job_id_from(adapter.sent_to(mine)[-1])
    await eventually(lambda: (gw.jobs.output_tail(gw.jobs._live[job_id].record, 5)),
                     what="output")
    await adapter.receive("/jobs", mine)
    assert job_id in adapter.sent_to(mine)[-1].text
    await adapter.receive(f"/log {job_id}", mine)
    assert "line-one" in adapter.sent_to(mine)[-1].text
    await adapter.receive(f"/kill {job_id}", other)
    assert "No job" in adapter.sent_to(other)[-1].text
    await adapter.receive(f"/kill {job_id}", mine)
    assert f"Stopped job {job_id}" in adapter.sent_to(mine)[-1].text
    notice = await eventually(lambda: notices(adapter), what="the kill notice")
    assert "was killed" in notice[0].text and notice[0].route.chat_id == "1"


async def test_usage_errors_are_explained(gateway) -> None:
    gw, adapter = gateway
    chat = Route("memory", "dm", "1", user_id="1")
    for command, expected in (("/bg", "Usage: /bg"), ("/watch onlypattern", "Usage: /watch"),
                              ("/watch '(bad' echo", "bad watch pattern"),
                              ("/log", "Usage: /log"), ("/kill j0000000", "No job")):
        await adapter.receive(command, chat)
        assert expected in adapter.sent_to(chat)[-1].text, command


async def test_foreground_run_replies_with_output_and_exit_code(gateway) -> None:
    gw, adapter = gateway
    chat = Route("memory", "dm", "1", user_id="1")
    await adapter.receive("/run echo hello; exit 4", chat)
    reply = adapter.sent_to(chat)[-1].text
    assert "hello" in reply and "exit code 4" in reply


async def test_recovery_reports_a_job_that_ended_while_the_daemon_was_down(
        tmp_path: Path) -> None:
    config = make_config(tmp_path / "home")
    chat = Route("memory", "dm", "5", user_id="5")
    first = MemoryAdapter("memory")
    async with running_gateway(config, [first]) as gw:
        await first.receive("/bg sleep 0.5; echo survived; exit 3", chat)
        await first.receive("/bg sleep 30", chat)
        ids = [job_id_from(m) for m in first.sent_to(chat)]
        short_job = await gw.jobs.get(ids[0])
        await gw.router.stop()  # the daemon "dies": nothing more is delivered
    for job_id in ids:  # jobs outlive the daemon
        record_dir = config.home_path / "jobs" / job_id
        assert record_dir.exists()
    await eventually(lambda: short_job.exit_path.exists(), what="the short job's end, unseen")
    second = MemoryAdapter("memory")
    async with running_gateway(config, [second]) as gw:
        long_job = await gw.jobs.get(ids[1])
        assert long_job is not None and long_job.state == "running"
        await eventually(lambda: notices(second), what="the recovered completion")
        done = notices(second)[0]
        assert "exit code 3" in done.text and "survived" in done.text
        assert done.route.chat_id == "5"
        os.killpg(long_job.pid, signal.SIGKILL)
        await eventually(lambda: len(notices(second)) == 2, what="the re-attached job's end")
        await gw.router.settle()
        listed = await gw.outbox.list()
        assert sorted(n.job_id for n in listed) == sorted(ids)
        assert {n.state for n in listed} == {"delivered"}


async def test_whoami_still_reports_its_context_as_json(gateway) -> None:
    gw, adapter = gateway
    chat = Route("memory", "dm", "1", user_id="1")
    await adapter.receive("/whoami", chat)
    assert json.loads(adapter.sent_to(chat)[-1].text)["tool"]["route"]["chat_id"] == "1"


async def test_a_thread_that_is_gone_parks_the_notice_as_route_gone(gateway) -> None:
    gw, adapter = gateway
    topic = Route("memory", "group", FORUM, thread_id="404", user_id="1")
    await adapter.receive("/bg echo into-the-void", topic)
    adapter.scripted_failures[FORUM] = [
        SendResult.failed("message thread not found", permanent=True)]

    async def parked() -> list:
        return await gw.outbox.list("parked")

    rows = await eventually_async(parked, what="the parked notice")
    assert rows[0].reason == "route_gone" and "thread not found" in rows[0].last_error
    assert notices(adapter) == []


async def test_a_failed_send_is_retried_not_dropped(
        gateway, monkeypatch: pytest.MonkeyPatch) -> None:
    import gateway.delivery.router as router
    from gateway.retry import RetryPolicy

    # the outbox's redelivery backoff after the 502, a tenth as long
    monkeypatch.setattr(router, "REDELIVERY", RetryPolicy(
        tuple(d / 10 for d in router.REDELIVERY.delays), router.REDELIVERY.attempts))
    gw, adapter = gateway
    chat = Route("memory", "dm", "8", user_id="8")
    await adapter.receive("/bg sleep 0.3; echo eventually-sent", chat)
    adapter.scripted_failures["8"] = [SendResult.failed("flood control", retry_after=0.2),
                                      SendResult.failed("502 bad gateway")]
    await eventually(lambda: notices(adapter), timeout=30, what="the notice after retries")
    await gw.router.settle()
    (row,) = await gw.outbox.list("delivered")
    assert row.attempts == 3 and "eventually-sent" in row.text
    assert len(notices(adapter)) == 1


async def test_matches_held_back_by_the_cooldown_are_reported_when_the_job_ends(
        gateway) -> None:
    gw, adapter = gateway
    chat = Route("memory", "dm", "9", user_id="9")
    await adapter.receive("/watch ERROR echo 'ERROR one'; echo 'ERROR two: deploy failed'; "
                          "exit 1", chat)
    job_id = job_id_from(adapter.sent_to(chat)[-1])
    await gw.jobs.wait(job_id)
    await eventually(lambda: len(notices(adapter)) >= 3, what="both watch notices, then the end")
    await gw.router.settle()
    first, final, completion = notices(adapter)
    assert "ERROR one" in first.text and "ERROR two" not in first.text
    assert "ERROR two: deploy failed" in final.text  # not lost with the job's end
    assert completion.text.startswith(f"Job {job_id} finished: exit code 1")
