"""A dead instance's running jobs, reported lost by a survivor (a shared store only).

A job runs on the host of the instance that started it: only that instance can follow
it, re-attaching it after a restart. When the instance's lease has run out — it
crashed, or its host went away — a survivor tells each of its running jobs' owners once
that the job's end cannot be known. The instance may come back first: its start takes
a new, live epoch, and then the survivor finds the instance alive and does nothing, so
a job is either re-attached or reported lost, never both: the survivor decides with the
instance's row locked (gateway/cluster/rows.py), which the new life's start changes. The
jobs to report are read under that lock too, so a job its life registered while it still
counted live has committed by then and is not missed (its registration holds the row
shared: gateway/cluster/lives.py).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import structlog

from gateway.cluster.rows import lock_instance, lock_instances
from gateway.delivery.notifications import NewNotification
from gateway.delivery.outbox import Outbox
from gateway.tracing import tracing
from tools.job_notices import EndDetails, completion_text
from tools.job_record import JOB_COLUMNS, JobRecord, JobState

if TYPE_CHECKING:
    from gateway.cluster.rows import Conn
    from tools.jobs import JobManager

log = structlog.get_logger(__name__)

#: only while the job's instance is still dead (decided under its row's lock)
_MARK_LOST = (f"UPDATE jobs SET state = '{JobState.LOST}', ended_at = ? "
              f"WHERE id = ? AND state = '{JobState.RUNNING}' AND instance = ?")


def _dead(conn: Conn, instances: list[str]) -> list[str]:
    """Of ``instances``, those whose lease ran out without a clean stop, decided with
    their rows locked alone until the transaction ends (a new life waits to start)."""
    records, now = lock_instances(conn, instances, exclusive=True)
    return [name for name, record in records.items() if record.state(now) == "expired"]


async def report_lost(jobs: JobManager, instances: list[str]) -> int:
    """Report the running jobs of the dead ``instances`` lost; how many were."""
    if not instances:
        return 0

    def running(conn: Conn) -> list[Any]:
        dead = _dead(conn, instances)
        if not dead:
            return []
        return conn.execute(
            f"SELECT {JOB_COLUMNS}, instance FROM jobs WHERE state = '{JobState.RUNNING}' "
            f"AND instance IN ({','.join('?' * len(dead))}) ORDER BY started_at",
            dead).fetchall()

    rows = await jobs.db.write(running)
    lost = 0
    for *row, instance in rows:
        record = JobRecord.from_row(row)
        record.state, record.ended_at = "lost", max(time.time(), record.started_at)
        if await _report(jobs, record, instance):
            lost += 1
            tracing.event("job.end", parent=record.trace_parent, job_id=record.id,
                          state=record.state, lost_with=instance)
            log.warning("job_lost_with_its_instance", job_id=record.id, instance=instance,
                        session_key=record.session_key)
            if jobs.observer is not None:
                jobs.observer.job_ended(record)
    return lost


async def _report(jobs: JobManager, record: JobRecord, instance: str) -> bool:
    from tools.jobs import completion_key

    notify = record.notify_on_complete and jobs.notify_mode != "off"
    note = await jobs.ending_note(record, notify)
    text = completion_text(record, [], EndDetails(instance_lost=instance),
                           header=note.header, footer=note.footer)
    notice = NewNotification(
        idempotency_key=completion_key(record.id), kind="completion",
        address=record.address, job_id=record.id, outcome="failed", text=text,
        trace_parent=record.trace_parent)

    def commit(conn: Conn) -> bool:
        found, now = lock_instance(conn, instance, exclusive=True)
        if found is None or found.state(now) != "expired" or conn.execute(
                _MARK_LOST, (now, record.id, instance)).rowcount != 1:
            return False  # its instance came back (and re-attached it), or it ended
        for op in note.ops:
            conn.execute(*op)
        if notify:
            conn.execute(*Outbox.insert_op(notice))
        return True

    return bool(await jobs.db.write(commit))
