"""The process tool: a conversation's own background jobs, and nobody else's.

Whoever asks — a slash command or the model's ``process`` tool — the
conversation is the one in the task-local context, so a job id guessed or
copied from another chat is simply "not here".
"""

from __future__ import annotations

import asyncio
import builtins
import time

from gateway.words.context import current_session
from tools.job_notices import describe_exit
from tools.job_record import JobRecord
from tools.jobs import JobError, JobManager
from tools.jobs_elsewhere import JobsElsewhere


class Processes:
    def __init__(self, jobs: JobManager) -> None:
        self.jobs = jobs
        self.elsewhere = JobsElsewhere(jobs)  # on a shared store: jobs on another host

    async def own(self, job_id: str) -> JobRecord:
        """The job ``job_id`` if this conversation started it; JobError otherwise."""
        job = await self.jobs.get(job_id.strip()) if job_id.strip() else None
        if job is None or job.session_key != current_session().session_key:
            raise JobError(f"No job {job_id!r} in this conversation; list them to see the ids.")
        return job

    async def list(self, limit: int = 20) -> list[JobRecord]:
        return await self.jobs.list(session_key=current_session().session_key, limit=limit)

    async def log(self, job: JobRecord, lines: int) -> builtins.list[str]:
        there = await self.elsewhere.where(job)
        if there is not None:
            return [f"(its output is on the host of instance {there}, which runs it; this "
                    f"conversation is being served by instance {self.jobs.instance})"]
        return self.jobs.output_tail(job, lines)

    async def wait(self, job_id: str, timeout: float) -> tuple[JobRecord, builtins.list[str]]:
        """The job once it has ended, or as it is when ``timeout`` runs out — and, when it
        ended, its notices not delivered yet (its completion), which then are not
        delivered again."""
        job = await self.own(job_id)
        if await self.elsewhere.where(job) is not None:
            await self.elsewhere.until_ended(job, timeout)
        else:
            try:
                async with asyncio.timeout(timeout):
                    await self.jobs.wait(job.id)
            except TimeoutError:
                pass
        job = await self.own(job_id)
        if job.state == "running":
            return job, []
        return job, await self.jobs.take_notices(job.id)

    async def kill(self, job_id: str) -> JobRecord:
        job = await self.own(job_id)
        there = await self.elsewhere.where(job) if job.state == "running" else None
        if there is not None:
            return await self.elsewhere.kill(job, there)
        return await self.jobs.kill(job.id)


def job_line(job: JobRecord) -> str:
    if job.state == "running":
        state = f"running for {int(time.time() - job.started_at)} s"
    elif job.state == "lost":
        state = "lost (ended without an exit code)"
    elif job.state == "failed":
        state = "did not start"
    else:
        state = describe_exit(job.exit_code)
    if job.left_running:
        state += f", left {job.left_running} running"
    return f"{job.id}  {state}  $ {' '.join(job.command.split())[:80]}"
