"""A schedule's runs, in the ``schedule_runs`` table: one row per (schedule, scheduled
time), claimed → started → finished (or cancelled, or skipped).

The scheduler writes these inside its own transactions; each helper is one
condition or one change, so the rule each encodes lives in one place.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

from gateway.errors import HomingError
from gateway.store.group_commit import Op
from tools.job_record import JobState
from tools.schedules import RunState, ScheduleRecord


@dataclass(frozen=True, slots=True)
class Claim:
    scheduled_for: float
    reason: str  # due, missed, manual


class RunTaken(HomingError):
    """The claimed run was started, cancelled or removed meanwhile."""


#: run ``o`` is under way: started, with its job still running or its prompt not yet
#: given (a job whose end was committed without its run's cannot hold the schedule up)
UNDER_WAY = (f"(o.state = '{RunState.STARTED}' AND (o.job_id IS NULL OR EXISTS ("
             f"SELECT 1 FROM jobs j WHERE j.id = o.job_id AND j.state = '{JobState.RUNNING}')))")


def busy(conn: sqlite3.Connection, schedule_id: str) -> bool:
    """A run of the schedule is under way or waiting to start."""
    return conn.execute(
        "SELECT 1 FROM schedule_runs o WHERE o.schedule_id = ? "
        f"AND (o.state = '{RunState.CLAIMED}' OR {UNDER_WAY}) LIMIT 1",
        (schedule_id,)).fetchone() is not None


def mark_started(conn: sqlite3.Connection, schedule_id: str, scheduled_for: float,
                 job_id: str | None, now: float) -> None:
    """Claimed → started, or RunTaken: what starts a run is this one change."""
    changed = conn.execute(
        f"UPDATE schedule_runs SET state = '{RunState.STARTED}', job_id = ?, started_at = ? "
        f"WHERE schedule_id = ? AND scheduled_for = ? AND state = '{RunState.CLAIMED}'",
        (job_id, now, schedule_id, scheduled_for)).rowcount
    if changed != 1:
        raise RunTaken(f"{schedule_id} at {scheduled_for}")


def insert_run(conn: sqlite3.Connection, schedule_id: str, claim: Claim, state: str,
               now: float, *, reason: str | None = None) -> None:
    conn.execute(
        "INSERT INTO schedule_runs (schedule_id, scheduled_for, state, reason, claimed_at) "
        "VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
        (schedule_id, claim.scheduled_for, state, reason or claim.reason, now))


def finish_ops(s: ScheduleRecord, scheduled_for: float, result: str, now: float) -> list[Op]:
    ops = [finish_run_op(s.id, scheduled_for, result, now),
           last_result_op(s.id, scheduled_for, result)]
    if s.spec.kind == "at":
        ops.append(one_shot_done_op(s.id))
    return ops


def finish_run_op(schedule_id: str, scheduled_for: float, result: str, now: float) -> Op:
    return (f"UPDATE schedule_runs SET state = '{RunState.FINISHED}', finished_at = ?, result = ? "
            f"WHERE schedule_id = ? AND scheduled_for = ? AND state IN ('{RunState.CLAIMED}', "
            f"'{RunState.STARTED}')",
            (now, result, schedule_id, scheduled_for))


def last_result_op(schedule_id: str, scheduled_for: float, result: str) -> Op:
    return ("UPDATE schedules SET last_run_for = ?, last_result = ? WHERE id = ? "
            "AND (last_run_for IS NULL OR last_run_for <= ?)",
            (scheduled_for, result, schedule_id, scheduled_for))


def one_shot_done_op(schedule_id: str) -> Op:
    """A one-shot whose run is over is gone (its notice told the result): it no longer
    counts against the conversation's limit."""
    return ("DELETE FROM schedules WHERE id = ? AND kind = 'at' AND next_run_at IS NULL",
            (schedule_id,))


def prompt_key(schedule_id: str, scheduled_for: float) -> str:
    """The notice a prompt run hands the agent."""
    return f"{schedule_id}:run:{scheduled_for}"


def failed_key(schedule_id: str, scheduled_for: float) -> str:
    """The notice that tells a run could not start."""
    return f"{schedule_id}:failed:{scheduled_for}"
