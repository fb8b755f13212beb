"""The real ``homing`` command in child processes, for tests and benchmarks that
start it, signal it and read its store through the CLI."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import sys
from contextlib import closing
from pathlib import Path
from typing import Any

from tests.helpers import eventually_async

HOMING = [sys.executable, "-m", "gateway.cli"]
#: how long a daemon may take to listen: about a second idle, many on a machine whose
#: other work takes the cores (the deadline only decides how soon a hang is failed)
STARTUP_DEADLINE = 60.0
_DRAINS: set[asyncio.Task[None]] = set()


async def run_cli(*args: str, env: dict[str, str]) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        *HOMING, *args, env=env, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 30)
    return proc.returncode, out.decode(), err.decode()


async def cli_json(*args: str, env: dict[str, str]) -> Any:
    code, out, err = await run_cli(*args, "--json", env=env)
    assert code == 0, err
    return json.loads(out)


def web_home(home: Path, extra_config: str = "") -> dict[str, str]:
    """A fresh home whose daemon serves the web chat on a free port; its environment."""
    home.mkdir()
    (home / "config.yaml").write_text("platforms: {web: {port: 0}}\n" + extra_config)
    return home_env(home)


def home_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOMING_")}
    env["HOMING_HOME"] = str(home)
    return env


async def listening_url(stderr: asyncio.StreamReader) -> str:
    while True:
        line = await asyncio.wait_for(stderr.readline(), STARTUP_DEADLINE)
        assert line, "the daemon exited before listening"
        record = json.loads(line)
        if record["event"] == "web_chat_listening":
            return record["url"]


async def start_daemon(env: dict[str, str]) -> tuple[asyncio.subprocess.Process, str]:
    """``homing run`` with its web chat listening; its process and base URL."""
    proc = await asyncio.create_subprocess_exec(*HOMING, "run", env=env,
                                                stderr=asyncio.subprocess.PIPE)
    assert proc.stderr is not None
    try:
        url = await listening_url(proc.stderr)
    except BaseException:  # it never listened: nobody else knows of it to stop it
        if proc.returncode is None:
            proc.kill()
        await proc.wait()
        raise
    # keep draining its log so the daemon never blocks on a full pipe (the task is kept:
    # the loop holds only a weak reference to a task, and a collected one drains nothing)
    drain = asyncio.get_running_loop().create_task(_drain(proc.stderr))
    _DRAINS.add(drain)
    drain.add_done_callback(_DRAINS.discard)
    return proc, url


async def _drain(stream: asyncio.StreamReader) -> None:
    while await stream.readline():
        pass


async def daemon_settled(env: dict[str, str], timeout: float = 30.0) -> None:
    """Wait until the daemon of ``env``'s home has nothing left to do: every job ended,
    no notification pending or claimed, every message it took in finished. After this,
    "exactly once" can be counted: nothing more is on its way."""
    db = Path(env["HOMING_HOME"]) / "state.db"
    await eventually_async(lambda: asyncio.to_thread(_nothing_left, db), timeout,
                           what="the daemon to have nothing left to do")


def _nothing_left(db: Path) -> bool:
    # read-only, beside the daemon's own connections (the store is in WAL mode)
    with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)) as conn:
        (open_work,) = conn.execute(
            "SELECT (SELECT COUNT(*) FROM jobs WHERE state = 'running')"
            " + (SELECT COUNT(*) FROM notifications WHERE state IN ('pending', 'claimed'))"
            # a journaled message is open until it is handled or skipped
            # (gateway/inbound/journal.py)
            " + (SELECT COUNT(*) FROM inbound WHERE state NOT IN ('handled', 'skipped'))"
        ).fetchone()
    return open_work == 0


async def kill_leftover_jobs(env: dict[str, str]) -> None:
    """Jobs outlive the daemon by design; a test's must not outlive the test."""
    import signal

    for job in await cli_json("jobs", env=env):
        if job["pid"]:
            try:
                os.killpg(job["pid"], signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
