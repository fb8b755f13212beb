"""``kill -9`` of the real daemon within milliseconds of ``/bg``, round after round.

Shared by ``tests/test_crash_recovery.py`` (a few rounds) and
``bench/kill_window.py`` (many). Each round starts ``homing run``, sends a few
``/bg`` jobs whose exit code and output are known from their own command, and
kills the daemon a random 0–40 ms later — often between a job's row and its
process, or its process and its pid. A last daemon then reports everything,
and each job is checked: reported once with its real exit code and output, or
(when it never got to run) told once that it did not start.
"""

from __future__ import annotations

import asyncio
import random
import re
import signal
from dataclasses import dataclass

import aiohttp

from tests.real_daemon import cli_json, daemon_settled, start_daemon

CONVERSATION = "kill-window"


@dataclass
class Tally:
    kills: int = 0
    jobs: int = 0
    reported: int = 0  # once, with its real exit code and output
    not_started: int = 0  # told once that it did not start
    lost: int = 0  # reported as gone without an exit code
    duplicates: int = 0  # sent more than once
    missing: int = 0  # never reported
    wrong: int = 0  # reported with the wrong exit code or without its output


async def kill_window_rounds(env: dict[str, str], *, rounds: int, jobs_per_round: int,
                             seed: int, max_delay: float = 0.04) -> Tally:
    rng = random.Random(seed)
    tally = Tally()
    number = 0
    async with aiohttp.ClientSession() as http:
        for _ in range(rounds):
            daemon, url = await start_daemon(env)
            killed = False
            try:
                async with http.ws_connect(f"{url}ws?conversation={CONVERSATION}") as ws:
                    await ws.receive_json(timeout=30)
                    for _ in range(jobs_per_round):
                        await ws.send_json({"type": "message", "text":
                                            f"/bg sleep 0.3; echo out-{number}; "
                                            f"exit {number % 7}"})
                        number += 1
                    # the kill lands at a random moment of the jobs' start: the scenario
                    await asyncio.sleep(rng.uniform(0, max_delay))
                    daemon.send_signal(signal.SIGKILL)
                    killed = True
            finally:
                # once only: a second signal makes the library poll, and reap, the dead
                # daemon behind asyncio's back
                if not killed:
                    daemon.send_signal(signal.SIGKILL)
                await daemon.wait()
                tally.kills += 1
        daemon, url = await start_daemon(env)
        try:
            await daemon_settled(env, timeout=60)  # every job ended, every notice out
            await _count(env, http, url, tally)
        finally:
            daemon.send_signal(signal.SIGTERM)
            await asyncio.wait_for(daemon.wait(), 20)
    return tally


async def _count(env: dict[str, str], http: aiohttp.ClientSession, url: str,
                 tally: Tally) -> None:
    jobs = await cli_json("jobs", env=env)
    notices = await cli_json("notifications", env=env)
    async with http.get(f"{url}api/sessions?archived=include") as resp:
        sessions = [s for s in (await resp.json())["sessions"]
                    if s["conversation"] == CONVERSATION]
    sent: list[str] = []
    for session in sessions:
        async with http.get(f"{url}api/sessions/{session['id']}/messages") as resp:
            sent += [m["text"] for m in (await resp.json())["messages"]
                     if m["role"] == "notification"]
    for job in jobs:
        tally.jobs += 1
        number, code = map(int, re.search(r"out-(\d+); exit (\d+)", job["command"]).groups())
        rows = [n for n in notices if n["job_id"] == job["id"] and n["kind"] == "completion"]
        times_sent = sum(f"Job {job['id']} " in text for text in sent)
        if not rows or times_sent == 0:
            tally.missing += 1
            continue
        if len(rows) > 1 or times_sent > 1:
            tally.duplicates += 1
        text = rows[0]["text"]
        if job["state"] == "failed" and "did not start" in text:
            tally.not_started += 1
        elif job["state"] == "lost":
            tally.lost += 1
        elif f"finished: exit code {code} " in text and f"out-{number}" in text:
            tally.reported += 1
        else:
            tally.wrong += 1
