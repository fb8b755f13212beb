"""A background job as the state database keeps it."""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from gateway.store.group_commit import Op
from gateway.words.return_address import ReturnAddress
from tools.job_process import JobFiles

JOB_COLUMNS = (
    "id, command, cwd, state, pid, proc_start, started_at, ended_at, exit_code, killed, "
    "notify_on_complete, watch_patterns, watch_notices, watch_disabled, session_key, "
    "session_id, return_address, log_path, exit_path, watch_offset, left_running, origin, "
    "trace_parent"
)

class JobState(StrEnum):
    """Running; exited (with or without a code: see ``exit_code``); lost (gone while
    the daemon was down, without an exit record); failed (never started)."""

    RUNNING = "running"
    EXITED = "exited"
    LOST = "lost"
    FAILED = "failed"


#: the moves a job's state may make, and no others (tests/test_states.py reads every
#: UPDATE of the table against it)
JOB_MOVES: dict[JobState, frozenset[JobState]] = {
    JobState.RUNNING: frozenset({JobState.EXITED, JobState.LOST, JobState.FAILED}),
    JobState.EXITED: frozenset(),
    JobState.LOST: frozenset(),
    JobState.FAILED: frozenset(),
}
STATES = tuple(JobState)


@dataclass(slots=True)
class JobRecord:
    id: str
    command: str
    cwd: str
    state: str
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
    #: how far into output.log the watch has reported (committed with each watch notice)
    watch_offset: int = 0
    #: processes the job left running when its shell ended
    left_running: int = 0
    #: what started it, when not a person: ``{"schedule_id": …, "scheduled_for": …}``;
    #: the journal entry of the message that asked for it (``inbound_id``)
    origin: dict[str, Any] | None = None
    #: the trace its work belongs to (gateway/tracing.py; None: untraced)
    trace_parent: str | None = None

    @classmethod
    def from_row(cls, row: Any) -> JobRecord:
        (jid, command, cwd, state, pid, proc_start, started, ended, code, killed, notify,
         patterns, notices, disabled, key, sid, address, log_path, exit_path, offset,
         left, origin, trace_parent) = row
        return cls(jid, command, cwd, state, pid, proc_start, started, ended, code, bool(killed),
                   bool(notify), json.loads(patterns), notices, bool(disabled), key, sid,
                   ReturnAddress.from_json(address), Path(log_path), Path(exit_path),
                   offset or 0, left or 0, json.loads(origin) if origin else None,
                   trace_parent)

    @property
    def kind(self) -> str:
        """``scheduled`` (a schedule started it), ``watch`` (it has patterns) or ``bg``."""
        if self.origin and "schedule_id" in self.origin:
            return "scheduled"
        return "watch" if self.watch_patterns else "bg"

    @property
    def files(self) -> JobFiles:
        return JobFiles(self.log_path.parent)

    @property
    def duration(self) -> float:
        """Seconds from start to end (or to now's record); never negative."""
        return max(0.0, (self.ended_at or self.started_at) - self.started_at)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id, "kind": self.kind, "command": self.command, "cwd": self.cwd,
            "state": self.state,
            "pid": self.pid, "started_at": self.started_at, "ended_at": self.ended_at,
            "exit_code": self.exit_code, "killed": self.killed,
            "notify_on_complete": self.notify_on_complete,
            "watch_patterns": self.watch_patterns, "watch_disabled": self.watch_disabled,
            "session_key": self.session_key, "session_id": self.session_id,
            "thread_id": self.address.route.thread_id, "log_path": str(self.log_path),
            "left_running": self.left_running, "origin": self.origin,
        }

    def insert_op(self, instance: str | None = None) -> Op:
        """``instance``: on a shared store, the instance whose host runs the job."""
        return (
            f"INSERT INTO jobs ({JOB_COLUMNS}, instance) "
            f"VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (self.id, self.command, self.cwd, self.state, self.pid, self.proc_start,
             self.started_at, self.ended_at, self.exit_code, int(self.killed),
             int(self.notify_on_complete), json.dumps(self.watch_patterns), self.watch_notices,
             int(self.watch_disabled), self.session_key, self.session_id,
             self.address.to_json(), str(self.log_path), str(self.exit_path),
             self.watch_offset, self.left_running,
             json.dumps(self.origin) if self.origin is not None else None,
             self.trace_parent, instance),
        )
