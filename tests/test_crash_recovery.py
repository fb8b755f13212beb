"""kill -9 the real daemon while jobs run; the restarted one reports them once."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from pathlib import Path

import aiohttp

from .helpers import eventually_async
from .test_cli import HOMING, _listening_url, run_cli, web_home


async def start_daemon(env: dict[str, str]) -> tuple[asyncio.subprocess.Process, str]:
    proc = await asyncio.create_subprocess_exec(*HOMING, "run", env=env,
                                                stderr=asyncio.subprocess.PIPE)
    url = await _listening_url(proc.stderr)
    # keep draining its log so the daemon never blocks on a full pipe
    asyncio.get_running_loop().create_task(_drain(proc.stderr))
    return proc, url


async def _drain(stream: asyncio.StreamReader) -> None:
    while await stream.readline():
        pass


async def test_a_job_finishing_across_a_kill_9_is_reported_once_in_its_conversation(
        tmp_path: Path) -> None:
    home = tmp_path / "home"
    env = web_home(home)
    first, url = await start_daemon(env)
    try:
        async with aiohttp.ClientSession() as http:
            async with http.ws_connect(url + "ws") as ws:
                ready = await ws.receive_json(timeout=5)
                await ws.send_json({"type": "message", "text":
                                    "/bg sleep 3; echo crash-marker; exit 3"})
                await ws.send_json({"type": "message", "text":
                                    "/watch tick for i in 1 2 3 4 5 6; do echo tick $i; "
                                    "sleep 1; done"})
                started = [(await ws.receive_json(timeout=5))["text"] for _ in range(2)]
            job_ids = [text.split()[2].rstrip(",;") for text in started]
            first.send_signal(signal.SIGKILL)
            await first.wait()

            second, url = await start_daemon(env)
            try:
                conversation = ready["conversation"]
                async with http.ws_connect(f"{url}ws?conversation={conversation}") as ws:
                    again = await ws.receive_json(timeout=5)
                    assert again["session_id"] == ready["session_id"]

                async def completion_delivered() -> list[dict]:
                    code, out, _ = await run_cli("notifications", "--json", env=env)
                    assert code == 0
                    rows = [r for r in json.loads(out)
                            if r["job_id"] == job_ids[0] and r["kind"] == "completion"]
                    return rows if rows and rows[0]["state"] == "delivered" else []

                rows = await eventually_async(completion_delivered, timeout=20,
                                              what="the completion delivered")
                assert len(rows) == 1
                assert rows[0]["session_key"] == ready["session_key"]
                assert "exit code 3" in rows[0]["text"] and "crash-marker" in rows[0]["text"]
                for field in ("id", "kind", "state", "reason", "session_key", "session_id",
                              "job_id", "created_at", "delivered_at", "text"):
                    assert field in rows[0]

                async with http.get(f"{url}api/sessions/{ready['session_id']}/messages"
                                    ) as resp:
                    lines = (await resp.json())["messages"]
                finished = [m for m in lines if m["role"] == "notification"
                            and f"Job {job_ids[0]} finished" in m["text"]]
                assert len(finished) == 1

                code, out, _ = await run_cli("jobs", "--json", env=env)
                states = {j["id"]: j for j in json.loads(out)}
                assert states[job_ids[0]]["exit_code"] == 3
            finally:
                second.send_signal(signal.SIGTERM)
                assert await asyncio.wait_for(second.wait(), 20) == 0
    finally:
        if first.returncode is None:
            first.kill()
    # the watch job outlived both daemons; make sure nothing is left running
    code, out, _ = await run_cli("jobs", "--json", env=env)
    for job in json.loads(out):
        if job["state"] == "running" and job["pid"]:
            try:
                os.killpg(job["pid"], signal.SIGKILL)
            except ProcessLookupError:
                pass
