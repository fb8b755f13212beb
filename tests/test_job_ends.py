"""How background jobs end: once, when their shell ends, with what really happened.

Real processes through the real gateway parts behind an in-memory platform:
children left running, kills that must escalate, commands no shell can take,
terminal escapes, watch jobs' completions, the global watch breaker, and
patterns that would stall a backtracking engine.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import re
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import tools.job_kill as job_kill
import tools.job_process as job_process
from gateway.daemon.assembly import Gateway, running_gateway
from gateway.words.return_address import ReturnAddress
from gateway.words.route import Route
from tests.conftest import make_config
from tests.helpers import eventually, eventually_async
from tests.memory_platform import MemoryAdapter, SentMessage
from tools.job_notices import completion_text
from tools.job_record import JobRecord

CHAT = Route("memory", "dm", "1", user_id="1")
OTHER = Route("memory", "dm", "2", user_id="2")


@pytest.fixture
async def gateway(request: pytest.FixtureRequest, tmp_path: Path
                  ) -> AsyncIterator[tuple[Gateway, MemoryAdapter]]:
    """A gateway whose /kill escalates to SIGKILL after 0.5 s, or after the grace a
    ``@pytest.mark.kill_grace(seconds)`` test asks for."""
    grace = request.node.get_closest_marker("kill_grace")
    adapter = MemoryAdapter("memory", send_delay=0.001)
    config = make_config(tmp_path / "home",
                         jobs__kill_grace_seconds=grace.args[0] if grace else 0.5,
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
    # the script, its sleep, perhaps the subshell that had not exec'd yet: a snapshot
    assert re.search(r"It left [1-9] process(es)? running", notice.text)
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
    # (the subshell may be forked before it ran its trap: wait for the trap itself)
    await eventually(lambda: _ignores_sigterm(record.pid), what="the job's trap set")
    await adapter.receive(f"/kill {job_id}", CHAT)
    assert adapter.sent_to(CHAT)[-1].text == f"Stopped job {job_id}."
    assert job_process.group_members(record.pid) == 0
    notice = await completion(adapter, job_id)
    assert "did not stop within 0.5 s of SIGTERM, so it got SIGKILL" in notice.text
    await gw.router.settle()
    assert len(notices(adapter, job_id)) == 1


async def test_a_kill_right_after_the_start_stops_the_job_by_sigterm_every_time(
        tmp_path: Path) -> None:
    """A shell that is starting the command when SIGTERM comes can swallow it: about one
    kill in fifty at a random moment of a job's first 20 ms, each of which then ran out
    the grace and took SIGKILL. Of 200 kills, none may need SIGKILL."""
    rng = random.Random(0)

    async def start_and_kill(n: int) -> bool:
        folder = tmp_path / "jobs" / str(n)
        pgid = job_process.spawn("sleep 60; echo never-printed", job_process.JobFiles(folder),
                                 cwd=tmp_path, env=dict(os.environ), open_files=1024)
        await asyncio.sleep(rng.uniform(0, 0.02))
        try:
            return await job_kill.kill_group(pgid, grace=60)
        finally:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pgid, 0)  # noqa: ASYNC222  (it has ended: reaped at once)

    escalated = [n for n in range(200) if await start_and_kill(n)]
    assert escalated == []


def _ignores_sigterm(pgid: int) -> bool:
    """Some live process of the job's group ignores SIGTERM (its SigIgn mask says so)."""
    for entry in os.scandir("/proc"):
        stat = job_process.read_stat(entry.name) if entry.name.isdigit() else None
        if stat is None or not stat.alive or stat.pgrp != pgid:
            continue
        try:
            status = Path(f"/proc/{entry.name}/status").read_text()
        except OSError:
            continue
        ignored = next((int(line.split()[1], 16) for line in status.splitlines()
                        if line.startswith("SigIgn:")), 0)
        if ignored & (1 << (signal.SIGTERM - 1)):
            return True
    return False


@pytest.mark.kill_grace(60)  # a shell on a busy machine may take more than 0.5 s to go
async def test_a_job_that_stops_on_sigterm_is_reported_killed_by_it(gateway) -> None:
    gw, adapter = gateway
    job_id = await start(adapter, "/bg sleep 60; echo never-printed")
    await adapter.receive(f"/kill {job_id}", CHAT)
    notice = await completion(adapter, job_id)
    assert f"Job {job_id} was killed (exit code 143 (SIGTERM))" in notice.text
    assert "never-printed" not in notice.text.split("```")[1]


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
    output = notice.text.split("```")[1]
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
        assert "after -" not in notice.text and "after 0.0 s" not in notice.text
        assert re.search(r"exit code 0 (in under 0\.1 s|after \d+\.\d s)", notice.text), \
            notice.text


def test_a_job_quicker_than_a_tenth_of_a_second_says_so() -> None:
    """Not "after 0.0 s", which reads as if it never ran."""
    address = ReturnAddress("agent:main:memory:dm:1", "s1", CHAT)
    record = JobRecord("j1", "true", "/", "exited", 1, None, 100.0, 100.03, 0, False, True,
                       [], 0, False, address.session_key, "s1", address,
                       Path("/nonexistent/output.log"), Path("/nonexistent/exit"))
    assert "in under 0.1 s." in completion_text(record, [])
    record.ended_at = 102.5
    assert "after 2.5 s." in completion_text(record, [])


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
    notice = await completion(adapter, job_id)
    assert "finished: exit code 0" in notice.text
    matched = [m for m in notices(adapter, job_id) if "output matched" in m.text]
    assert len(matched) == 1 and evil_line not in matched[0].text
    # linear, but a second or so per line: matched off the event loop, so another
    # conversation is answered while the job's lines are still being matched
    heavy = await start(adapter, "/watch '(.*a){150}b' python3 -c \"print(('ab' * 30000 + "
                                 "'\\\\n') * 10, end='')\"")
    await _answered_before_the_end_of(adapter, heavy, gw)


async def test_a_watched_job_writing_fast_does_not_hold_up_other_conversations(
        gateway) -> None:
    gw, adapter = gateway
    job_id = await start(adapter, "/watch NEVER-MATCHES yes abcdefgh | head -c 10000000")
    await _answered_before_the_end_of(adapter, job_id, gw)  # 10 MB to go through the watch


async def _answered_before_the_end_of(adapter: MemoryAdapter, job_id: str,
                                     gw: Gateway) -> None:
    """Once the job has written everything and ended, while its watch still works
    through the backlog, another conversation's messages are answered before the job's
    end is reported — which a daemon busy matching on its event loop could not do."""
    record = await gw.jobs.get(job_id)
    await eventually(lambda: record.exit_path.exists(), timeout=30, what="the job's exit")
    assert set(await asyncio.gather(*(adapter.receive("/status", OTHER) for _ in range(3)))
               ) == {"handled"}
    end = await completion(adapter, job_id, timeout=60)
    assert "finished: exit code 0" in end.text
    answers = [i for i, m in enumerate(adapter.sent) if m.route.chat_id == OTHER.chat_id]
    assert len(answers) == 3 and max(answers) < adapter.sent.index(end)


async def test_too_large_a_pattern_is_refused_at_start(gateway) -> None:
    gw, adapter = gateway
    await adapter.receive("/watch '(.*a){1000}b' echo aab", CHAT)
    assert "too large" in adapter.sent_to(CHAT)[-1].text
    assert await gw.jobs.list() == []


async def test_a_pattern_the_watch_engine_cannot_run_is_refused_at_start(gateway) -> None:
    gw, adapter = gateway
    await adapter.receive(r"/watch '(a)\1' echo aa", CHAT)
    reply = adapter.sent_to(CHAT)[-1].text
    assert "bad watch pattern" in reply and "RE2" in reply
    assert await gw.jobs.list() == []


async def test_jobs_get_default_signals_and_none_of_the_daemons_descriptors(gateway) -> None:
    gw, adapter = gateway
    leaked_read, leaked_write = os.pipe()
    os.set_inheritable(leaked_write, True)  # as a supervisor's pipe would be
    try:
        job_id = await start(adapter, "/bg yes | head -1; echo piped=$?; ls /proc/self/fd | "
                                      "tr '\\n' ' '; echo; grep SigIgn /proc/self/status")
        notice = await completion(adapter, job_id)
    finally:
        os.close(leaked_read)
        os.close(leaked_write)
    output = notice.text.split("```")[1]
    assert "Broken pipe" not in output and "piped=0" in output  # SIGPIPE is not ignored
    fds = next(line for line in output.splitlines() if line.startswith("0 1 2"))
    assert fds.split() == ["0", "1", "2", "3"]  # 3: ls's own view of the directory
    ignored = int(next(line for line in output.splitlines()
                       if line.startswith("SigIgn")).split()[1], 16)
    assert not ignored & (1 << (signal.SIGPIPE - 1))


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


async def test_a_notice_says_when_its_output_was_cut_to_the_last_lines(gateway) -> None:
    gw, adapter = gateway
    whole = await completion(adapter, await start(adapter, "/bg seq 1 3"))
    assert "\noutput:\n```\n1\n2\n3\n```" in whole.text
    job_id = await start(adapter, "/bg seq 1 50")
    cut = await completion(adapter, job_id)
    assert f"last 20 lines of its output (/log {job_id} has more):" in cut.text
    assert cut.text.split("```")[1].split() == [str(n) for n in range(31, 51)]
