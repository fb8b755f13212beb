"""The operating-system side of a background job: one wrapper process and its files.

A job is one ``/bin/sh`` — the wrapper — in its own session and process
group, which runs the command itself (``eval``, no subshell) with its output
going straight to the job's ``output.log``. Nothing sits in between: no pipe
to the daemon that a left-behind child could hold open, no ``tee``, no thread
in the daemon waiting on the process. The wrapper writes what a daemon that
restarts needs to know, in the job's folder:

- ``pid`` (its first act): its own ``/proc`` stat line, so the pid can be told
  from a later process that reuses it;
- ``exit_code`` (its last act, from an EXIT trap): how the command ended;
- ``lock``: flocked by the daemon *before* the wrapper is spawned and inherited
  as the wrapper's stdin, so from the moment the job's row is committed the
  job is provably either alive (the lock is held) or gone (it is not). No
  window is left in which a running job looks lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import signal
from dataclasses import dataclass
from pathlib import Path

from gateway.processes import is_same_process, process_start_time

# $1 the command, $2 the job folder, $3 the working directory. The command runs in
# the wrapper itself, so ``exit 3`` ends the wrapper — and the EXIT trap records it.
# A TERM/INT/HUP trap makes those signals end the job the way they end a shell,
# after the running child (signalled with the whole group) has gone.
_WRAPPER = """\
__homing_dir=$2
__homing_cmd=$1
read -r __homing_stat < /proc/self/stat && printf '%s\\n' "$__homing_stat" > "$__homing_dir/pid"
trap 'echo $? > "$__homing_dir/exit_code"' EXIT
trap 'exit 129' HUP
trap 'exit 130' INT
trap 'exit 143' TERM
cd -- "$3" || exit 126
set --
eval "$__homing_cmd" </dev/null
"""
_SHELL = "/bin/sh"
_POLL_SECONDS = 0.25  # only where pidfds are missing


def check_command(command: str) -> None:
    """Refuse what no shell can be given, before anything is recorded."""
    if not command.strip():
        raise ValueError("no command given")
    if "\0" in command:
        raise ValueError("the command contains a NUL character, which no shell command can "
                         "hold")


@dataclass(frozen=True, slots=True)
class JobFiles:
    """The job's folder under ``$HOMING_HOME/jobs``."""

    folder: Path

    @property
    def log(self) -> Path:
        return self.folder / "output.log"

    @property
    def exit_code(self) -> Path:
        return self.folder / "exit_code"

    @property
    def pid(self) -> Path:
        return self.folder / "pid"

    @property
    def lock(self) -> Path:
        return self.folder / "lock"


def spawn(command: str, files: JobFiles, *, cwd: Path, env: dict[str, str]) -> int:
    """Start the wrapper for ``command``; return its pid (also its process group's id).

    The lock is taken here, before the spawn, and handed to the wrapper as its
    stdin: if the daemon dies at any point from now on, its own copy closes
    with it and the lock stays held exactly as long as the wrapper lives.
    """
    files.folder.mkdir(parents=True, exist_ok=True)
    lock = _open_above_stdio(files.lock, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        log = _open_above_stdio(files.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        try:
            return os.posix_spawn(
                _SHELL, [_SHELL, "-c", _WRAPPER, "homing-job", command, str(files.folder),
                         str(cwd)], env,
                file_actions=[(os.POSIX_SPAWN_DUP2, lock, 0), (os.POSIX_SPAWN_DUP2, log, 1),
                              (os.POSIX_SPAWN_DUP2, log, 2)],
                setsid=True)
        finally:
            os.close(log)
    finally:
        os.close(lock)


def _open_above_stdio(path: Path, flags: int) -> int:
    """Open ``path`` on a descriptor above 2, so a dup2 onto 0–2 is never a no-op that
    would leave it close-on-exec (a daemon started with stdin closed gets fd 0 back)."""
    fd = os.open(path, flags | os.O_CLOEXEC, 0o600)
    if fd > 2:
        return fd
    try:
        return fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)
    finally:
        os.close(fd)


# what a restarted daemon reads ------------------------------------------------


def read_exit_code(path: Path) -> int | None:
    """The code the wrapper recorded, or None (not ended, or ended without a record)."""
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def read_pid_file(path: Path) -> tuple[int, str | None] | None:
    """The wrapper's pid and kernel start time from its ``pid`` file, once fully written."""
    try:
        line = path.read_text()
    except OSError:
        return None
    if not line.endswith("\n") or ")" not in line:
        return None  # not yet written (or cut short): no proof of anything
    pid_text = line.split(" ", 1)[0]
    fields = line[line.rfind(")") + 2:].split()
    if not pid_text.isdigit():
        return None
    return int(pid_text), (fields[19] if len(fields) > 19 else None)


def lock_held(path: Path) -> bool:
    """Whether a live wrapper (or the daemon spawning it) holds the job's lock."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # also drops the lock if we just took it
    return False


def was_spawned(files: JobFiles) -> bool:
    """The wrapper got as far as writing its pid file (so the command may have run)."""
    return files.pid.exists()


async def find_wrapper(pid: int | None, start: str | None, files: JobFiles,
                       *, patience: float = 0.5) -> tuple[int | None, str | None] | None:
    """The live wrapper of a job an earlier daemon started: ``(pid, start time)``, with
    the pid None when only its lock shows it alive; None when it is gone.

    Alive means: the recorded process still runs, or the lock is held — by a
    wrapper spawned a moment before the old daemon died, which may not have
    written its pid file yet (it does so first thing, so give it a moment).
    """
    if pid is None:
        recorded = read_pid_file(files.pid)
        if recorded is not None:
            pid, start = recorded
    if pid is not None and start is not None and is_same_process(pid, start):
        return pid, start
    loop = asyncio.get_running_loop()
    deadline = loop.time() + patience
    while lock_held(files.lock):
        recorded = read_pid_file(files.pid)
        if recorded is not None and is_same_process(*recorded):
            return recorded
        if loop.time() > deadline:
            return None, None
        await asyncio.sleep(0.01)
    return None


async def learn_pid(files: JobFiles) -> tuple[int, str | None] | None:
    """For a wrapper alive by its lock alone: its pid once its pid file shows it, or
    None once the lock is released (it ended without us learning which it was)."""
    while lock_held(files.lock):
        recorded = read_pid_file(files.pid)
        if recorded is not None and is_same_process(*recorded):
            return recorded
        await asyncio.sleep(_POLL_SECONDS)
    return None


# waiting for the end ----------------------------------------------------------


async def wait_for_exit(pid: int, start: str | None = None) -> int | None:
    """Wait until ``pid`` ends, without a thread: its pidfd becomes readable.

    For the daemon's own child the wait status is reaped and returned as an exit
    code (negative: killed by that signal); for a process an earlier daemon
    started, None — its wrapper's ``exit_code`` file tells.
    """
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return _reap(pid)
    except (AttributeError, OSError):
        return await _poll_for_exit(pid, start)
    try:
        if start is not None and process_start_time(pid) not in (start, None):
            return None  # the pid was reused: the process we wanted is gone
        loop = asyncio.get_running_loop()
        ended = loop.create_future()
        loop.add_reader(fd, lambda: ended.done() or ended.set_result(None))
        try:
            await ended
        finally:
            loop.remove_reader(fd)
    finally:
        os.close(fd)
    return _reap(pid)


def _reap(pid: int) -> int | None:
    try:
        got, status = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return None  # not ours (an earlier daemon's), or already reaped
    return os.waitstatus_to_exitcode(status) if got == pid else None


async def _poll_for_exit(pid: int, start: str | None) -> int | None:
    while True:
        code = _reap(pid)
        if code is not None or not is_same_process(pid, start):
            return code
        await asyncio.sleep(_POLL_SECONDS)


# the process group ------------------------------------------------------------


def signal_group(pgid: int, sig: signal.Signals) -> bool:
    """Signal the job's whole process group; False when it is already empty."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    return True


def group_members(pgid: int) -> int:
    """How many live (not zombie) processes are left in the job's process group."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return 0
    except PermissionError:
        pass
    count = 0
    with contextlib.suppress(OSError):
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                stat = Path(entry.path, "stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rfind(")") + 2:].split()
            if len(fields) > 2 and fields[0] not in ("Z", "X") and fields[2] == str(pgid):
                count += 1
    return count


def tail_file(path: Path, lines: int, max_bytes: int = 65536) -> list[str]:
    try:
        with path.open("rb") as file:
            file.seek(0, os.SEEK_END)
            size = file.tell()
            file.seek(max(0, size - max_bytes))
            data = file.read()
    except OSError:
        return []
    text = data.decode("utf-8", "replace").split("\n")
    if text and not text[-1]:
        text.pop()  # the newline ending the last line
    if size > max_bytes and text:
        text = text[1:]  # the first line was cut by the seek
    return text[-lines:] if lines else []
