"""The process registry: background jobs, their watches, and their notices.

A job is registered together with its return address in one transaction,
so no crash can leave a job without a way home. Its end is awaited, not
polled: the completion notice is produced the moment the process exits,
committed to the outbox in the same transaction that records the exit.
"""

from __future__ import annotations

import asyncio
import json
import signal
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from gateway.config import Config
from gateway.database import Database, Op
from gateway.notifications import NewNotification, ReturnAddress
from gateway.outbox import Outbox
from gateway.processes import is_same_process, process_start_time
from gateway.route import Route

from . import job_process
from .job_notices import completion_text, watch_text
from .watch import GlobalBreaker, JobWatch, WatchLimits, WatchNotice, compile_patterns

log = structlog.get_logger(__name__)

TAIL_KEEP = 200
JOB_COLUMNS = (
    "id, command, cwd, state, pid, proc_start, started_at, ended_at, exit_code, killed, "
    "notify_on_complete, watch_patterns, watch_notices, watch_disabled, session_key, "
    "session_id, return_address, log_path, exit_path"
)


@dataclass(slots=True)
class JobRecord:
    id: str
    command: str
    cwd: str
    state: str  # running, exited, lost
    pid: int | None
    proc_start: str | None
    started_at: float
    ended_at: float | None
    exit_code: int | None
    killed: bool
    notify_on_complete: bool
    watch_patterns: list[str]
    watch_notices: int
    watch_disabled: bool
    session_key: str
    session_id: str
    address: ReturnAddress
    log_path: Path
    exit_path: Path

    @classmethod
    def from_row(cls, row: Any) -> JobRecord:
        (jid, command, cwd, state, pid, proc_start, started, ended, code, killed, notify,
         patterns, notices, disabled, key, sid, address, log_path, exit_path) = row
        return cls(jid, command, cwd, state, pid, proc_start, started, ended, code, bool(killed),
                   bool(notify), json.loads(patterns), notices, bool(disabled), key, sid,
                   ReturnAddress.from_json(address), Path(log_path), Path(exit_path))

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id, "command": self.command, "cwd": self.cwd, "state": self.state,
            "pid": self.pid, "started_at": self.started_at, "ended_at": self.ended_at,
            "exit_code": self.exit_code, "killed": self.killed,
            "notify_on_complete": self.notify_on_complete,
            "watch_patterns": self.watch_patterns, "watch_disabled": self.watch_disabled,
            "session_key": self.session_key, "session_id": self.session_id,
            "thread_id": self.address.route.thread_id, "log_path": str(self.log_path),
        }


@dataclass(slots=True)
class _Live:
    record: JobRecord
    watch: JobWatch | None
    tail: deque[str] = field(default_factory=lambda: deque(maxlen=TAIL_KEEP))
    task: asyncio.Task[None] | None = None
    proc: asyncio.subprocess.Process | None = None
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
        self._live: dict[str, _Live] = {}

    # starting --------------------------------------------------------------

    async def start(self, command: str, address: ReturnAddress, *,
                    notify_on_complete: bool = True, watch_patterns: list[str] | None = None,
                    cwd: Path | None = None) -> JobRecord:
        """Start ``command`` in the background, reporting to ``address``."""
        if not command.strip():
            raise JobError("no command given")
        patterns = list(watch_patterns or [])
        try:
            compiled = compile_patterns(patterns)
        except ValueError as exc:
            raise JobError(str(exc)) from None
        job_id = "j" + uuid.uuid4().hex[:10]
        folder = self.jobs_dir / job_id
        folder.mkdir(parents=True)
        workdir = (cwd or Path.cwd()).resolve()
        record = JobRecord(
            id=job_id, command=command, cwd=str(workdir), state="running", pid=None,
            proc_start=None, started_at=time.time(), ended_at=None, exit_code=None,
            killed=False, watch_patterns=patterns,
            notify_on_complete=self._completion_wanted(notify_on_complete, patterns),
            watch_notices=0, watch_disabled=False, session_key=address.session_key,
            session_id=address.session_id, address=address,
            log_path=folder / "output.log", exit_path=folder / "exit_code")
        # registered (with its return address) before it runs: no crash can
        # leave a job running that nobody knows how to report
        await self.db.write([_insert_op(record)])
        try:
            proc = await job_process.spawn(command, cwd=workdir, log_path=record.log_path,
                                           exit_path=record.exit_path)
        except OSError as exc:
            await self.db.write([("UPDATE jobs SET state = 'lost', ended_at = ? WHERE id = ?",
                                  (time.time(), job_id))])
            raise JobError(f"could not start the job: {exc}") from None
        record.pid = proc.pid
        record.proc_start = process_start_time(proc.pid)
        await self.db.write([("UPDATE jobs SET pid = ?, proc_start = ? WHERE id = ?",
                              (record.pid, record.proc_start, job_id))])
        live = self._track(record, compiled)
        live.proc = proc
        live.task = asyncio.create_task(self._follow_child(live, proc), name=f"job:{job_id}")
        log.info("job_started", job_id=job_id, pid=proc.pid, session_key=record.session_key,
                 command=command)
        return record

    def _track(self, record: JobRecord, compiled: list[Any]) -> _Live:
        watch = None
        if compiled and not record.watch_disabled:
            watch = JobWatch(compiled, self.limits, self.breaker, notices=record.watch_notices)
        live = _Live(record, watch)
        self._live[record.id] = live
        return live

    def _completion_wanted(self, notify_on_complete: bool, patterns: list[str]) -> bool:
        """Watch notices are sent only in ``all`` mode; elsewhere a watch job
        reports its completion instead, or it would never be heard from."""
        return notify_on_complete or (bool(patterns) and self.notify_mode != "all")

    # following -------------------------------------------------------------

    async def _follow_child(self, live: _Live, proc: asyncio.subprocess.Process) -> None:
        assert proc.stdout is not None
        try:
            await job_process.read_lines(proc.stdout, lambda line: self._on_line(live, line))
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("job_output_failed", job_id=live.record.id)
        returncode = await proc.wait()
        code = job_process.read_exit_code(live.record.exit_path)
        await self._complete(live, code if code is not None else returncode,
                             list(live.tail))

    async def _follow_detached(self, live: _Live) -> None:
        """Watch a job that outlived the daemon that started it."""
        record = live.record
        offset = record.log_path.stat().st_size if record.log_path.exists() else 0
        exited = asyncio.ensure_future(job_process.wait_for_exit(record.pid or 0))
        await job_process.follow_file(record.log_path, offset,
                                      lambda line: self._on_line(live, line), exited)
        code = job_process.read_exit_code(record.exit_path)
        tail = job_process.tail_file(record.log_path, self.settings.tail_lines)
        # no exit code: killed (by /kill, whose notice says so, or from outside)
        await self._complete(live, code, tail,
                             state="exited" if code is not None or record.killed else "lost")

    async def _on_line(self, live: _Live, line: str) -> None:
        live.tail.append(line)
        if live.watch is None:
            return
        notice = live.watch.feed(line)
        if notice is None:
            return
        try:
            await self._watch_notice(live, notice)
        except Exception:
            # keep reading: a job whose output nobody reads blocks once the pipe fills
            log.exception("watch_notice_failed", job_id=live.record.id)

    async def _watch_notice(self, live: _Live, notice: WatchNotice) -> None:
        record = live.record
        record.watch_notices += notice.kind == "watch_match"
        ops: list[Op] = [("UPDATE jobs SET watch_notices = ? WHERE id = ?",
                          (record.watch_notices, record.id))]
        if notice.kind == "watch_disabled":
            record.watch_disabled = record.notify_on_complete = True
            ops.append(("UPDATE jobs SET watch_disabled = 1, notify_on_complete = 1 "
                        "WHERE id = ?", (record.id,)))
        sequence = record.watch_notices if notice.kind == "watch_match" else 0
        new = self._watch_new_notification(record, notice, sequence)
        await self.outbox.produce([new] if self.notify_mode == "all" else [], with_ops=ops)

    def _watch_new_notification(self, record: JobRecord, notice: WatchNotice,
                                sequence: int | str) -> NewNotification:
        return NewNotification(
            idempotency_key=f"{record.id}:{notice.kind}:{sequence}", kind=notice.kind,
            address=record.address, job_id=record.id,
            text=watch_text(record, notice, self.limits))

    async def _complete(self, live: _Live, exit_code: int | None, tail: list[str],
                        state: str = "exited") -> None:
        record = live.record
        record.state, record.exit_code = state, exit_code
        record.ended_at = _ended_at(record.exit_path)
        ops: list[Op] = [(
            "UPDATE jobs SET state = ?, exit_code = ?, ended_at = ? WHERE id = ? "
            "AND state = 'running'", (state, exit_code, record.ended_at, record.id))]
        notices = []
        held = live.watch.held() if live.watch is not None else None
        if held is not None and self.notify_mode == "all":
            # matches the cooldown held back are reported, not dropped with the job
            notices.append(self._watch_new_notification(record, held, "final"))
        if self._should_notify_completion(record):
            notices.append(NewNotification(
                idempotency_key=f"{record.id}:completion:0", kind="completion",
                address=record.address, job_id=record.id,
                text=completion_text(record, tail[-self.settings.tail_lines:])))
        try:
            for attempt in range(5):  # the job is over; its end must still be told
                try:
                    await self.outbox.produce(notices, with_ops=ops)
                    break
                except Exception:
                    log.exception("job_end_not_recorded", job_id=record.id, attempt=attempt)
                    await asyncio.sleep(0.5 * 2 ** attempt)
        finally:
            live.ended.set()
            self._live.pop(record.id, None)
        log.info("job_ended", job_id=record.id, exit_code=exit_code, state=state,
                 session_key=record.session_key)

    def _should_notify_completion(self, record: JobRecord) -> bool:
        if not record.notify_on_complete or self.notify_mode == "off":
            return False
        return self.notify_mode != "error" or record.exit_code != 0

    # recovery ----------------------------------------------------------------

    async def recover(self) -> int:
        """Re-attach jobs recorded as running; return how many were found.

        Alive: followed to the end. Ended while the daemon was down: their
        completion is produced now, from the job's own exit-code file and log.
        Gone without a record: reported as lost. The idempotency key makes
        sure a notice is never produced twice.
        """
        rows = await self.db.fetchall(
            f"SELECT {JOB_COLUMNS} FROM jobs WHERE state = 'running' ORDER BY started_at")
        for row in rows:
            record = JobRecord.from_row(row)
            if record.id in self._live:
                continue
            live = self._track(record, compile_patterns(record.watch_patterns))
            # alive first, then the exit file: a job ending between the two
            # checks is then found by the second, not reported lost
            alive = bool(record.pid) and is_same_process(record.pid or 0, record.proc_start)
            code = job_process.read_exit_code(record.exit_path)
            if code is None and alive:
                live.task = asyncio.create_task(self._follow_detached(live),
                                                name=f"job:{record.id}")
                log.info("job_reattached", job_id=record.id, pid=record.pid)
                continue
            tail = job_process.tail_file(record.log_path, self.settings.tail_lines)
            await self._complete(live, code, tail, state="exited" if code is not None else "lost")
        return len(rows)

    # control and queries -----------------------------------------------------

    async def kill(self, job_id: str) -> JobRecord:
        live = self._live.get(job_id)
        if live is None or live.record.pid is None:
            raise JobError(f"job {job_id} is not running")
        record = live.record
        record.killed = True
        await self.db.write([("UPDATE jobs SET killed = 1 WHERE id = ?", (job_id,))])
        job_process.signal_group(record.pid, signal.SIGTERM)
        try:
            async with asyncio.timeout(self.settings.kill_grace_seconds):
                await live.ended.wait()
        except TimeoutError:
            job_process.signal_group(record.pid, signal.SIGKILL)
        log.info("job_killed", job_id=job_id)
        return record

    async def wait(self, job_id: str) -> None:
        live = self._live.get(job_id)
        if live is not None:
            await live.ended.wait()

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
        live = self._live.get(record.id)
        if live is not None and live.tail:
            return list(live.tail)[-lines:]
        return job_process.tail_file(record.log_path, lines)

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
        tasks = [lv.task for lv in self._live.values() if lv.task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for live in self._live.values():
            if live.proc is not None:
                # let go of the output pipe, or the job would block once it fills
                transport = live.proc._transport  # type: ignore[attr-defined]
                pipe = transport.get_pipe_transport(1)
                if pipe is not None:
                    pipe.close()
        self._live.clear()


def _ended_at(exit_path: Path) -> float:
    """When the job ended: its exit file's time (it may have ended while we were down)."""
    try:
        return exit_path.stat().st_mtime
    except OSError:
        return time.time()


def _insert_op(r: JobRecord) -> Op:
    return (
        f"INSERT INTO jobs ({JOB_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
        (r.id, r.command, r.cwd, r.state, r.pid, r.proc_start, r.started_at, r.ended_at,
         r.exit_code, int(r.killed), int(r.notify_on_complete), json.dumps(r.watch_patterns),
         r.watch_notices, int(r.watch_disabled), r.session_key, r.session_id,
         r.address.to_json(), str(r.log_path), str(r.exit_path)),
    )
