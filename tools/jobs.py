"""The process registry: background jobs, their watches, and their notices.

A job is registered with its return address in one transaction before its
process exists, so no crash can leave a job running that nobody can report.
Its process is a single wrapper (``job_process``) whose end is awaited through
a pidfd — no thread, no polling — and a watched job's output is read from its
log as it grows (``job_output``), the same way for a job this daemon started
and one it re-attached after a restart. Each watch notice commits how far the
log was read, and the completion is committed in the transaction that records
the end, so a restart resumes reporting exactly where it stopped: every
matching line once, then one completion.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
import uuid
from collections.abc import Awaitable
from dataclasses import dataclass, field
from pathlib import Path

import structlog

from gateway.config import Config
from gateway.database import Database, Op
from gateway.notifications import NewNotification, ReturnAddress
from gateway.outbox import Outbox
from gateway.processes import process_start_time
from gateway.route import Route

from . import job_process
from .job_notices import EndDetails, completion_text, watch_text
from .job_output import LogReader, OutputWatcher
from .job_process import JobFiles
from .job_record import JOB_COLUMNS, JobRecord
from .plain_text import plain, plain_lines
from .watch import GlobalBreaker, JobWatch, Pattern, WatchLimits, WatchNotice, compile_patterns

log = structlog.get_logger(__name__)

_GROUP_POLL_SECONDS = 0.05
_SIGKILL_SETTLE_SECONDS = 5.0


@dataclass(frozen=True, slots=True)
class _End:
    exit_code: int | None
    state: str
    ended_at: float
    #: the daemon saw the wrapper end (not a job that ended while it was down)
    observed: bool = True


@dataclass(slots=True)
class _Live:
    record: JobRecord
    watch: JobWatch | None
    task: asyncio.Task[None] | None = None
    #: the kill under way; its result says whether SIGTERM had to become SIGKILL
    kill: asyncio.Task[bool] | None = None
    ended: asyncio.Event = field(default_factory=asyncio.Event)


class JobError(Exception):
    """A job request that cannot be carried out; the message says why."""


class JobManager:
    def __init__(self, db: Database, outbox: Outbox, config: Config) -> None:
        self.db = db
        self.outbox = outbox
        self.settings = config.jobs
        self.notify_mode = config.notifications.background
        self.jobs_dir = config.home_path / "jobs"
        w = config.jobs.watch
        self.limits = WatchLimits(w.cooldown_seconds, w.max_notices, w.max_lines,
                                  w.global_max_per_minute)
        self.breaker = GlobalBreaker(w.global_max_per_minute)
        self.output = OutputWatcher()
        self._live: dict[str, _Live] = {}

    # starting --------------------------------------------------------------

    async def start(self, command: str, address: ReturnAddress, *,
                    notify_on_complete: bool = True, watch_patterns: list[str] | None = None,
                    cwd: Path | None = None) -> JobRecord:
        """Start ``command`` in the background, reporting to ``address``."""
        try:
            job_process.check_command(command)
            patterns = list(watch_patterns or [])
            compiled = compile_patterns(patterns)
        except ValueError as exc:
            raise JobError(str(exc)) from None
        workdir = (cwd or Path.cwd()).resolve()
        if not workdir.is_dir():
            raise JobError(f"the working directory {workdir} does not exist")
        job_id = "j" + uuid.uuid4().hex[:10]
        files = JobFiles(self.jobs_dir / job_id)
        files.folder.mkdir(parents=True)
        record = JobRecord(
            id=job_id, command=command, cwd=str(workdir), state="running", pid=None,
            proc_start=None, started_at=time.time(), ended_at=None, exit_code=None,
            killed=False, watch_patterns=patterns,
            # a watched job always ends with its completion, after its last watch notice
            notify_on_complete=notify_on_complete or bool(patterns),
            watch_notices=0, watch_disabled=False, session_key=address.session_key,
            session_id=address.session_id, address=address, log_path=files.log,
            exit_path=files.exit_code)
        await self._register(record)
        try:
            pid = self._spawn(record, workdir)
        except OSError as exc:
            await self.db.write([("UPDATE jobs SET state = 'failed', ended_at = ? WHERE id = ?",
                                  (time.time(), job_id))])
            raise JobError(f"could not start the job: {exc}") from None
        record.pid, record.proc_start = pid, process_start_time(pid)
        await self._record_pid(record)
        live = self._track(record, compiled)
        live.task = asyncio.create_task(self._follow(live, self._await_end(live, pid)),
                                        name=f"job:{job_id}")
        log.info("job_started", job_id=job_id, pid=pid, session_key=record.session_key,
                 command=command)
        return record

    async def _register(self, record: JobRecord) -> None:
        """The job's row, committed before anything runs."""
        await self.db.write([record.insert_op()])

    def _spawn(self, record: JobRecord, workdir: Path) -> int:
        env = {**os.environ, "HOMING_JOB_ID": record.id}
        return job_process.spawn(record.command, record.files, cwd=workdir, env=env)

    async def _record_pid(self, record: JobRecord) -> None:
        """For ``homing jobs`` and a quicker recovery; the wrapper's own pid file
        covers a crash before this lands, so it need not hold the reply up."""
        self.db.write_behind([("UPDATE jobs SET pid = ?, proc_start = ? WHERE id = ?",
                               (record.pid, record.proc_start, record.id))])

    def _track(self, record: JobRecord, compiled: list[Pattern]) -> _Live:
        watch = None
        # watch notices are sent only in ``all`` mode; elsewhere the completion tells
        if compiled and not record.watch_disabled and self.notify_mode == "all":
            watch = JobWatch(compiled, self.limits, self.breaker, notices=record.watch_notices)
        live = _Live(record, watch)
        self._live[record.id] = live
        return live

    # following -------------------------------------------------------------

    async def _follow(self, live: _Live, end: Awaitable[_End]) -> None:
        ended = asyncio.ensure_future(end)
        try:
            if live.watch is not None:
                await self._read_watched(live, ended)
            outcome = await ended
        except asyncio.CancelledError:
            ended.cancel()
            raise
        await self._complete(live, outcome)

    async def _read_watched(self, live: _Live, ended: asyncio.Future[_End]) -> None:
        """Feed the watch each line as the log grows, until the job has ended and
        everything it wrote before that has been read."""
        record = live.record
        sub = self.output.watch(record.log_path)
        ended.add_done_callback(lambda _: sub.changed.set())
        reader = LogReader(record.log_path, record.watch_offset)
        try:
            while live.watch is not None and not live.watch.disabled:
                final = ended.done()
                sub.changed.clear()
                more = True
                while more:
                    lines, more = reader.read(final=final)
                    for text, end_offset in lines:
                        await self._on_line(live, text, end_offset)
                if final:
                    return
                await sub.changed.wait()
        finally:
            self.output.unwatch(sub)

    async def _on_line(self, live: _Live, line: str, end_offset: int) -> None:
        assert live.watch is not None
        notice = live.watch.feed(plain(line))
        if notice is None:
            return
        try:
            await self._watch_notice(live, notice, end_offset)
        except Exception:
            # keep reading; the lines after the last committed offset are read again
            # after a restart, so a notice that failed here is not lost for good
            log.exception("watch_notice_failed", job_id=live.record.id)

    async def _watch_notice(self, live: _Live, notice: WatchNotice, end_offset: int) -> None:
        record = live.record
        record.watch_notices += notice.kind == "watch_match"
        record.watch_offset = end_offset
        ops: list[Op] = [("UPDATE jobs SET watch_notices = ?, watch_offset = ? WHERE id = ?",
                          (record.watch_notices, end_offset, record.id))]
        if notice.kind == "watch_disabled":
            record.watch_disabled = True
            ops.append(("UPDATE jobs SET watch_disabled = 1 WHERE id = ?", (record.id,)))
        sequence = record.watch_notices if notice.kind == "watch_match" else 0
        await self.outbox.produce([self._watch_new_notification(record, notice, sequence)],
                                  with_ops=ops)

    def _watch_new_notification(self, record: JobRecord, notice: WatchNotice,
                                sequence: int | str) -> NewNotification:
        return NewNotification(
            idempotency_key=f"{record.id}:{notice.kind}:{sequence}", kind=notice.kind,
            address=record.address, job_id=record.id,
            text=watch_text(record, notice, self.limits))

    async def _await_end(self, live: _Live, pid: int | None = None,
                         start: str | None = None) -> _End:
        """The wrapper's end: its wait status when it is this daemon's child, else
        the exit code it recorded (read off the loop)."""
        record = live.record
        code = None
        if pid is None:  # alive by its lock alone, so far
            learned = await job_process.learn_pid(record.files)
            if learned is not None:
                pid, start = record.pid, record.proc_start = learned
                await self._record_pid(record)
        if pid is not None:
            code = await job_process.wait_for_exit(pid, start)
        ended_at = time.time()
        if code is None:
            code = await asyncio.to_thread(job_process.read_exit_code, record.exit_path)
        state = "exited" if code is not None or record.killed else "lost"
        return _End(code, state, ended_at)

    async def _complete(self, live: _Live, end: _End) -> None:
        record = live.record
        details = EndDetails(kill_grace=self.settings.kill_grace_seconds,
                             global_max_per_minute=self.limits.global_max_per_minute)
        try:
            if live.kill is not None:  # reported only once nothing of the job is left
                details = EndDetails(escalated=await live.kill,
                                     kill_grace=self.settings.kill_grace_seconds)
            elif end.observed and record.pid:
                record.left_running = job_process.group_members(record.pid)
            record.state, record.exit_code = end.state, end.exit_code
            record.ended_at = max(end.ended_at, record.started_at)
            notices = []
            if live.watch is not None:
                held = live.watch.finish()
                if held is not None:
                    notices.append(self._watch_new_notification(record, held, "final"))
                details = EndDetails(details.escalated, details.kill_grace, live.watch.dropped,
                                     self.limits.global_max_per_minute)
            if self._should_notify_completion(record):
                tail = job_process.tail_file(record.log_path, self.settings.tail_lines)
                notices.append(NewNotification(
                    idempotency_key=f"{record.id}:completion:0", kind="completion",
                    address=record.address, job_id=record.id,
                    text=completion_text(record, tail, details)))
            ops: list[Op] = [(
                "UPDATE jobs SET state = ?, exit_code = ?, ended_at = ?, left_running = ? "
                "WHERE id = ? AND state = 'running'",
                (record.state, record.exit_code, record.ended_at, record.left_running,
                 record.id))]
            await self._commit_end(record, notices, ops)
        finally:
            live.ended.set()
            self._live.pop(record.id, None)
        log.info("job_ended", job_id=record.id, exit_code=record.exit_code, state=record.state,
                 left_running=record.left_running, session_key=record.session_key)

    async def _commit_end(self, record: JobRecord, notices: list[NewNotification],
                          ops: list[Op]) -> None:
        for attempt in range(5):  # the job is over; its end must still be told
            try:
                await self.outbox.produce(notices, with_ops=ops)
                return
            except Exception:
                log.exception("job_end_not_recorded", job_id=record.id, attempt=attempt)
                await asyncio.sleep(0.5 * 2 ** attempt)
        # still running in the store: the next start's recovery reports it

    def _should_notify_completion(self, record: JobRecord) -> bool:
        if not record.notify_on_complete or self.notify_mode == "off":
            return False
        if record.state == "failed":
            return True  # the user asked for it and never heard back
        return self.notify_mode != "error" or record.exit_code != 0

    # recovery ----------------------------------------------------------------

    async def recover(self) -> int:
        """Re-attach the jobs an earlier daemon left running; return how many it had.

        A job is followed to its end while its wrapper lives (the process it
        recorded, or a held lock for one spawned a moment before that daemon
        died). One that ended while the daemon was down reports its recorded
        exit code, and any matching lines the watch had not reported yet, now.
        Only a job proven gone — no live wrapper, no exit record — is lost;
        one whose wrapper never got to run did not start.
        """
        rows = await self.db.fetchall(
            f"SELECT {JOB_COLUMNS} FROM jobs WHERE state = 'running' ORDER BY started_at")
        for row in rows:
            record = JobRecord.from_row(row)
            if record.id in self._live:
                continue
            try:
                compiled = compile_patterns(record.watch_patterns)
            except ValueError:
                log.warning("watch_pattern_no_longer_valid", job_id=record.id)
                compiled = []
            live = self._track(record, compiled)
            files = record.files
            # alive first, then the exit file: a job ending between the two checks
            # is then found by the second, not reported lost
            found = await job_process.find_wrapper(record.pid, record.proc_start, files)
            code = await asyncio.to_thread(job_process.read_exit_code, files.exit_code)
            if code is None and found is not None:
                if found[0] is not None:
                    record.pid, record.proc_start = found
                    await self._record_pid(record)
                end: Awaitable[_End] = self._await_end(live, *found)
                log.info("job_reattached", job_id=record.id, pid=record.pid)
            else:
                state = ("exited" if code is not None or record.killed
                         else "lost" if job_process.was_spawned(files) else "failed")
                end = _already(_End(code, state, _ended_at(files.exit_code), observed=False))
            live.task = asyncio.create_task(self._follow(live, end), name=f"job:{record.id}")
        return len(rows)

    # control and queries -----------------------------------------------------

    async def kill(self, job_id: str) -> JobRecord:
        """Stop a job: SIGTERM to its whole group, SIGKILL after the grace period;
        returns once nothing of the job is left and its end is recorded."""
        live = self._live.get(job_id)
        if live is None or live.record.pid is None:
            raise JobError(f"job {job_id} is not running")
        if live.kill is None:
            live.kill = asyncio.create_task(self._kill(live), name=f"kill:{job_id}")
        limit = self.settings.kill_grace_seconds + _SIGKILL_SETTLE_SECONDS + 5.0
        try:
            async with asyncio.timeout(limit):
                await live.ended.wait()
        except TimeoutError:
            raise JobError(f"job {job_id} was signalled but has not ended yet; its processes "
                           f"may be stuck in the kernel") from None
        return live.record

    async def _kill(self, live: _Live) -> bool:
        record = live.record
        assert record.pid is not None
        record.killed = True
        await self.db.write([("UPDATE jobs SET killed = 1 WHERE id = ?", (record.id,))])
        job_process.signal_group(record.pid, signal.SIGTERM)
        if await _group_empties(record.pid, self.settings.kill_grace_seconds):
            log.info("job_killed", job_id=record.id, signal="SIGTERM")
            return False
        job_process.signal_group(record.pid, signal.SIGKILL)
        gone = await _group_empties(record.pid, _SIGKILL_SETTLE_SECONDS)
        log.info("job_killed", job_id=record.id, signal="SIGKILL", group_empty=gone)
        return True

    async def wait(self, job_id: str) -> None:
        live = self._live.get(job_id)
        if live is not None:
            await live.ended.wait()

    async def consume_completion(self, job_id: str) -> str | None:
        """Hand a job's completion to whoever is reading it now (the model's
        ``process wait``): marked delivered in the same transaction, so it does
        not come again as a notice. None when it was already delivered or there
        is none."""
        return await self.outbox.consume(f"{job_id}:completion:0")

    async def get(self, job_id: str) -> JobRecord | None:
        live = self._live.get(job_id)
        if live is not None:
            return live.record
        row = await self.db.fetchone(f"SELECT {JOB_COLUMNS} FROM jobs WHERE id = ?", (job_id,))
        return JobRecord.from_row(row) if row else None

    async def list(self, session_key: str | None = None, limit: int = 100) -> list[JobRecord]:
        where, params = ("WHERE session_key = ?", [session_key]) if session_key else ("", [])
        rows = await self.db.fetchall(
            f"SELECT {JOB_COLUMNS} FROM jobs {where} "
            f"ORDER BY (state = 'running') DESC, started_at DESC LIMIT ?", (*params, limit))
        return [self._live[r[0]].record if r[0] in self._live else JobRecord.from_row(r)
                for r in rows]

    def output_tail(self, record: JobRecord, lines: int) -> list[str]:
        """The job's latest output lines, as a chat shows them."""
        return plain_lines(job_process.tail_file(record.log_path, lines))

    @property
    def running(self) -> int:
        return len(self._live)

    def running_routes(self) -> list[Route]:
        """Where the running jobs were started (and will report)."""
        return [lv.record.address.route for lv in self._live.values()]

    def running_in(self, session_key: str) -> list[JobRecord]:
        return [lv.record for lv in self._live.values() if lv.record.session_key == session_key]

    async def detach(self) -> None:
        """Stop following jobs without stopping them: they outlive the daemon."""
        tasks = [t for lv in self._live.values() for t in (lv.task, lv.kill) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self.output.close()
        self._live.clear()


async def _already(end: _End) -> _End:
    return end


async def _group_empties(pgid: int, timeout: float) -> bool:
    """Wait until no live process is left in the group; False after ``timeout``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while job_process.group_members(pgid):
        if loop.time() >= deadline:
            return False
        await asyncio.sleep(_GROUP_POLL_SECONDS)
    return True


def _ended_at(exit_path: Path) -> float:
    """When a job ended while the daemon was down: its exit file's time."""
    try:
        return exit_path.stat().st_mtime
    except OSError:
        return time.time()
