"""The operating-system side of a background job: one wrapper process and its files.

A job is a small ``/bin/sh`` — the wrapper — in its own session and process
group, and the command, which the wrapper starts as its one child (under
bash when there is one: it runs a simple command by exec'ing it, so
``sleep 60`` or ``sh -c '…'`` costs exactly one more process). The command's
output goes straight to the job's ``output.log``: no pipe to the daemon that
a left-behind child could hold open, no ``tee``, no thread in the daemon
waiting on the process. Nothing the command does — ``exec``, traps, ``cd``,
``exit`` — reaches the wrapper, which writes what a restarted daemon needs in
the job's folder:

- ``pid`` (its first act): its own ``/proc`` stat line, so the pid can be told
  from a later process that reuses it;
- ``exit_code`` (its last act): how the command ended;
- ``lock``: flocked by the daemon *before* the wrapper is spawned and handed to
  it as its stdin (the command gets ``/dev/null``), so from the moment the
  job's row is committed the job is provably either alive (the lock is held)
  or gone (it is not). No window is left in which a running job looks lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from gateway.machine.private_files import private_dir
from gateway.machine.processes import is_same_process, parse_stat, process_start_time, read_stat

# $1 the command, $2 the job folder, $3 the working directory, $4 the shell, $5 the
# limit on open files to give the command (the daemon's own is raised), $6 the umask to
# give it (the wrapper's own files are private). The traps keep the wrapper alive
# through a SIGTERM to the group, to record how the command took it; one that came
# before the command's process existed is passed on to it, which then takes it as it
# would have (a kill must not be lost in the moment between the trap and the fork).
_WRAPPER = """\
umask 077
read -r s < /proc/self/stat && printf '%s\\n' "$s" > "$2/pid"
sig=
trap 'sig=HUP' HUP
trap 'sig=INT' INT
trap 'sig=TERM' TERM
( [ -z "$sig" ] || exec "$4" -c "kill -s $sig \\$\\$"
  ulimit -n "$5" 2>/dev/null; umask "$6"; cd -- "$3" && exec "$4" -c "$1" ) </dev/null
code=$?
echo "$code" > "$2/exit_code"
exit "$code"
"""
_WRAPPER_SHELL = "/bin/sh"
#: what runs the command: bash where there is one (it execs a simple command), else sh
COMMAND_SHELL = "/bin/bash" if os.access("/bin/bash", os.X_OK) else "/bin/sh"
#: signals Python ignores, which a job must not inherit ignored (``yes | head`` needs
#: SIGPIPE); resetting a caught one is harmless
_DEFAULT_SIGNALS = (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGINT, signal.SIGTERM,
                    signal.SIGHUP, signal.SIGQUIT)
def _umask() -> str:
    """The process's umask, read without changing it (``os.umask`` would, for a moment,
    for every thread)."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return line.split()[1]
    return "0022"


#: what the commands get: the umask the daemon was started with, as a shell would give
USER_UMASK = _umask()
#: only where pidfds are missing, or for a wrapper known by its lock. Read at every
#: wait: tests set it to an hour, so a job's exit that is reported at all was not polled
POLL_SECONDS = 0.25


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


def spawn(command: str, files: JobFiles, *, cwd: Path, env: dict[str, str],
          open_files: int) -> int:
    """Start the wrapper for ``command``; return its pid (also its process group's id).

    The lock is taken here, before the spawn, and handed to the wrapper as its
    stdin: if the daemon dies at any point from now on, its own copy closes
    with it and the lock stays held exactly as long as the wrapper lives.
    """
    private_dir(files.folder.parent)
    files.folder.mkdir(mode=0o700, exist_ok=True)
    lock = _open_above_stdio(files.lock, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        log = _open_above_stdio(files.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        try:
            return os.posix_spawn(
                _WRAPPER_SHELL,
                [_WRAPPER_SHELL, "-c", _WRAPPER, "homing-job", command, str(files.folder),
                 str(cwd), COMMAND_SHELL, str(open_files), USER_UMASK], env,
                file_actions=[(os.POSIX_SPAWN_DUP2, lock, 0), (os.POSIX_SPAWN_DUP2, log, 1),
                              (os.POSIX_SPAWN_DUP2, log, 2),
                              *((os.POSIX_SPAWN_CLOSE, fd) for fd in _inherited_fds())],
                setsid=True, setsigdef=_DEFAULT_SIGNALS, setsigmask=())
        finally:
            os.close(log)
    finally:
        os.close(lock)


def _inherited_fds() -> list[int]:
    """Descriptors above 2 that a spawned process would inherit — ones the daemon was
    itself given without close-on-exec (a supervisor's pipe): no job may keep them."""
    fds = []
    with contextlib.suppress(OSError):
        for name in os.listdir("/proc/self/fd"):
            fd = int(name)
            with contextlib.suppress(OSError):
                if fd > 2 and os.get_inheritable(fd):
                    fds.append(fd)
    return fds


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


def file_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def ended_at(exit_path: Path) -> float:
    """When a job ended while the daemon was down: its exit file's time."""
    try:
        return exit_path.stat().st_mtime
    except OSError:
        return time.time()


def read_pid_file(path: Path) -> tuple[int, str] | None:
    """The wrapper's pid and kernel start time from its ``pid`` file, once fully written."""
    try:
        line = path.read_text()
    except OSError:
        return None
    stat = parse_stat(line) if line.endswith("\n") else None  # else not yet written
    return (stat.pid, stat.start_time) if stat is not None else None


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

    Alive means: the recorded process still runs, or — for a wrapper spawned a
    moment before the old daemon died, which may not have written its pid file
    yet (it does so first thing, so it gets a moment) — the lock is held.
    """
    recorded = read_pid_file(files.pid)
    if recorded is not None:
        pid, start = recorded
    if pid is not None and start is not None:
        return (pid, start) if is_same_process(pid, start) else None
    loop = asyncio.get_running_loop()
    deadline = loop.time() + patience
    while lock_held(files.lock):
        recorded = read_pid_file(files.pid)
        if recorded is not None:
            return recorded if is_same_process(*recorded) else None
        if loop.time() > deadline:
            return None, None
        await asyncio.sleep(0.01)
    return None


async def learn_pid(files: JobFiles) -> tuple[int, str] | None:
    """For a wrapper alive by its lock alone: its pid once its pid file shows it, or
    None once it is gone (lock released, or its recorded process ended)."""
    while lock_held(files.lock):
        recorded = read_pid_file(files.pid)
        if recorded is not None:
            return recorded if is_same_process(*recorded) else None
        await asyncio.sleep(POLL_SECONDS)
    return None


# waiting for the end ----------------------------------------------------------


async def wait_for_exit(pid: int, start: str | None = None, *, child: bool = True
                        ) -> int | None:
    """Wait until ``pid`` ends, without a thread: its pidfd becomes readable.

    For the daemon's own ``child`` the wait status is reaped and returned as an
    exit code (negative: killed by that signal). For a process an earlier daemon
    started, None: its wrapper's ``exit_code`` file tells (and when it is our
    child after all — a restart inside one process — it is reaped unread, so
    that file is what counts, as it would after a real restart).
    """
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return _ended(pid, child)
    except (AttributeError, OSError):
        return await _poll_for_exit(pid, start, child)
    try:
        if start is not None and process_start_time(pid) not in (start, None):
            return None  # the pid was reused: the process we wanted is gone
        loop = asyncio.get_running_loop()
        ended: asyncio.Future[None] = loop.create_future()
        loop.add_reader(fd, _settle, ended)
        try:
            await ended
        finally:
            loop.remove_reader(fd)
    finally:
        os.close(fd)
    return _ended(pid, child)


def _reap(pid: int) -> int | None:
    try:
        got, status = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return None  # not ours (an earlier daemon's), or already reaped
    return os.waitstatus_to_exitcode(status) if got == pid else None


def _ended(pid: int, child: bool) -> int | None:
    """A child's exit code; a process that is not our child is reaped, code unwanted."""
    code = _reap(pid)
    return code if child else None


def _settle(ended: asyncio.Future[None]) -> None:
    if not ended.done():
        ended.set_result(None)


async def _poll_for_exit(pid: int, start: str | None, child: bool) -> int | None:
    while True:
        code = _reap(pid)
        if code is not None or not is_same_process(pid, start):
            return code if child else None
        await asyncio.sleep(POLL_SECONDS)


# the process group ------------------------------------------------------------


def signal_group(pgid: int, sig: signal.Signals) -> bool:
    """Signal the job's whole process group; False when it is already empty."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    return True


def group_empty(pgid: int) -> bool:
    """No process is left in the group (one syscall; zombies still count)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass
    return False


def group_members(pgid: int) -> int:
    """How many live (not zombie) processes are left in the job's process group; scans
    /proc when the group is not empty, so call it off the event loop."""
    if group_empty(pgid):
        return 0
    count = 0
    with contextlib.suppress(OSError):
        for entry in os.scandir("/proc"):
            if entry.name.isdigit():
                stat = read_stat(entry.name)
                if stat is not None and stat.alive and stat.pgrp == pgid:
                    count += 1
    return count


def tail_file(path: Path, lines: int, max_bytes: int = 65536) -> list[str]:
    return tail_of(path, lines, max_bytes)[0]


def tail_of(path: Path, lines: int, max_bytes: int = 65536) -> tuple[list[str], bool]:
    """The last ``lines`` lines, and whether the output had more than those."""
    try:
        with path.open("rb") as file:
            file.seek(0, os.SEEK_END)
            size = file.tell()
            file.seek(max(0, size - max_bytes))
            data = file.read()
    except OSError:
        return [], False
    text = data.decode("utf-8", "replace").split("\n")
    if text and not text[-1]:
        text.pop()  # the newline ending the last line
    if size > max_bytes and text:
        text = text[1:]  # the first line was cut by the seek
    kept = text[-lines:] if lines else []
    return kept, size > max_bytes or len(text) > len(kept)
