"""A small status file beside the store, so ``homing status`` can tell whether
the daemon runs and how its platforms are, without talking to it."""

from __future__ import annotations

import asyncio
import json
import os
import time
import uuid
from pathlib import Path
from typing import Any

from gateway.machine.private_files import private_dir, private_file
from gateway.machine.processes import is_same_process, process_start_time

FILE_NAME = "status.json"
REFRESH_SECONDS = 5.0


def status_path(home: Path) -> Path:
    return home / FILE_NAME


def write_status(home: Path, platforms: dict[str, bool], state: str, started_at: float) -> None:
    pid = os.getpid()
    data = {"state": state, "pid": pid, "proc_start": process_start_time(pid),
            "started_at": started_at, "updated_at": time.time(), "platforms": platforms}
    path = status_path(home)
    private_dir(path.parent)
    # a file of its own per write (a refresh may still be writing in its thread),
    # renamed into place so readers never see half a file
    tmp = private_file(path.with_name(f".{FILE_NAME}.{uuid.uuid4().hex}"))
    tmp.write_text(json.dumps(data))
    tmp.replace(path)


def read_status(home: Path) -> dict[str, Any] | None:
    """The last status written, with ``running`` telling whether that daemon still runs."""
    try:
        data: dict[str, Any] = json.loads(status_path(home).read_text())
    except (OSError, ValueError):
        return None
    data["running"] = data.get("state") in ("starting", "running", "stopping") and \
        is_same_process(int(data.get("pid") or 0), data.get("proc_start"))
    return data


async def keep_status(home: Path, platforms: Any, started_at: float) -> None:
    """Refresh the file while the daemon runs (``platforms()`` gives the current state)."""
    while True:
        await asyncio.to_thread(write_status, home, platforms(), "running", started_at)
        await asyncio.sleep(REFRESH_SECONDS)
