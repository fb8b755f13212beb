"""The operating-system side of a background job.

A job runs under a small ``sh`` wrapper in its own process group. The wrapper
writes all output to the job's log file through ``tee -p`` — which keeps
writing the file when the daemon's end of the pipe goes away — and records
the exit code in a file of its own, so a daemon that crashed and restarted
can still learn how the job ended and what it printed.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Awaitable, Callable
from pathlib import Path

from gateway.processes import is_same_process

# $1 command, $2 exit-code file, $3 log file. Only shell builtins run after the
# command ends (a subshell, not another exec), so its end reaches the daemon fast.
_WRAPPER = (
    '( c=$1; e=$2; set --; ( eval "$c" ) </dev/null 2>&1; echo $? > "$e" ) '
    '| tee -p -a "$3"; read code < "$2"; exit "$code"'
)
_LINE_LIMIT = 1024 * 1024
_FOLLOW_INTERVAL = 0.2

LineHandler = Callable[[str], Awaitable[None]]


async def spawn(command: str, *, cwd: Path, log_path: Path, exit_path: Path
                ) -> asyncio.subprocess.Process:
    """Start ``command`` in a new process group; its output arrives on stdout."""
    return await asyncio.create_subprocess_exec(
        "/bin/sh", "-c", _WRAPPER, "homing-job", command, str(exit_path), str(log_path),
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT, cwd=cwd, start_new_session=True, limit=_LINE_LIMIT,
    )


async def read_lines(stream: asyncio.StreamReader, on_line: LineHandler) -> None:
    """Hand each output line to ``on_line`` as it arrives, until end of output."""
    while True:
        try:
            raw = await stream.readline()
        except ValueError:  # a line longer than the limit; asyncio skipped it
            await on_line("[homing: an over-long output line was skipped]")
            continue
        if not raw:
            return
        await on_line(decode_line(raw))


def decode_line(raw: bytes) -> str:
    return raw.decode("utf-8", "replace").rstrip("\r\n")


async def wait_for_exit(pid: int) -> None:
    """Wait for a process that is not our child (one started before a restart).

    A pidfd becomes readable when the process ends, so this is event-driven;
    where pidfds are unavailable it falls back to checking twice a second.
    """
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        while is_same_process(pid, None):
            await asyncio.sleep(0.5)
        return
    loop = asyncio.get_running_loop()
    ended = loop.create_future()
    loop.add_reader(fd, lambda: ended.done() or ended.set_result(None))
    try:
        await ended
    finally:
        loop.remove_reader(fd)
        os.close(fd)


async def follow_file(path: Path, offset: int, on_line: LineHandler,
                      until: asyncio.Future[None]) -> None:
    """Hand lines appended to ``path`` after ``offset`` to ``on_line`` until ``until`` is done.

    Only for jobs re-attached after a restart: their output pipe went with the
    old daemon, so the log file is all there is.
    """
    partial = b""
    with contextlib.suppress(FileNotFoundError), path.open("rb") as file:
        file.seek(offset)
        while True:
            chunk = file.read(65536)
            if chunk:
                *lines, partial = (partial + chunk).split(b"\n")
                for raw in lines:
                    await on_line(decode_line(raw))
                continue
            if until.done():
                break
            await asyncio.wait({until}, timeout=_FOLLOW_INTERVAL)
    if partial:
        await on_line(decode_line(partial))


def read_exit_code(exit_path: Path) -> int | None:
    try:
        return int(exit_path.read_text().strip())
    except (OSError, ValueError):
        return None


def tail_file(path: Path, lines: int, max_bytes: int = 65536) -> list[str]:
    try:
        with path.open("rb") as file:
            file.seek(0, os.SEEK_END)
            size = file.tell()
            file.seek(max(0, size - max_bytes))
            data = file.read()
    except OSError:
        return []
    text = data.decode("utf-8", "replace").splitlines()
    if size > max_bytes and text:
        text = text[1:]  # the first line was cut by the seek
    return text[-lines:] if lines else []


def signal_group(pid: int, sig: signal.Signals) -> bool:
    """Signal the job's whole process group; False when it is already gone."""
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        return False
    return True
