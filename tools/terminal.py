"""The terminal tool: run a shell command now, or start it in the background.

A background start captures the return address from the task-local session
context at the moment it starts — never later, never from anywhere else.
"""

from __future__ import annotations

import asyncio
import signal
from collections import deque
from dataclasses import dataclass
from pathlib import Path

from gateway.notifications import ReturnAddress

from . import job_process
from .jobs import JobManager, JobRecord

FOREGROUND_KEEP_LINES = 200


@dataclass(frozen=True, slots=True)
class ForegroundResult:
    exit_code: int | None
    output: list[str]
    timed_out: bool


class Terminal:
    def __init__(self, jobs: JobManager, *, foreground_timeout: float,
                 cwd: Path | None = None) -> None:
        self.jobs = jobs
        self.foreground_timeout = foreground_timeout
        self.cwd = cwd

    async def run(self, command: str, *, timeout: float | None = None) -> ForegroundResult:
        """Run ``command`` to its end (or the timeout, which kills it)."""
        proc = await asyncio.create_subprocess_exec(
            "/bin/sh", "-c", command, stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
            cwd=self.cwd, start_new_session=True, limit=1024 * 1024)
        output: deque[str] = deque(maxlen=FOREGROUND_KEEP_LINES)

        async def keep(line: str) -> None:
            output.append(line)

        assert proc.stdout is not None
        try:
            async with asyncio.timeout(timeout or self.foreground_timeout):
                await job_process.read_lines(proc.stdout, keep)
            return ForegroundResult(await proc.wait(), list(output), timed_out=False)
        except TimeoutError:
            job_process.signal_group(proc.pid, signal.SIGKILL)
            return ForegroundResult(await proc.wait(), list(output), timed_out=True)
        except asyncio.CancelledError:
            job_process.signal_group(proc.pid, signal.SIGKILL)
            raise

    async def start(self, command: str, *, notify_on_complete: bool = True,
                    watch_patterns: list[str] | None = None) -> JobRecord:
        """Start ``command`` in the background; it reports back to this conversation."""
        return await self.jobs.start(command, ReturnAddress.capture(),
                                     notify_on_complete=notify_on_complete,
                                     watch_patterns=watch_patterns, cwd=self.cwd)
