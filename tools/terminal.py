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

import tools.job_process as job_process
from gateway.inbound.journal import mark_acted
from gateway.words.return_address import ReturnAddress
from tools.job_output import decode_line
from tools.job_record import JobRecord
from tools.jobs import JobError, JobManager
from tools.plain_text import plain

FOREGROUND_KEEP_LINES = 200
_LINE_LIMIT = 1024 * 1024


@dataclass(frozen=True, slots=True)
class ForegroundResult:
    exit_code: int | None
    #: the last lines, as a chat shows them (terminal escapes removed)
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
        try:
            job_process.check_command(command)
        except ValueError as exc:
            raise JobError(str(exc)) from None
        await mark_acted(self.jobs.db)  # a replay after a crash must not run it twice
        proc = await asyncio.create_subprocess_exec(
            "/bin/sh", "-c", command, stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
            cwd=self.cwd, start_new_session=True, limit=_LINE_LIMIT)
        output: deque[str] = deque(maxlen=FOREGROUND_KEEP_LINES)
        assert proc.stdout is not None
        try:
            async with asyncio.timeout(timeout or self.foreground_timeout):
                await _read_lines(proc.stdout, output)
            return ForegroundResult(await proc.wait(), list(output), timed_out=False)
        except TimeoutError:
            job_process.signal_group(proc.pid, signal.SIGKILL)
            return ForegroundResult(await proc.wait(), list(output), timed_out=True)
        except asyncio.CancelledError:
            job_process.signal_group(proc.pid, signal.SIGKILL)
            raise

    async def start(self, command: str, *, notify_on_complete: bool = True,
                    watch_patterns: list[str] | None = None,
                    artifact: str | None = None) -> JobRecord:
        """Start ``command`` in the background; it reports back to this conversation,
        with the file at ``artifact`` (if it is there then) posted beside its completion."""
        return await self.jobs.start(command, ReturnAddress.capture(),
                                     notify_on_complete=notify_on_complete,
                                     watch_patterns=watch_patterns, cwd=self.cwd,
                                     origin={"artifact": artifact} if artifact else None)


async def _read_lines(stream: asyncio.StreamReader, into: deque[str]) -> None:
    while True:
        try:
            raw = await stream.readline()
        except ValueError:  # a line longer than the limit; asyncio skipped it
            into.append("[homing: an over-long output line was skipped]")
            continue
        if not raw:
            return
        into.append(plain(decode_line(raw.rstrip(b"\n"))))
