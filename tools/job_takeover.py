"""A dead instance's running jobs, reported lost by a survivor (a shared store only).

A job runs on the host of the instance that started it: only that instance can follow
it, re-attaching it after a restart. When the instance's lease has run out — it
crashed, or its host went away — a survivor tells each of its running jobs' owners once
that the job's end cannot be known. The instance may come back first: its start takes
a new, live epoch, and then the survivor's conditional update finds the instance alive
and does nothing, so a job is either re-attached or reported lost, never both (both
writes go through the store's write lock).
"""

from __future__ import annotations

import sqlite3
import time
from typing import TYPE_CHECKING

import structlog

from gateway.cluster.rows import writer_now
from gateway.delivery.notifications import NewNotification
from gateway.delivery.outbox import Outbox
from tools.job_notices import EndDetails, completion_text
from tools.job_record import JOB_COLUMNS, JobRecord, JobState

if TYPE_CHECKING:
    from tools.jobs import JobManager

log = structlog.get_logger(__name__)

#: only while the job's instance is still dead (not stopped cleanly, not back)
_MARK_LOST = (
    f"UPDATE jobs SET state = '{JobState.LOST}', ended_at = ? "
    f"WHERE id = ? AND state = '{JobState.RUNNING}' AND instance = ? "
    "AND EXISTS (SELECT 1 FROM instances i WHERE i.name = jobs.instance "
    "AND i.stopped_at IS NULL AND i.lease_expires_at < ?)")


async def report_lost(jobs: JobManager, instances: list[str]) -> int:
    """Report the running jobs of the dead ``instances`` lost; how many were."""
    if not instances:
        return 0
    marks = ",".join("?" * len(instances))
    rows = await jobs.db.fetchall(
        f"SELECT {JOB_COLUMNS}, instance FROM jobs WHERE state = '{JobState.RUNNING}' "
        f"AND instance IN ({marks}) ORDER BY started_at", tuple(instances))
    lost = 0
    for *row, instance in rows:
        record = JobRecord.from_row(row)
        record.state, record.ended_at = "lost", max(time.time(), record.started_at)
        if await _report(jobs, record, instance):
            lost += 1
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
        address=record.address, job_id=record.id, outcome="failed", text=text)

    def commit(conn: sqlite3.Connection) -> bool:
        now = writer_now(conn)
        if conn.execute(_MARK_LOST, (now, record.id, instance, now)).rowcount != 1:
            return False  # its instance came back (and re-attached it), or it ended
        for op in note.ops:
            conn.execute(*op)
        if notify:
            conn.execute(*Outbox.insert_op(notice))
        return True

    return bool(await jobs.db.write(commit))
