"""Schedules as the state database keeps them, and the changes anyone may make.

A schedule belongs to a conversation (its session key and stored route, with
the forum topic or thread and the message that created it), not to one
session lifetime. The scheduler, the ``/schedules`` commands, the model's
``schedule`` tool, the CLI and the REST API all change schedules through the
functions here, so pausing, resuming and removing mean the same everywhere.
"""

from __future__ import annotations

import json
import sqlite3
import time
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from gateway.delivery.notifications import NotificationState
from gateway.store.row_locks import locking
from gateway.store.state import StateDatabase
from gateway.words.route import Route
from tools.schedule_spec import ScheduleError, Spec, format_time

SCHEDULE_COLUMNS = (
    "id, session_key, route, kind, spec, timezone, anchor, command, prompt, created_at, "
    "next_run_at, paused, pause_reason, last_run_for, last_result, skipped"
)


class RunState(StrEnum):
    """A schedule's run: claimed by one instance, started (its job or prompt), then
    finished, skipped or cancelled."""

    CLAIMED = "claimed"
    STARTED = "started"
    FINISHED = "finished"
    SKIPPED = "skipped"
    CANCELLED = "cancelled"


#: the moves a run's state may make, and no others (tests/test_states.py reads every
#: UPDATE of the table against it)
RUN_MOVES: dict[RunState, frozenset[RunState]] = {
    RunState.CLAIMED: frozenset({RunState.STARTED, RunState.FINISHED, RunState.SKIPPED,
                                 RunState.CANCELLED}),
    RunState.STARTED: frozenset({RunState.FINISHED}),
    RunState.FINISHED: frozenset(),
    RunState.SKIPPED: frozenset(),
    RunState.CANCELLED: frozenset(),
}


@dataclass(slots=True)
class ScheduleRecord:
    id: str
    session_key: str
    route: Route
    spec: Spec
    command: str | None
    prompt: str | None
    created_at: float
    next_run_at: float | None
    paused: bool
    pause_reason: str | None
    last_run_for: float | None
    last_result: str | None
    skipped: int

    @classmethod
    def from_row(cls, row: Any) -> ScheduleRecord:
        (sid, key, route, kind, spec, zone, anchor, command, prompt, created, next_run,
         paused, reason, last_for, last_result, skipped) = row
        return cls(sid, key, Route.from_dict(json.loads(route)), Spec(kind, spec, zone, anchor),
                   command, prompt, created, next_run, bool(paused), reason, last_for,
                   last_result, skipped)

    @property
    def task(self) -> str:
        return f"$ {self.command}" if self.command is not None else f"prompt: {self.prompt}"

    def when(self, t: float | None) -> str:
        return format_time(t, self.spec.timezone) if t is not None else "none"

    def line(self) -> str:
        """One line of ``/schedules`` and ``homing schedules``."""
        state = f"paused ({self.pause_reason})" if self.paused and self.pause_reason else (
            "paused" if self.paused else f"next {self.when(self.next_run_at)}")
        last = (f"last {self.when(self.last_run_for)}: {self.last_result}"
                if self.last_run_for is not None else "not run yet")
        task = " ".join(self.task.split())[:80]
        return f"{self.id}  {self.spec.describe()}  {state}  {last}  {task}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id, "session_key": self.session_key, "route": self.route.to_dict(),
            "kind": self.spec.kind, "spec": self.spec.text, "timezone": self.spec.timezone,
            "description": self.spec.describe(), "command": self.command, "prompt": self.prompt,
            "created_at": self.created_at, "next_run_at": self.next_run_at,
            "paused": self.paused, "pause_reason": self.pause_reason,
            "last_run_for": self.last_run_for, "last_result": self.last_result,
        }

    def insert_params(self) -> tuple[Any, ...]:
        return (self.id, self.session_key, json.dumps(self.route.to_dict()), self.spec.kind,
                self.spec.text, self.spec.timezone, self.spec.anchor, self.command, self.prompt,
                self.created_at, self.next_run_at, int(self.paused), self.pause_reason,
                self.last_run_for, self.last_result, self.skipped)


class ScheduleNotFound(ScheduleError):
    pass


async def get(db: StateDatabase, schedule_id: str) -> ScheduleRecord | None:
    row = await db.fetchone(f"SELECT {SCHEDULE_COLUMNS} FROM schedules WHERE id = ?",
                            (schedule_id,))
    return ScheduleRecord.from_row(row) if row else None


async def list_schedules(db: StateDatabase, session_key: str | None = None) -> list[ScheduleRecord]:
    where, params = ("WHERE session_key = ?", (session_key,)) if session_key else ("", ())
    rows = await db.fetchall(
        f"SELECT {SCHEDULE_COLUMNS} FROM schedules {where} ORDER BY created_at", params)
    return [ScheduleRecord.from_row(r) for r in rows]


async def set_paused(db: StateDatabase, schedule_id: str, paused: bool, *,
                     reason: str | None = None, now: float | None = None) -> ScheduleRecord:
    """Pause, or resume. A pause also cancels runs claimed but not started (a run under
    way finishes), and keeps the reason an earlier pause gave; a resumed schedule runs
    next at its first time from now on — the times it was paused through are not
    missed runs."""
    now = time.time() if now is None else now

    def change(conn: sqlite3.Connection) -> ScheduleRecord:
        record = select_schedule(conn, schedule_id)
        if paused:
            conn.execute("UPDATE schedules SET paused = 1, "
                         "pause_reason = COALESCE(?, pause_reason) WHERE id = ?",
                         (reason, schedule_id))
            conn.execute(*cancel_claimed_op(schedule_id))
        else:
            nxt = record.next_run_at
            if nxt is not None and nxt <= now:
                nxt = record.spec.next_after(now)
            conn.execute("UPDATE schedules SET paused = 0, pause_reason = NULL, next_run_at = ? "
                         "WHERE id = ?", (nxt, schedule_id))
        return select_schedule(conn, schedule_id)

    return await db.write(change)


async def remove(db: StateDatabase, schedule_id: str) -> ScheduleRecord:
    """Delete a schedule: runs not started yet are cancelled, and a prompt run's turn
    not given yet is parked; a run under way finishes."""
    def delete(conn: sqlite3.Connection) -> ScheduleRecord:
        record = select_schedule(conn, schedule_id)
        conn.execute("DELETE FROM schedules WHERE id = ?", (schedule_id,))
        conn.execute(*cancel_claimed_op(schedule_id))
        conn.execute(f"UPDATE notifications SET state = '{NotificationState.PARKED}', "
                     "reason = 'schedule_removed' "
                     f"WHERE idempotency_key LIKE ? AND state = '{NotificationState.PENDING}'",
                     (f"{schedule_id}:run:%",))
        return record

    return await db.write(delete)


def cancel_claimed_op(schedule_id: str) -> tuple[str, tuple[str]]:
    return (f"UPDATE schedule_runs SET state = '{RunState.CANCELLED}' WHERE schedule_id = ? "
            f"AND state = '{RunState.CLAIMED}'", (schedule_id,))


def select_schedule(conn: sqlite3.Connection, schedule_id: str) -> ScheduleRecord:
    """The schedule, inside a transaction, held until it commits (a change, a firing or
    a run of it elsewhere waits, then reads what this did); ScheduleNotFound when there
    is none."""
    row = conn.execute(f"SELECT {SCHEDULE_COLUMNS} FROM schedules WHERE id = ?{locking(conn)}",
                       (schedule_id,)).fetchone()
    if row is None:
        raise ScheduleNotFound(f"no schedule {schedule_id!r}")
    return ScheduleRecord.from_row(row)


def run_header(record: ScheduleRecord, scheduled_for: float) -> str:
    """How every word about a run begins: the schedule and the run's scheduled time."""
    return (f"Schedule {record.id} ({record.spec.describe()}): the run of "
            f"{record.when(scheduled_for)}")
