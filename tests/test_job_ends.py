"""How background jobs end: once, when their shell ends, with what really happened.

Real processes through the real gateway parts behind an in-memory platform:
children left running, kills that must escalate, commands no shell can take,
terminal escapes, watch jobs' completions, the global watch breaker, and
patterns that would stall a backtracking engine.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gateway.daemon import Gateway, running_gateway
from gateway.platforms.memory import MemoryAdapter, SentMessage
from gateway.route import Route
from tools import job_process

from .conftest import make_config
from .helpers import eventually, eventually_async

CHAT = Route("memory", "dm", "1", user_id="1")
OTHER = Route("memory", "dm", "2", user_id="2")


@pytest.fixture
async def gateway(tmp_path: Path) -> AsyncIterator[tuple[Gateway, MemoryAdapter]]:
    adapter = MemoryAdapter("memory", send_delay=0.001)
    config = make_config(tmp_path / "home", jobs__kill_grace_seconds=0.5,
                         jobs__watch__cooldown_seconds=0)
    async with running_gateway(config, [adapter]) as gw:
        yield gw, adapter
        for job in await gw.jobs.list():  # nothing a test started outlives it
            if job.pid:
                job_process.signal_group(job.pid, signal.SIGKILL)


def notices(adapter: MemoryAdapter, job_id: str | None = None) -> list[SentMessage]:
    return [m for m in adapter.sent if m.kind == "notification"
            and (job_id is None or f"Job {job_id}" in m.text)]


async def start(adapter: MemoryAdapter, text: str, route: Route = CHAT) -> str:
    assert await adapter.receive(text, route) == "handled"
    reply = adapter.sent_to(route)[-1].text
    assert reply.startswith("Started job"), reply
    return reply.split()[2].rstrip(",;")


async def completion(adapter: MemoryAdapter, job_id: str, timeout: float = 10) -> SentMessage:
    found = await eventually(
        lambda: [m for m in notices(adapter, job_id) if "output matched" not in m.text],
        timeout=timeout, what=f"the completion of {job_id}")
    return found[0]


# --- children left running -------------------------------------------------------------

async def test_a_child_left_running_does_not_hold_the_notice_back(gateway) -> None:
    gw, adapter = gateway
    job_id = await start(adapter, "/bg sleep 20 & echo hi")
    notice = await completion(adapter, job_id)
    record = await gw.jobs.get(job_id)
    # reported while the child still runs: the job ended when its shell did
    assert job_process.group_members(record.pid) == 1
    assert f"Job {job_id} finished: exit code 0" in notice.text and "hi" in notice.text
    assert "It left 1 process running" in notice.text
    await adapter.receive("/jobs", CHAT)
    assert "exit code 0, left 1 running" in adapter.sent_to(CHAT)[-1].text


async def test_a_server_started_in_the_background_keeps_writing_to_the_log(
        gateway, tmp_path: Path) -> None:
    gw, adapter = gateway
    server = tmp_path / "server.sh"
    server.write_text("#!/bin/sh\necho serving\nsleep 0.5\necho still-serving\nsleep 20\n")
    server.chmod(0o755)
    job_id = await start(adapter, f"/bg cd {tmp_path} && ./server.sh &")
    notice = await completion(adapter, job_id)
    assert "It left 1 process running" in notice.text or (  # the script, then its sleep too
        "It left 2 processes running" in notice.text)
    record = await gw.jobs.get(job_id)
    await eventually(lambda: "still-serving" in record.log_path.read_text(),
                     what="the server's later output in the job's log")
    await adapter.receive(f"/log {job_id}", CHAT)
    assert "still-serving" in adapter.sent_to(CHAT)[-1].text


# --- kills -------------------------------------------------------------------------------

@pytest.mark.parametrize("command", [
    "trap '' TERM; sleep 60",                       # the job's own shell ignores SIGTERM
    "(trap '' TERM; sleep 60) & sleep 60",          # a child of it does
])
async def test_kill_escalates_and_reports_only_when_nothing_of_the_job_is_left(
        gateway, command: str) -> None:
    gw, adapter = gateway
    job_id = await start(adapter, f"/bg {command}")
    record = await gw.jobs.get(job_id)
    await eventually(lambda: job_process.group_members(record.pid) >= 2, what="the job's processes")
    await adapter.receive(f"/kill {job_id}", CHAT)
    assert adapter.sent_to(CHAT)[-1].text == f"Stopped job {job_id}."
    assert job_process.group_members(record.pid) == 0
    notice = await completion(adapter, job_id)
    assert "did not stop within 0.5 s of SIGTERM, so it got SIGKILL" in notice.text
    await gw.router.settle()
    assert len(notices(adapter, job_id)) == 1


async def test_a_job_that_stops_on_sigterm_is_reported_killed_by_it(gateway) -> None:
    gw, adapter = gateway
    job_id = await start(adapter, "/bg sleep 60; echo never-printed")
    await adapter.receive(f"/kill {job_id}", CHAT)
    notice = await completion(adapter, job_id)
    assert f"Job {job_id} was killed (exit code 143 (SIGTERM))" in notice.text
    assert "never-printed" not in notice.text.split("last output")[1]


# --- what the chat sees ------------------------------------------------------------------

async def test_a_command_with_a_nul_character_is_refused_and_leaves_no_job(gateway) -> None:
    gw, adapter = gateway
    await adapter.receive("/bg echo a\0b", CHAT)
    assert "NUL character" in adapter.sent_to(CHAT)[-1].text
    await adapter.receive("/run echo a\0b", CHAT)
    assert "NUL character" in adapter.sent_to(CHAT)[-1].text
    assert await gw.jobs.list() == [] and gw.jobs.running == 0


async def test_terminal_escapes_stay_in_the_log_and_out_of_the_chat(gateway) -> None:
    gw, adapter = gateway
    job_id = await start(adapter, r"/bg printf '\033[1;31mred alert\033[0m\n50%%\r100%%\n'")
    notice = await completion(adapter, job_id)
    assert "red alert" in notice.text and "\x1b" not in notice.text
    output = notice.text.split("last output")[1]
    assert "100%" in output and "50%" not in output  # a line redrawn in place
    assert "\x1b[1;31m" in (await gw.jobs.get(job_id)).log_path.read_text()
    await adapter.receive(r"/run printf '\033[32mgreen\033[0m\n'", CHAT)
    reply = adapter.sent_to(CHAT)[-1].text
    assert "green" in reply and "\x1b" not in reply


async def test_a_fast_job_never_reports_a_negative_duration(gateway) -> None:
    gw, adapter = gateway
    job_ids = [await start(adapter, "/bg true") for _ in range(5)]
    for job_id in job_ids:
        notice = await completion(adapter, job_id)
        assert "after -" not in notice.text and " after 0." in notice.text


# --- watch jobs --------------------------------------------------------------------------

async def test_a_watch_job_ends_with_one_completion_after_its_last_watch_notice(
        gateway) -> None:
    gw, adapter = gateway
    job_id = await start(adapter, "/watch ERROR sh -c 'echo ERROR early; sleep 0.2; "
                                  "echo ERROR late; exit 3'")
    await completion(adapter, job_id)
    await gw.router.settle()
    mine = notices(adapter, job_id)
    assert [("matched" in m.text) for m in mine] == [True, True, False]
    assert mine[-1].text.startswith(f"Job {job_id} finished: exit code 3")
    assert "ERROR early" in mine[0].text and "ERROR late" in mine[1].text


async def test_the_watch_breaker_holds_across_end_of_job_flushes(tmp_path: Path) -> None:
    adapter = MemoryAdapter("memory")
    config = make_config(tmp_path / "home", jobs__watch__cooldown_seconds=30,
                         jobs__watch__global_max_per_minute=6)
    async with running_gateway(config, [adapter]) as gw:
        chats = [Route("memory", "dm", str(n), user_id=str(n)) for n in range(5)]
        job_ids = [await start(adapter, "/watch ERROR echo ERROR a; echo ERROR b; echo ERROR c",
                               chat) for chat in chats]
        for job_id in job_ids:
            await completion(adapter, job_id)
        await gw.router.settle()
        watch_notices = [m for m in notices(adapter) if "output matched" in m.text]
        assert len(watch_notices) == 6  # the cap, end-of-job flushes included
        completions = [m for m in notices(adapter) if "finished" in m.text]
        assert len(completions) == 5
        # every matching line was either reported or counted as not reported
        shown = sum(m.text.count("ERROR ") for m in watch_notices)
        dropped = [int(m.text.split(" matching line")[0].rsplit("\n", 1)[1])
                   for m in completions if "not reported" in m.text]
        assert dropped and shown + sum(dropped) == 15
        told = next(m for m in completions if "not reported" in m.text)
        assert "over 6 a minute across all jobs" in told.text


async def test_a_catastrophic_pattern_does_not_hold_up_other_conversations(gateway) -> None:
    gw, adapter = gateway
    # 40 a's and a b: hours for a backtracking engine, and 50 such lines
    evil_line = "a" * 40 + "b"
    job_id = await start(adapter, f"/watch '(a+)+$' for i in $(seq 50); do echo {evil_line}; "
                                  f"done; echo {'a' * 40}")
    for _ in range(3):
        assert await asyncio.wait_for(adapter.receive("/status", OTHER), 5) == "handled"
    notice = await completion(adapter, job_id)
    assert "finished: exit code 0" in notice.text
    matched = [m for m in notices(adapter, job_id) if "output matched" in m.text]
    assert len(matched) == 1 and evil_line not in matched[0].text


async def test_a_pattern_the_watch_engine_cannot_run_is_refused_at_start(gateway) -> None:
    gw, adapter = gateway
    await adapter.receive(r"/watch '(a)\1' echo aa", CHAT)
    reply = adapter.sent_to(CHAT)[-1].text
    assert "bad watch pattern" in reply and "RE2" in reply
    assert await gw.jobs.list() == []


# --- the start window ---------------------------------------------------------------------

async def test_a_job_whose_process_never_started_is_reported_as_not_started(
        tmp_path: Path) -> None:
    config = make_config(tmp_path / "home")
    from gateway.notifications import ReturnAddress

    class DiesBeforeSpawning(Exception):
        pass

    first = MemoryAdapter("memory")
    async with running_gateway(config, [first]) as gw:
        await first.receive("hello", CHAT)
        session = await gw.store.live_session(gw.runner.session_key_for(CHAT))
        address = ReturnAddress(session.session_key, session.id, CHAT)

        def spawn_never(*args: object) -> int:
            raise DiesBeforeSpawning  # the daemon "dies" with the row committed

        gw.jobs._spawn = spawn_never  # type: ignore[method-assign]
        with pytest.raises(DiesBeforeSpawning):
            await gw.jobs.start("echo never ran", address)
        await gw.router.stop()
    second = MemoryAdapter("memory")
    async with running_gateway(config, [second]) as gw:
        (job,) = await gw.jobs.list()
        notice = await eventually(lambda: notices(second), what="the notice")
        assert notice[0].text.startswith(f"Job {job.id} did not start")
        assert (await gw.jobs.get(job.id)).state == "failed"


async def test_a_job_spawned_just_before_the_daemon_died_is_followed_not_lost(
        tmp_path: Path) -> None:
    """The window between the spawn and the pid's record: the lock proves it alive."""
    config = make_config(tmp_path / "home")
    from gateway.notifications import ReturnAddress

    class DiesAfterSpawning(Exception):
        pass

    first = MemoryAdapter("memory")
    async with running_gateway(config, [first]) as gw:
        await first.receive("hello", CHAT)
        session = await gw.store.live_session(gw.runner.session_key_for(CHAT))
        address = ReturnAddress(session.session_key, session.id, CHAT)
        real_spawn = gw.jobs._spawn

        def spawn_then_die(record, workdir) -> int:
            real_spawn(record, workdir)
            raise DiesAfterSpawning  # no pid recorded, nothing followed

        gw.jobs._spawn = spawn_then_die  # type: ignore[method-assign]
        with pytest.raises(DiesAfterSpawning):
            await gw.jobs.start("sleep 1; echo real-output; exit 5", address)
        await gw.router.stop()
    second = MemoryAdapter("memory")
    async with running_gateway(config, [second]) as gw:
        (job,) = await gw.jobs.list()
        assert job.state == "running" and job.pid is not None  # found through its pid file
        notice = (await eventually(lambda: notices(second), what="the notice"))[0]
        assert f"Job {job.id} finished: exit code 5" in notice.text
        assert "real-output" in notice.text
        await gw.router.settle()
        assert len(notices(second)) == 1


async def test_a_wrapper_seen_before_it_wrote_its_pid_file_is_followed_by_its_lock(
        tmp_path: Path) -> None:
    """The restarted daemon can look before the wrapper has written its pid file:
    the lock it was handed before its spawn is the proof that it runs."""
    import fcntl
    import subprocess
    import sys

    config = make_config(tmp_path / "home")
    from gateway.notifications import ReturnAddress

    class DiesAfterSpawning(Exception):
        pass

    slow: list[subprocess.Popen] = []

    def spawn_a_slow_wrapper(record, workdir) -> int:
        # holds the job's lock like a wrapper, writes no pid file, ends with code 4
        lock = os.open(record.files.lock, os.O_RDWR | os.O_CREAT)
        fcntl.flock(lock, fcntl.LOCK_EX)
        slow.append(subprocess.Popen(
            [sys.executable, "-c", "import sys, time; time.sleep(1.5); "
             "open(sys.argv[1], 'w').write('4\\n')", str(record.files.exit_code)],
            stdin=lock, start_new_session=True))
        os.close(lock)
        raise DiesAfterSpawning

    first = MemoryAdapter("memory")
    async with running_gateway(config, [first]) as gw:
        await first.receive("hello", CHAT)
        session = await gw.store.live_session(gw.runner.session_key_for(CHAT))
        gw.jobs._spawn = spawn_a_slow_wrapper  # type: ignore[method-assign]
        with pytest.raises(DiesAfterSpawning):
            await gw.jobs.start("echo four", ReturnAddress(session.session_key, session.id, CHAT))
        await gw.router.stop()
    second = MemoryAdapter("memory")
    async with running_gateway(config, [second]) as gw:
        (job,) = await gw.jobs.list()
        assert job.state == "running"  # not "did not start": the lock is held
        notice = (await eventually(lambda: notices(second), what="the notice"))[0]
        assert f"Job {job.id} finished: exit code 4" in notice.text
    slow[0].wait()


async def test_recovery_leaves_the_delegations_of_this_process_alone(tmp_path: Path) -> None:
    config = make_config(tmp_path / "home")
    adapter = MemoryAdapter("memory")
    async with running_gateway(config, [adapter]) as gw:
        await adapter.receive("/delegate sleep 0.5; echo delegated-result", CHAT)
        assert await gw.delegations.recover() == 0  # a second look finds nothing of ours
        result = await eventually(lambda: notices(adapter), what="the delegation's result")
        assert "finished" in result[0].text and "delegated-result" in result[0].text
        await gw.router.settle()
        assert not any("was lost" in m.text for m in adapter.sent)


async def test_recovered_jobs_are_reported_before_any_message_is_taken(tmp_path: Path) -> None:
    """Nothing is taken in while recovery runs, so nothing new can be mistaken for old."""
    config = make_config(tmp_path / "home")
    order: list[str] = []
    adapter = MemoryAdapter("memory")
    real_connect = adapter.connect

    async def connect(runner) -> None:
        order.append("connect")
        await real_connect(runner)

    adapter.connect = connect  # type: ignore[method-assign]
    from tools.jobs import JobManager
    real_recover = JobManager.recover

    async def recover(self) -> int:
        order.append("recover")
        return await real_recover(self)

    JobManager.recover = recover  # type: ignore[method-assign]
    try:
        async with running_gateway(config, [adapter]):
            pass
    finally:
        JobManager.recover = real_recover  # type: ignore[method-assign]
    assert order == ["recover", "connect"]


async def test_a_pid_file_is_written_by_the_wrapper_itself(gateway) -> None:
    gw, adapter = gateway
    job_id = await start(adapter, "/bg sleep 5")
    record = await gw.jobs.get(job_id)
    recorded = await eventually_async(
        _async(lambda: job_process.read_pid_file(record.files.pid)), what="the pid file")
    assert recorded == (record.pid, record.proc_start)
    assert job_process.lock_held(record.files.lock)
    os.killpg(record.pid, signal.SIGKILL)
    await completion(adapter, job_id)
    assert not job_process.lock_held(record.files.lock)


def _async(predicate):
    async def check():
        return predicate()
    return check
