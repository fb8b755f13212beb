"""The process registry: background jobs, their watches, and their notices.

A job is registered with its return address in one transaction before its
process exists, so no crash can leave a job running that nobody can report.
Its process is a single wrapper (``job_process``) whose end is awaited through
a pidfd — no thread, no polling — and a watched job's output is read from its
log as it grows (``job_watching``), the same way for a job this daemon
started and one it re-attached after a restart. The completion is committed
in the transaction that records the end, after the job's last watch notice.
"""

from __future__ import annotations

import asyncio
import builtins
import functools
import os
import shutil
import sqlite3
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import structlog

import tools.job_process as job_process
from gateway.cluster.lives import ALONE, Acting, Life, still_acting, still_live_here
from gateway.config.settings import Config
from gateway.delivery.notifications import NewNotification
from gateway.delivery.outbox import Outbox
from gateway.errors import RefusedInput
from gateway.inbound.journal import acted_ops, current_entry
from gateway.machine.off_loop import OffLoop
from gateway.machine.private_files import private_dir
from gateway.machine.processes import ORIGINAL_OPEN_FILES, process_start_time
from gateway.retry import RetryPolicy
from gateway.store.group_commit import Op
from gateway.store.state import StateDatabase
from gateway.tracing import tracing
from gateway.words.return_address import ReturnAddress
from gateway.words.route import Route
from tools.job_kill import kill_group, kill_wait_seconds
from tools.job_notices import EndDetails, completion_text, job_outcome
from tools.job_output import OutputWatcher
from tools.job_process import JobFiles
from tools.job_record import JOB_COLUMNS, JobRecord, JobState
from tools.job_watching import WatchReporter
from tools.plain_text import plain_lines
from tools.watch import GlobalBreaker, JobWatch, Pattern, WatchLimits, compile_patterns

log = structlog.get_logger(__name__)

#: recording a job's end (past these tries the next start's recovery reports it)
END_RECORD = RetryPolicy.exponential(0.5, 5)


def completion_key(job_id: str) -> str:
    """The idempotency key of a job's completion notice (there is one per job)."""
    return f"{job_id}:completion:0"


@dataclass(frozen=True, slots=True)
class EndNote:
    """What a job's originator adds to its end: lines around the completion notice,
    and writes that commit with it."""

    header: str | None = None
    footer: str | None = None
    ops: Sequence[Op] = ()


class JobObserver(Protocol):
    """Told of the end of every job (the scheduler, for its runs)."""

    async def job_ending(self, record: JobRecord, notified: bool) -> EndNote | None:
        """Before the end is committed (with a completion notice when ``notified``):
        anything to add to it."""

    def job_ended(self, record: JobRecord) -> None:
        """After the end is committed."""


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
    #: set with ``ended`` when the daemon let go of the job before its end
    detached: bool = False


class JobError(RefusedInput):
    """A job request that cannot be carried out; the message says why."""


class JobManager:
    def __init__(self, db: StateDatabase, outbox: Outbox, config: Config, *,
                 life: Life = ALONE) -> None:
        self.db = db
        self.outbox = outbox
        self.settings = config.jobs
        self.notify_mode = config.notifications.background
        # absolute: the wrapper writes there from the job's own working directory
        self.jobs_dir = (config.home_path / "jobs").resolve()
        w = config.jobs.watch
        self.limits = WatchLimits(w.cooldown_seconds, w.max_notices, w.max_lines,
                                  w.global_max_per_minute)
        self.breaker = GlobalBreaker(w.global_max_per_minute)
        self.output = OutputWatcher()
        self.watching = WatchReporter(outbox, self.output, self.limits)
        #: told of every job's end (set before :meth:`recover`, so re-attached jobs are too)
        self.observer: JobObserver | None = None
        #: on a shared store, this instance's name: its jobs run on this host, and only
        #: its own are re-attached here (gateway/daemon/takeover.py reports a dead one's)
        self.instance: str | None = life.instance
        #: on a shared store, this life's name (gateway/cluster/lives.py), checked as jobs register
        self.owner: str | None = life.name
        self.acting: Acting = life.acting  # (gateway/cluster/lives.py)
        self._live: dict[str, _Live] = {}
        #: the reads a job's end makes of /proc and its files, a burst's in one hop
        self._off_loop = OffLoop()

    # starting --------------------------------------------------------------

    async def start(self, command: str, address: ReturnAddress, *,
                    notify_on_complete: bool = True, watch_patterns: list[str] | None = None,
                    cwd: Path | None = None, origin: dict[str, Any] | None = None,
                    in_registration: Callable[[sqlite3.Connection, str], None] | None = None
                    ) -> JobRecord:
        """Start ``command`` in the background, reporting to ``address``.

        ``in_registration(conn, job_id)`` runs in the transaction that registers the job
        (a schedule marks its run started there); when it raises, nothing is registered
        or started and the exception comes back to the caller.
        """
        try:
            job_process.check_command(command)
            patterns = list(watch_patterns or [])
            compiled = compile_patterns(patterns)
        except ValueError as exc:
            raise JobError(str(exc)) from None
        workdir = (cwd or Path.cwd()).resolve()
        if not workdir.is_dir():
            raise JobError(f"the working directory {workdir} does not exist")
        await still_acting(self.acting)  # (LifeOver: a survivor's turn starts it)
        job_id = "j" + uuid.uuid4().hex[:10]
        files = JobFiles(self.jobs_dir / job_id)
        private_dir(files.folder)
        with tracing.span("job.start", job_id=job_id, session_key=address.session_key,
                          platform=address.route.platform, thread_id=address.route.thread_id,
                          command=tracing.text(command)) as span:
            trace_parent = span.traceparent  # its end and notices join this trace
        entry_id = current_entry()
        if entry_id is not None:  # what `homing trace` starts the story with
            origin = {**(origin or {}), "inbound_id": entry_id}
        record = JobRecord(
            id=job_id, command=command, cwd=str(workdir), state="running", pid=None,
            proc_start=None, started_at=time.time(), ended_at=None, exit_code=None,
            killed=False, watch_patterns=patterns,
            # a watched job always ends with its completion, after its last watch notice
            notify_on_complete=notify_on_complete or bool(patterns),
            watch_notices=0, watch_disabled=False, session_key=address.session_key,
            session_id=address.session_id, address=address, log_path=files.log,
            exit_path=files.exit_code, origin=origin, trace_parent=trace_parent)
        try:
            await self._register(record, in_registration)
        except asyncio.CancelledError:
            # the row may have committed: it must not show a job that never ran as running
            self.db.write_behind([_failed_op(job_id)])
            raise
        except Exception:  # not registered (rolled back): its folder is nobody's
            await asyncio.to_thread(shutil.rmtree, files.folder, ignore_errors=True)
            raise
        try:
            pid = self._spawn(record, workdir)
        except OSError as exc:
            await self.db.write([_failed_op(job_id)])
            raise JobError(f"could not start the job: {exc}") from None
        record.pid, record.proc_start = pid, process_start_time(pid)
        await self._record_pid(record)
        live = self._track(record, compiled)
        live.task = asyncio.create_task(self._follow(live, self._await_end(live, pid)),
                                        name=f"job:{job_id}")
        log.debug("job_started", job_id=job_id, pid=pid, session_key=record.session_key,
                 command=command)
        return record

    async def _register(self, record: JobRecord,
                        also: Callable[[sqlite3.Connection, str], None] | None = None) -> None:
        """The job's row, committed before anything runs; on a shared store only while
        this life is live by the store's count, in the same transaction: a write that
        waited out a stall must not start what a survivor's turn starts too."""
        acted = acted_ops()  # the message that asked must not start it again after a crash
        owner = self.owner

        def register(conn: sqlite3.Connection) -> None:
            still_live_here(conn, owner, "the job was registered")
            conn.execute(*record.insert_op(self.instance))
            for op in acted:
                conn.execute(*op)
            if also is not None:
                also(conn, record.id)

        await self.db.write(register)

    def _spawn(self, record: JobRecord, workdir: Path) -> int:
        env = {**os.environ, "HOMING_JOB_ID": record.id}
        return job_process.spawn(record.command, record.files, cwd=workdir, env=env,
                                 open_files=ORIGINAL_OPEN_FILES)

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
        """Report the job's output and its end. Whatever fails on the way, the end is
        still reported (from the job's own files at worst)."""
        ended = asyncio.ensure_future(end)
        try:
            if live.watch is not None:
                try:
                    await self.watching.follow(live.record, live.watch, ended)
                except Exception:
                    log.exception("job_output_not_followed", job_id=live.record.id)
            try:
                outcome = await ended
            except Exception:
                log.exception("job_end_not_observed", job_id=live.record.id)
                outcome = await self._end_from_files(live.record)
        except asyncio.CancelledError:
            ended.cancel()
            raise
        await self._complete(live, outcome)

    async def _await_end(self, live: _Live, pid: int | None = None,
                         start: str | None = None, *, child: bool = True) -> _End:
        """The wrapper's end: its wait status when it is this daemon's ``child``, else
        the exit code it recorded (read off the loop)."""
        record = live.record
        code = None
        if pid is None:  # alive by its lock alone, so far
            learned = await job_process.learn_pid(record.files)
            if learned is not None:
                pid, start = record.pid, record.proc_start = learned
                await self._record_pid(record)
                if record.killed and live.kill is None:  # a kill cut short by a restart
                    live.kill = asyncio.create_task(self._kill(live))
        if pid is not None:
            code = await job_process.wait_for_exit(pid, start, child=child)
        if code is not None:
            return _End(code, "exited", time.time())
        return await self._end_from_files(record)

    async def _end_from_files(self, record: JobRecord) -> _End:
        code = await asyncio.to_thread(job_process.read_exit_code, record.exit_path)
        return _End(code, _end_state(code, record, spawned=True), time.time())

    async def _complete(self, live: _Live, end: _End) -> None:
        record = live.record
        escalated = False
        try:
            if live.kill is not None:  # reported only once nothing of the job is left
                try:
                    escalated = await live.kill
                except Exception:
                    log.exception("job_kill_failed", job_id=record.id)
            record.state, record.exit_code = end.state, end.exit_code
            record.ended_at = max(end.ended_at, record.started_at)
            tracing.event("job.end", parent=record.trace_parent, job_id=record.id,
                          state=record.state, exit_code=record.exit_code,
                          killed=record.killed)
            notify = self._should_notify_completion(record)
            # what is left of its process group, and its output's last lines: one hop
            count_left = live.kill is None and end.observed and bool(record.pid)
            left, (tail, cut) = await self._off_loop.run(functools.partial(
                _end_reads, record.pid if count_left else None,
                record.log_path if notify else None, self.settings.tail_lines))
            if count_left:
                record.left_running = left
            notices: list[NewNotification] = []
            dropped = 0
            if live.watch is not None:
                final = self.watching.final_notice(record, live.watch)
                notices += [final] if final is not None else []
                dropped = live.watch.dropped
            details = EndDetails(escalated, self.settings.kill_grace_seconds, dropped,
                                 self.limits.global_max_per_minute)
            note = await self.ending_note(record, notify)
            if notify:
                notices.append(NewNotification(
                    idempotency_key=completion_key(record.id), kind="completion",
                    address=record.address, job_id=record.id, outcome=job_outcome(record),
                    file_path=(record.origin or {}).get("artifact"),
                    trace_parent=record.trace_parent,
                    text=completion_text(record, tail, details, cut=cut, header=note.header,
                                         footer=note.footer)))
            ops: list[Op] = [(
                "UPDATE jobs SET state = ?, exit_code = ?, ended_at = ?, left_running = ? "
                f"WHERE id = ? AND state = '{JobState.RUNNING}'",
                (record.state, record.exit_code, record.ended_at, record.left_running,
                 record.id)), *note.ops]
            await self._commit_end(record, notices, ops)
        finally:
            live.ended.set()
            self._live.pop(record.id, None)
        if self.observer is not None:
            self.observer.job_ended(record)
        log.debug("job_ended", job_id=record.id, exit_code=record.exit_code, state=record.state,
                 left_running=record.left_running, session_key=record.session_key)

    async def _commit_end(self, record: JobRecord, notices: list[NewNotification],
                          ops: list[Op]) -> None:
        for attempt in END_RECORD.tries():  # the job is over; its end must still be told
            try:
                await self.outbox.produce(notices, with_ops=ops)
                return
            except Exception:
                log.exception("job_end_not_recorded", job_id=record.id, attempt=attempt)
                if not END_RECORD.is_last(attempt):
                    await END_RECORD.pause(attempt)

    async def ending_note(self, record: JobRecord, notified: bool) -> EndNote:
        if self.observer is None:
            return EndNote()
        try:
            return await self.observer.job_ending(record, notified) or EndNote()
        except Exception:  # the end is still told, without the extras
            log.exception("job_end_note_failed", job_id=record.id)
            return EndNote()

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
        one whose wrapper never got to run did not start. A kill that a restart
        cut short is finished.
        """
        rows = await self.db.fetchall(
            f"SELECT {JOB_COLUMNS} FROM jobs WHERE state = '{JobState.RUNNING}' "
            "AND (instance IS NULL OR instance = ?) ORDER BY started_at", (self.instance,))
        for row in rows:
            record = JobRecord.from_row(row)
            if record.id in self._live:
                continue
            try:
                compiled = compile_patterns(record.watch_patterns)
            except ValueError:
                log.warning("watch_pattern_no_longer_valid", job_id=record.id)
                compiled = []
            if record.watch_notices and not record.watch_offset:
                # a job of a version that kept no offset: read on from the log's end
                record.watch_offset = job_process.file_size(record.log_path)
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
                    if record.killed:  # a kill cut short by a restart
                        live.kill = asyncio.create_task(self._kill(live))
                end: Awaitable[_End] = self._await_end(live, *found, child=False)
                log.info("job_reattached", job_id=record.id, pid=record.pid)
            else:
                state = _end_state(code, record, spawned=job_process.was_spawned(files))
                ended = job_process.ended_at(files.exit_code)
                end = _already(_End(code, state, ended, observed=False))
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
        limit = kill_wait_seconds(self.settings.kill_grace_seconds)
        try:
            async with asyncio.timeout(limit):
                await self._ended(live)
        except TimeoutError:
            raise JobError(f"job {job_id} was signalled but has not ended yet; its processes "
                           f"may be stuck in the kernel") from None
        return live.record

    async def _kill(self, live: _Live) -> bool:
        record = live.record
        assert record.pid is not None
        if not record.killed:
            record.killed = True
            await self.db.write([("UPDATE jobs SET killed = 1 WHERE id = ?", (record.id,))])
        escalated = await kill_group(record.pid, self.settings.kill_grace_seconds)
        log.info("job_killed", job_id=record.id, signal="SIGKILL" if escalated else "SIGTERM")
        return escalated

    async def wait(self, job_id: str) -> None:
        live = self._live.get(job_id)
        if live is not None:
            await self._ended(live)

    async def _ended(self, live: _Live) -> None:
        await live.ended.wait()
        if live.detached:
            raise JobError(f"the gateway is stopping; job {live.record.id} goes on, and is "
                           f"followed again after the restart")

    async def take_notices(self, job_id: str) -> list[str]:
        """Hand a job's notices not delivered yet — its completion, and watch notices
        still waiting — to whoever reads them now (the model's ``process wait``):
        marked delivered in the same transaction, so they do not come again."""
        return await self.outbox.consume(job_id)

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
            f"ORDER BY (state = '{JobState.RUNNING}') DESC, started_at DESC LIMIT ?",
            (*params, limit))
        return [self._live[r[0]].record if r[0] in self._live else JobRecord.from_row(r)
                for r in rows]

    def output_tail(self, record: JobRecord, lines: int) -> builtins.list[str]:
        """The job's latest output lines, as a chat shows them."""
        return plain_lines(job_process.tail_file(record.log_path, lines))

    @property
    def running(self) -> int:
        return len(self._live)

    def here(self, job_id: str) -> bool:  # followed by this process: on this host
        return job_id in self._live

    def running_routes(self) -> builtins.list[Route]:
        """Where the running jobs were started (and will report)."""
        return [lv.record.address.route for lv in self._live.values()]

    def running_in(self, session_key: str) -> builtins.list[JobRecord]:
        return [lv.record for lv in self._live.values() if lv.record.session_key == session_key]

    async def detach(self) -> None:
        """Stop following jobs without stopping them: they outlive the daemon (a kill
        under way is finished by the next start). Whoever waits on one is told."""
        lives = list(self._live.values())
        tasks = [t for lv in lives for t in (lv.task, lv.kill) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for live in lives:
            live.detached = True
            live.ended.set()
        self.output.close()
        self.watching.close()
        self._live.clear()


def _end_reads(pgid: int | None, log_path: Path | None, lines: int
               ) -> tuple[int, tuple[list[str], bool]]:
    """Off the loop, at a job's end: how many of its processes are left (when ``pgid``)
    and its output's last ``lines`` (when ``log_path``)."""
    left = job_process.group_members(pgid) if pgid is not None else 0
    return left, (job_process.tail_of(log_path, lines) if log_path is not None
                  else ([], False))


def _end_state(code: int | None, record: JobRecord, *, spawned: bool) -> str:
    """How a job whose wrapper is gone ended: with its code; killed by us; proven gone
    without a record (lost); or never started."""
    if code is not None or record.killed:
        return "exited"
    return "lost" if spawned else "failed"


def _failed_op(job_id: str) -> Op:
    return (f"UPDATE jobs SET state = '{JobState.FAILED}', ended_at = ? "
            f"WHERE id = ? AND state = '{JobState.RUNNING}'",
            (time.time(), job_id))


async def _already(end: _End) -> _End:
    return end

