"""Telling whether a process that the state database mentions is still the same one."""

from __future__ import annotations

import os
from pathlib import Path


def process_start_time(pid: int) -> str | None:
    """The kernel's start time of ``pid``, to tell it from a later process that reuses the id."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # the command name (field 2) may contain spaces and parentheses
    fields = stat[stat.rfind(")") + 2:].split()
    return fields[19] if len(fields) > 19 else None


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
