"""The daemon's event loop: uvloop where installed, the standard loop on request, and a
clear refusal of a name it does not know."""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path

import pytest

from gateway.daemon.event_loop import UnknownLoop, loop_factory
from tests.real_daemon import HOMING, home_env, run_cli


async def _started_on(env: dict[str, str]) -> str:
    """The loop ``homing run`` says it started on; the daemon is stopped after."""
    proc = await asyncio.create_subprocess_exec(*HOMING, "run", "--port", "0", env=env,
                                                stderr=asyncio.subprocess.PIPE)
    assert proc.stderr is not None
    try:
        async with asyncio.timeout(60):
            while line := await proc.stderr.readline():
                record = json.loads(line)
                if record["event"] == "gateway_started":
                    return str(record["event_loop"])
        raise AssertionError("the daemon exited before it started")
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
        await proc.communicate()


async def test_the_daemon_runs_on_uvloop_unless_asked_for_the_standard_loop(
        tmp_path: Path) -> None:
    env = home_env(tmp_path / "home")
    assert await _started_on(env) == "uvloop"
    assert await _started_on({**env, "HOMING_LOOP": "asyncio"}) == "asyncio"


async def test_an_unknown_loop_is_refused_by_name_before_anything_starts(
        tmp_path: Path) -> None:
    env = {**home_env(tmp_path / "home"), "HOMING_LOOP": "tokio"}
    code, _, err = await run_cli("run", "--port", "0", env=env)
    assert code == 2
    assert "HOMING_LOOP='tokio'" in err and "uvloop, asyncio" in err
    assert not (tmp_path / "home" / "state.db").exists()


def test_the_loop_is_chosen_from_the_environment() -> None:
    assert loop_factory({"HOMING_LOOP": "asyncio"}) == ("asyncio", None)
    assert loop_factory({"HOMING_LOOP": " AsyncIO "})[0] == "asyncio"
    with pytest.raises(UnknownLoop, match="use one of uvloop, asyncio"):
        loop_factory({"HOMING_LOOP": "trio"})
