"""Jobs across a restart of the daemon: the start window, commands that do what they
like with their shell, a kill cut short, long lines and watch offsets.

The restarts here happen inside one test process, where a restarted job manager
could read an earlier one's child's wait status; it does not: a re-attached job's
end is read from its wrapper's records, as after a real restart.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import subprocess
import sys
from pathlib import Path

import pytest

import tools.job_process as job_process
from gateway.daemon.assembly import Gateway, running_gateway
from gateway.words.return_address import ReturnAddress
from gateway.words.route import Route
from tests.conftest import make_config
from tests.helpers import eventually, eventually_async
from tests.memory_platform import MemoryAdapter, SentMessage
from tools.job_output import LINE_LIMIT, LogReader

CHAT = Route("memory", "dm", "1", user_id="1")


def notices(adapter: MemoryAdapter) -> list[SentMessage]:
    return [m for m in adapter.sent if m.kind == "notification"]


async def address_of(gw: Gateway, adapter: MemoryAdapter) -> ReturnAddress:
    await adapter.receive("hello", CHAT)
    session = await gw.store.live_session(gw.runner.session_key_for(CHAT))
    return ReturnAddress(session.session_key, session.id, CHAT)


# --- the start window ---------------------------------------------------------------------

async def test_a_job_whose_process_never_started_is_reported_as_not_started(
        tmp_path: Path) -> None:
    config = make_config(tmp_path / "home")

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
    import subprocess

    config = make_config(tmp_path / "home")

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




# --- commands that do what they like with their shell ---------------------------------------

@pytest.mark.parametrize(("command", "code"), [
    ("exec sh -c 'sleep 1; exit 6'", 6),            # replaces its shell
    ("trap 'echo bye' EXIT; sleep 1; exit 4", 4),   # sets its own EXIT trap
    ("cd sub && sleep 1; exit 3", 3),               # changes directory (home is relative)
    ("__homing_dir=/nowhere; code=9; sleep 1; exit 5", 5),  # the wrapper's names
])
async def test_a_job_ending_while_the_daemon_is_down_reports_its_real_exit_code(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: str, code: int) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sub").mkdir()
    config = make_config(Path("relhome"))  # as HOMING_HOME=relhome would
    first = MemoryAdapter("memory")
    async with running_gateway(config, [first]) as gw:
        record = await gw.jobs.start(command, await address_of(gw, first))
        await gw.router.stop()
    await eventually(lambda: record.exit_path.exists(), timeout=30, what="the job's end")
    second = MemoryAdapter("memory")
    async with running_gateway(config, [second]) as gw:
        notice = (await eventually(lambda: notices(second), what="the notice"))[0]
        assert f"Job {record.id} finished: exit code {code} " in notice.text, notice.text
        assert "cannot create" not in notice.text


# --- a kill cut short ---------------------------------------------------------------------

async def test_a_kill_cut_short_by_a_restart_is_finished_after_it(tmp_path: Path) -> None:
    config = make_config(tmp_path / "home", jobs__kill_grace_seconds=3)
    first = MemoryAdapter("memory")
    async with running_gateway(config, [first]) as gw:
        address = await address_of(gw, first)
        record = await gw.jobs.start("trap '' TERM; echo armed; sleep 60", address)
        # the trap is set once "armed" is out (a SIGTERM before it would end the shell)
        await eventually(lambda: b"armed" in record.log_path.read_bytes()
                         and job_process.group_members(record.pid) >= 2,
                         what="the job ignoring SIGTERM")
        killing = asyncio.ensure_future(gw.jobs.kill(record.id))

        async def kill_recorded() -> bool:
            row = await gw.store.db.fetchone("SELECT killed FROM jobs WHERE id = ?",
                                             (record.id,))
            return bool(row and row[0])

        # the kill is recorded, then SIGTERM sent (and ignored); the daemon stops meanwhile
        await eventually_async(kill_recorded, what="the kill recorded")
        await gw.router.stop()
    with pytest.raises(Exception, match="gateway is stopping"):
        await killing
    assert job_process.group_members(record.pid) >= 1  # still running: it ignores SIGTERM
    second = MemoryAdapter("memory")
    async with running_gateway(config, [second]) as gw:
        notice = (await eventually(lambda: notices(second), timeout=30, what="the notice"))[0]
        assert f"Job {record.id} was killed" in notice.text and "SIGKILL" in notice.text
        assert job_process.group_members(record.pid) == 0


# --- long lines and offsets ------------------------------------------------------------------

def test_an_over_long_line_is_handed_out_cut_once_with_the_offset_past_it(
        tmp_path: Path) -> None:
    log = tmp_path / "output.log"
    long_line = b"x" * (LINE_LIMIT + 100)
    log.write_bytes(long_line[: LINE_LIMIT + 50])  # the line is still being written
    reader = LogReader(log)
    assert reader.read() == ([], False)
    with log.open("ab") as f:
        f.write(long_line[LINE_LIMIT + 50:] + b"\nnext\n")
    lines, _ = reader.read()
    assert [(text.endswith("[line cut]"), end) for text, end in lines] == [
        (True, len(long_line) + 1), (False, len(long_line) + 6)]
    # a reader started where the watch's last notice left off does not see it again
    again, _ = LogReader(log, lines[0][1]).read()
    assert [text for text, _ in again] == ["next"]


async def test_a_watch_job_of_a_version_without_offsets_reads_on_from_the_end(
        tmp_path: Path) -> None:
    config = make_config(tmp_path / "home", jobs__watch__cooldown_seconds=0)
    first = MemoryAdapter("memory")
    async with running_gateway(config, [first]) as gw:
        address = await address_of(gw, first)
        gate = tmp_path / "gate"
        record = await gw.jobs.start(f"echo ERROR old; while [ ! -e {gate} ]; do sleep 0.05; "
                                     f"done; echo ERROR new", address, watch_patterns=["ERROR"])
        await eventually(lambda: [m for m in notices(first) if "ERROR old" in m.text],
                         what="the first match")
        await gw.router.stop()
        # as an older version left it: a notice sent, no offset kept
        await gw.store.db.write([("UPDATE jobs SET watch_offset = 0 WHERE id = ?",
                                  (record.id,))])
    second = MemoryAdapter("memory")
    async with running_gateway(config, [second]) as gw:
        gate.touch()
        await eventually(lambda: any("finished" in m.text for m in notices(second)),
                         what="the end")
        await gw.router.settle()
        matched = [m.text for m in notices(second) if "output matched" in m.text]
        assert len(matched) == 1 and "ERROR new" in matched[0] and "ERROR old" not in matched[0]
