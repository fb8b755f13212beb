"""kill -9 (or SIGTERM) the real daemon while jobs run or a model call is under way; the
restarted one reports each job once, and answers and records each message once."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
from contextlib import AsyncExitStack
from pathlib import Path

import aiohttp
import pytest

from tests.fakes.openai_server import CallTools, FakeOpenAI, Hang, Say
from tests.fakes.telegram_server import FakeTelegram
from tests.helpers import eventually, eventually_async, running_command
from tests.kill_window import kill_window_rounds
from tests.real_daemon import (
    cli_json,
    daemon_settled,
    kill_leftover_jobs,
    run_cli,
    start_daemon,
    web_home,
)
from tests.test_telegram import ALICE, daemon_env
from tests.test_web import open_tab


async def test_a_job_finishing_across_a_kill_9_is_reported_once_in_its_conversation(
        tmp_path: Path) -> None:
    home = tmp_path / "home"
    env = web_home(home)
    first, url = await start_daemon(env)
    try:
        async with aiohttp.ClientSession() as http:
            async with http.ws_connect(url + "ws") as ws:
                ready = await ws.receive_json(timeout=20)
                await ws.send_json({"type": "message", "text":
                                    "/bg sleep 3; echo crash-marker; exit 3"})
                await ws.send_json({"type": "message", "text":
                                    "/watch tick for i in 1 2 3 4 5 6; do echo tick $i; "
                                    "sleep 1; done"})
                started = [(await ws.receive_json(timeout=20))["text"] for _ in range(2)]
            job_ids = [text.split()[2].rstrip(",;") for text in started]
            first.send_signal(signal.SIGKILL)
            await first.wait()

            second, url = await start_daemon(env)
            try:
                conversation = ready["conversation"]
                async with http.ws_connect(f"{url}ws?conversation={conversation}") as ws:
                    again = await ws.receive_json(timeout=20)
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


WATCH_EVERY_LINE = ("jobs: {watch: {cooldown_seconds: 0, max_notices: 100, max_lines: 100, "
                    "global_max_per_minute: 1000}}\n")


async def _job_rows(env: dict[str, str], job_id: str) -> list[dict]:
    return sorted((r for r in await cli_json("notifications", env=env) if r["job_id"] == job_id),
                  key=lambda r: r["id"])


@pytest.mark.parametrize("stop", [signal.SIGKILL, signal.SIGTERM], ids=["kill-9", "sigterm"])
async def test_a_watch_job_spanning_a_restart_reports_every_match_once_then_its_end(
        tmp_path: Path, stop: signal.Signals) -> None:
    home = tmp_path / "home"
    env = web_home(home, WATCH_EVERY_LINE)
    first, url = await start_daemon(env)
    try:
        async with aiohttp.ClientSession() as http:
            async with http.ws_connect(url + "ws") as ws:
                ready = await ws.receive_json(timeout=20)
                await ws.send_json({"type": "message", "text":
                                    "/watch 'line [0-9]+' for i in $(seq 1 30); do "
                                    "echo line $i; sleep 0.1; done; exit 3"})
                job_id = (await ws.receive_json(timeout=20))["text"].split()[2].rstrip(",;")
                live = await ws.receive_json(timeout=20)
                assert live["kind"] == "notification" and "line 1" in live["text"]
            first.send_signal(stop)
            await first.wait()
            # the job goes on, and ends, while no daemon runs
            await eventually(lambda: (home / "jobs" / job_id / "exit_code").exists(),
                             timeout=30, what="the job's end")
            second, url = await start_daemon(env)
            try:
                async def all_delivered() -> list[dict]:
                    rows = await _job_rows(env, job_id)
                    done = any(r["kind"] == "completion" for r in rows) and all(
                        r["state"] == "delivered" for r in rows)
                    return rows if done else []

                rows = await eventually_async(all_delivered, timeout=20, what="every notice")
                watch = [r for r in rows if r["kind"] == "watch_match"]
                (completion,) = [r for r in rows if r["kind"] == "completion"]
                assert rows[-1] is completion  # after the last watch notice
                assert "exit code 3" in completion["text"] and "line 30" in completion["text"]
                reported = [int(n) for r in watch
                            for n in re.findall(r"^line (\d+)$", r["text"], re.M)]
                assert sorted(reported) == list(range(1, 31))  # each line, once
                assert {r["session_key"] for r in rows} == {ready["session_key"]}
                # and each was sent once: the conversation's transcript says so
                async with http.get(f"{url}api/sessions/{ready['session_id']}/messages") as r:
                    lines = [m["text"] for m in (await r.json())["messages"]
                             if m["role"] == "notification"]
                sent = [int(n) for t in lines if "output matched" in t
                        for n in re.findall(r"^line (\d+)$", t, re.M)]
                assert sorted(sent) == list(range(1, 31))
                assert sum(f"Job {job_id} finished" in t for t in lines) == 1
            finally:
                second.send_signal(signal.SIGTERM)
                assert await asyncio.wait_for(second.wait(), 20) == 0
    finally:
        if first.returncode is None:
            first.kill()
        await kill_leftover_jobs(env)


async def test_kill_9_moments_after_bg_loses_no_job_and_doubles_none(tmp_path: Path) -> None:
    env = web_home(tmp_path / "home")
    tally = await kill_window_rounds(env, rounds=6, jobs_per_round=3, seed=12)
    assert tally.lost == 0 and tally.duplicates == 0 and tally.missing == 0, tally
    assert tally.jobs == tally.reported + tally.not_started and tally.jobs > 0
    assert tally.wrong == 0, tally  # every report carried the job's real exit code and output


async def test_a_delegation_started_right_after_a_restart_is_never_reported_lost(
        tmp_path: Path) -> None:
    env = web_home(tmp_path / "home")
    first, url = await start_daemon(env)
    try:
        async with aiohttp.ClientSession() as http:
            async with http.ws_connect(url + "ws?conversation=delegating") as ws:
                await ws.receive_json(timeout=20)
                await ws.send_json({"type": "message", "text": "/delegate sleep 30"})
                old = (await ws.receive_json(timeout=20))["text"].split()[2].rstrip(";")
            first.send_signal(signal.SIGKILL)
            await first.wait()
            second, url = await start_daemon(env)
            try:  # at once: the web chat listens only after recovery
                async with http.ws_connect(url + "ws?conversation=delegating") as ws:
                    await ws.receive_json(timeout=20)
                    await ws.send_json({"type": "message",
                                        "text": "/delegate sleep 1; echo second-result"})
                    text = ""
                    while not text.startswith("Delegated as"):
                        text = (await ws.receive_json(timeout=30))["text"]
                new = text.split()[2].rstrip(";")

                async def results() -> list[dict]:
                    rows = [r for r in await cli_json("notifications", env=env)
                            if r["kind"] == "async_delegation" and r["state"] == "delivered"]
                    return rows if len(rows) >= 2 else []

                rows = await eventually_async(results, timeout=30, what="both results")
                assert sorted(r["job_id"] for r in rows) == sorted([old, new])
                by_id = {r["job_id"]: r["text"] for r in rows}
                assert "was lost" in by_id[old]
                assert "finished" in by_id[new] and "second-result" in by_id[new]
                assert "lost" not in by_id[new]
            finally:
                second.send_signal(signal.SIGTERM)
                assert await asyncio.wait_for(second.wait(), 20) == 0
    finally:
        if first.returncode is None:
            first.kill()


@pytest.mark.parametrize("platform", ["web", "telegram"])
async def test_a_message_replayed_after_a_kill_9_mid_model_call_is_written_once(
        tmp_path: Path, model: FakeOpenAI, http: aiohttp.ClientSession, platform: str
) -> None:
    """Journaled, its model call under way when the daemon died: the next life answers
    it once, and holds it once — in the transcript people read and in what the model
    is asked (not the dead life's copy and the replay's, merged into one user turn)."""
    model.script(Hang(60))  # the first life's call, held until that life is gone
    model.brain = lambda req: Say("answered once")
    agent = f"agent: {{backend: openai, base_url: '{model.base_url}', model: fake-model}}\n"
    async with AsyncExitStack() as stack:
        telegram = None
        if platform == "telegram":
            telegram = await stack.enter_async_context(FakeTelegram())
            env = daemon_env(tmp_path / "home", telegram)
            with (tmp_path / "home" / "config.yaml").open("a") as config:
                config.write(agent)
        else:
            env = web_home(tmp_path / "home", agent)
        first, url = await start_daemon(env)
        second = None
        try:
            if telegram is not None:
                telegram.user_message(chat_id=ALICE, text="keep this")
            else:
                tab = await open_tab(http, url.rstrip("/"), "replayed")
                await tab.say("keep this")
            await eventually(lambda: model.requests, timeout=20, what="the model call")
            first.send_signal(signal.SIGKILL)
            await first.wait()
            second, url = await start_daemon(env)

            async def transcript() -> list[tuple[str, str]]:
                async with http.get(f"{url}api/sessions?archived=include") as resp:
                    sessions = [s for s in (await resp.json())["sessions"]
                                if s["platform"] == platform]
                lines = []
                for session in sessions:
                    async with http.get(f"{url}api/sessions/{session['id']}/messages") as r:
                        lines += [(m["role"], m["text"]) for m in (await r.json())["messages"]]
                return lines if ("reply", "answered once") in lines else []

            await eventually_async(transcript, timeout=30, what="the replayed message answered")
            await daemon_settled(env)
            lines = await transcript()
            assert [t for role, t in lines if role == "user"] == ["keep this"]
            assert [t for role, t in lines if role == "reply"] == ["answered once"]
            held, replayed = model.requests  # the dead life's call, then the replay's
            assert held.texts("user") == ["keep this"]
            assert replayed.texts("user") == ["keep this"]  # once, not "keep this\n\nkeep this"
            if telegram is not None:
                assert [s.text for s in telegram.sent] == ["answered once"]
        finally:
            for proc in (first, second):
                if proc is not None and proc.returncode is None:
                    proc.terminate()
                    await proc.wait()


async def test_a_steered_message_replayed_after_a_kill_9_is_written_once(
        tmp_path: Path, model: FakeOpenAI, http: aiohttp.ClientSession) -> None:
    """``agent.busy: steer``: a message given to the turn under way is stored with its
    journal entry. The turn dies (kill -9) before answering it; the next life answers
    it on its own, and the transcript and the model's history still hold it once."""
    gate = tmp_path / "gate"
    command = f"while [ ! -e {gate} ]; do sleep 0.05; done; echo deployed"
    # the first life's turn: a command, then (steered) a call held until it is gone
    model.script(CallTools([("terminal", {"command": command})]), Hang(60))
    model.brain = lambda req: Say("answered once")
    env = web_home(tmp_path / "home",
                   f"agent: {{backend: openai, base_url: '{model.base_url}', "
                   "model: fake-model, busy: steer}\n")
    first, url = await start_daemon(env)
    second = None

    async def user_lines(base: str) -> list[str]:
        async with http.get(f"{base}api/conversations/steered/messages") as resp:
            return [m["text"] for m in (await resp.json())["messages"] if m["role"] == "user"]

    try:
        tab = await open_tab(http, url.rstrip("/"), "steered")
        await tab.say("deploy it")
        await eventually(lambda: running_command(command, first.pid), 20, "the command")
        await tab.say("to staging, please")  # given to the turn before its next call
        gate.touch()
        await eventually(lambda: len(model.requests) == 2, 20, "the steered call")
        assert await user_lines(url) == ["deploy it", "to staging, please"]
        first.send_signal(signal.SIGKILL)
        await first.wait()
        second, url = await start_daemon(env)

        async def answered() -> list[str]:
            async with http.get(f"{url}api/conversations/steered/messages") as resp:
                return [m["text"] for m in (await resp.json())["messages"]
                        if m["text"] == "answered once"]

        await eventually_async(answered, 30, "the steered message answered")
        await daemon_settled(env)
        assert await user_lines(url) == ["deploy it", "to staging, please"]
        assert model.requests[1].texts("user") == ["deploy it", "to staging, please"]
        (replayed,) = model.requests[2:]
        assert replayed.texts("user") == ["deploy it", "to staging, please"]  # not twice
    finally:
        gate.touch()
        for proc in (first, second):
            if proc is not None and proc.returncode is None:
                proc.terminate()
                await proc.wait()
