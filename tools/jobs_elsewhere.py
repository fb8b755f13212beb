"""On a shared store: a conversation's job that runs on another instance's host.

A job runs where it was started — its process, log and exit files are that host's —
but the conversation that started it may be served by any instance: a web tab open
on the other host, the Telegram poller after a failover. ``/kill`` there asks the
job's instance: the row gets the ``killed`` mark (the one a restart finishes a kill
from), PostgreSQL's NOTIFY wakes that instance, and it stops the job as if asked
itself; the asker waits for the job's end, which is reported as usual. The output is
on that host only, so ``/log`` says where it is rather than showing nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any

import structlog

from gateway.cluster.rows import list_instances, store_now
from gateway.store.migrations import JOBS_CHANNEL
from tools.job_kill import kill_wait_seconds
from tools.job_record import JOB_COLUMNS, JobRecord, JobState
from tools.jobs import JobError

if TYPE_CHECKING:
    from tools.jobs import JobManager

log = structlog.get_logger(__name__)

#: how often an asker looks whether the job it asked to stop has ended
LOOK_SECONDS = 0.2


class JobsElsewhere:
    """Asking side and answering side: ``where``/``kill``/``until_ended`` for a job of
    another instance, ``answer`` for this instance's jobs others asked to stop."""

    def __init__(self, jobs: JobManager) -> None:
        self.jobs = jobs
        self._stopping: set[asyncio.Task[None]] = set()

    # asking -------------------------------------------------------------------------

    async def where(self, job: JobRecord) -> str | None:
        """The instance whose host runs (or ran) ``job``, when it is not this one."""
        here = self.jobs.instance
        if here is None or self.jobs.here(job.id):
            return None
        row = await self.jobs.db.fetchone("SELECT instance FROM jobs WHERE id = ?", (job.id,))
        there = row[0] if row is not None else None
        return there if there is not None and there != here else None

    async def kill(self, job: JobRecord, there: str) -> JobRecord:
        """Ask ``there`` to stop ``job``; the job once it has ended."""
        if not await _live(self.jobs, there):
            raise JobError(f"job {job.id} runs on instance {there}, which is not answering: "
                           "it cannot be stopped from here. Its end is reported when that "
                           "instance is back, or it is reported lost.")
        await self.jobs.db.write([("UPDATE jobs SET killed = 1 WHERE id = ? "
                                   f"AND state = '{JobState.RUNNING}'", (job.id,))])
        grace = self.jobs.settings.kill_grace_seconds
        ended = await self.until_ended(job, kill_wait_seconds(grace))
        if ended.state == "running":
            raise JobError(f"job {job.id} on instance {there} was asked to stop but has not "
                           "ended yet")
        return ended

    async def until_ended(self, job: JobRecord, timeout: float) -> JobRecord:
        """The job's row once it is no longer running, or as it is after ``timeout``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            row = await self.jobs.db.fetchone(f"SELECT {JOB_COLUMNS} FROM jobs WHERE id = ?",
                                              (job.id,))
            record = JobRecord.from_row(row) if row is not None else job
            if record.state != "running" or loop.time() >= deadline:
                return record
            await asyncio.sleep(min(LOOK_SECONDS, max(0.0, deadline - loop.time())))

    # answering ----------------------------------------------------------------------

    def answer(self) -> None:
        """Stop this instance's jobs when another instance asks (until the store closes);
        those asked while this one was not listening are looked up now."""
        self.jobs.db.listen(JOBS_CHANNEL, self._asked)
        self._spawn(self._asked_meanwhile())

    async def stop(self) -> None:
        for task in list(self._stopping):
            task.cancel()
        await asyncio.gather(*self._stopping, return_exceptions=True)

    def _asked(self, job_id: str | None) -> None:
        if job_id is None:  # the listener was away: what was asked meanwhile
            self._spawn(self._asked_meanwhile())
        elif self.jobs.here(job_id):
            self._spawn(self._stop(job_id))

    async def _asked_meanwhile(self) -> None:
        rows = await self.jobs.db.fetchall(
            f"SELECT id FROM jobs WHERE state = '{JobState.RUNNING}' AND killed = 1 "
            "AND instance = ?",
            (self.jobs.instance,))
        for (job_id,) in rows:
            if self.jobs.here(job_id):
                self._spawn(self._stop(job_id))

    async def _stop(self, job_id: str) -> None:
        log.info("job_kill_asked_elsewhere", job_id=job_id)
        try:
            await self.jobs.kill(job_id)
        except JobError as exc:  # ended meanwhile, or stuck: the asker is told by the row
            log.warning("job_kill_failed", job_id=job_id, error=str(exc))

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(work)
        self._stopping.add(task)
        task.add_done_callback(self._stopping.discard)


async def _live(jobs: JobManager, name: str) -> bool:
    now = await store_now(jobs.db)
    return any(i.name == name and i.state(now) == "live" for i in await list_instances(jobs.db))
