"""Telling whether a process that the state database mentions is still the same one."""

from __future__ import annotations

import os
import resource
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class ProcStat:
    """The fields of a ``/proc/<pid>/stat`` line that tell a process apart."""

    pid: int
    state: str  # R, S, D, Z (zombie), X (dead), …
    pgrp: int
    start_time: str  # in clock ticks since boot: tells a process from a later one reusing its pid

    @property
    def alive(self) -> bool:
        return self.state not in ("Z", "X")


def parse_stat(line: str) -> ProcStat | None:
    """A ``/proc/<pid>/stat`` line; None when it is cut short or not one."""
    # the command name (field 2) may hold spaces and parentheses: split after its last ")"
    head, close, rest = line.rpartition(")")
    pid_text = head.split(" ", 1)[0]
    fields = rest.split()
    if not close or not pid_text.isdigit() or len(fields) < 20 or not fields[2].isdigit():
        return None
    return ProcStat(int(pid_text), fields[0], int(fields[2]), fields[19])


def read_stat(pid: int | str) -> ProcStat | None:
    try:
        return parse_stat(Path(f"/proc/{pid}/stat").read_text())
    except OSError:
        return None


def process_start_time(pid: int) -> str | None:
    """The kernel's start time of ``pid``, to tell it from a later process that reuses the id."""
    stat = read_stat(pid)
    return stat.start_time if stat is not None else None


def process_identity(pid: int | None = None) -> str:
    """``pid-starttime``: names a process so that a later one with the same pid is not it."""
    pid = os.getpid() if pid is None else pid
    return f"{pid}-{process_start_time(pid) or 0}"


def identity_alive(identity: str | None) -> bool:
    """Whether the process a :func:`process_identity` names still runs."""
    pid, _, start = (identity or "").partition("-")
    if not pid.isdigit() or not start:
        return False
    return is_same_process(int(pid), None if start == "0" else start)


def is_same_process(pid: int, start_time: str | None) -> bool:
    """``pid`` runs and, when ``start_time`` is known, is the process that had it then."""
    current = process_start_time(pid)
    if current is None:
        return _exists(pid)  # no /proc: the best we can do
    return start_time is None or current == start_time


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


#: the limit on open files this process started with: what its jobs get back
ORIGINAL_OPEN_FILES = resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def raise_open_file_limit() -> int:
    """Lift the soft limit on open files to the hard one (often 1,024 of 524,288 under
    systemd): every running job holds a descriptor; return the new limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = (1 << 20) if hard == resource.RLIM_INFINITY else hard
    if soft == resource.RLIM_INFINITY or soft >= target:
        return soft
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ValueError, OSError):
        return soft
    return target
