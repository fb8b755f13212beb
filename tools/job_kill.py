"""Stopping a job: its whole process group, SIGTERM first, then SIGKILL.

A job is stopped when nothing of its process group is left — its shell, and
whatever it started that stayed in the group — not when its shell exits. The
group is polled while a kill waits (a kill is rare and short); the /proc scan
that tells zombies from live processes runs in a worker thread.

A group still there a second after SIGTERM gets it once more: a shell that was
starting a command when the first came (``/kill`` right after ``/bg``) notes the
signal for later and forks a child that never saw it, then waits for that child
— seen in 6 of 300 kills on a busy machine, each then taking the whole grace
and SIGKILL. The second SIGTERM reaches the child.
"""

from __future__ import annotations

import asyncio
import signal

import tools.job_process as job_process

POLL_SECONDS = 0.05
SIGKILL_SETTLE_SECONDS = 5.0
#: when a group still there gets SIGTERM again (see the module's docstring)
SIGTERM_AGAIN_SECONDS = 1.0


def kill_wait_seconds(grace: float) -> float:
    """How long a /kill waits for the job's end: SIGTERM's grace, SIGKILL settling, and
    a margin for the end to be recorded (on another host too)."""
    return grace + SIGKILL_SETTLE_SECONDS + 5.0


async def kill_group(pgid: int, grace: float) -> bool:
    """SIGTERM the group, SIGKILL what is left after ``grace`` seconds; True when it
    took SIGKILL. Returns once the group is empty (or SIGKILL had its time)."""
    job_process.signal_group(pgid, signal.SIGTERM)
    first = min(grace, SIGTERM_AGAIN_SECONDS)
    if await group_empties(pgid, first):
        return False
    if grace > first:
        job_process.signal_group(pgid, signal.SIGTERM)
        if await group_empties(pgid, grace - first):
            return False
    job_process.signal_group(pgid, signal.SIGKILL)
    await group_empties(pgid, SIGKILL_SETTLE_SECONDS)
    return True


async def group_empties(pgid: int, timeout: float) -> bool:
    """Wait until no live process is left in the group; False after ``timeout``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not job_process.group_empty(pgid):
        # zombies count for killpg; only a scan tells them from the living
        if not await asyncio.to_thread(job_process.group_members, pgid):
            return True
        if loop.time() >= deadline:
            return False
        await asyncio.sleep(POLL_SECONDS)
    return True
