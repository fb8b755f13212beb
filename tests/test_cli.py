"""The ``homing`` command as a user runs it: real processes, real signals."""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path

import aiohttp
import pytest

from tests.helpers import eventually, running_command
from tests.real_daemon import HOMING, run_cli, web_home  # noqa: F401 - used by other tests
from tests.real_daemon import home_env as _env
from tests.real_daemon import listening_url as _listening_url


@pytest.mark.parametrize("stop_signal", [signal.SIGTERM, signal.SIGINT])
async def test_run_serves_the_web_chat_and_stops_cleanly(tmp_path: Path,
                                                         stop_signal: signal.Signals) -> None:
    env = web_home(tmp_path / "home")
    proc = await asyncio.create_subprocess_exec(*HOMING, "run", env=env,
                                                stderr=asyncio.subprocess.PIPE)
    try:
        url = await _listening_url(proc.stderr)
        async with aiohttp.ClientSession() as http, http.ws_connect(url + "ws") as ws:
            ready = await ws.receive_json(timeout=20)
            await ws.send_json({"type": "message", "text": "hello daemon"})
            assert "hello daemon" in (await ws.receive_json(timeout=20))["text"]
        proc.send_signal(stop_signal)
        assert await asyncio.wait_for(proc.wait(), 20) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()

    code, out, _ = await run_cli("sessions", "--json", env=env)
    assert code == 0
    assert [s["session_key"] for s in json.loads(out)] == [ready["session_key"]]
    code, out, _ = await run_cli("sessions", env=env)
    assert code == 0 and ready["session_id"] in out


async def test_run_refuses_a_bad_config_with_exit_2(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.yaml").write_text("platforms:\n  web:\n    portt: 1\n")
    code, _, err = await run_cli("run", env=_env(home))
    assert code == 2 and "platforms.web.portt" in err


async def test_an_enabled_platform_without_a_token_is_refused_by_name(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.yaml").write_text("platforms: {discord: {enabled: true}}\n")
    code, _, err = await run_cli("check-config", env=_env(home))
    assert code == 2 and "platforms.discord.token" in err


async def test_parked_notifications_are_listed_with_their_reason(tmp_path: Path) -> None:
    from gateway.daemon.assembly import running_gateway
    from gateway.delivery.notifications import NewNotification
    from gateway.words.return_address import ReturnAddress
    from gateway.words.route import Route
    from tests.conftest import make_config
    from tests.helpers import eventually_async

    home = tmp_path / "home"
    async with running_gateway(make_config(home)) as gw:
        await gw.outbox.produce([NewNotification(
            "stray:completion:0", "completion",
            ReturnAddress("agent:main:matrix:dm:1", "s-gone", Route("matrix", "dm", "1")),
            "a notice for a platform this gateway does not run", job_id="jstray")])

        async def parked() -> list:
            return await gw.outbox.list("parked")

        await eventually_async(parked, what="the parked notice")
    env = _env(home)
    code, out, _ = await run_cli("notifications", "--state", "parked", "--json", env=env)
    assert code == 0
    (row,) = json.loads(out)
    assert (row["reason"], row["job_id"], row["state"]) == ("unknown_platform", "jstray", "parked")
    code, out, _ = await run_cli("notifications", "--state", "parked", env=env)
    assert code == 0 and "unknown_platform" in out
    code, out, _ = await run_cli("notifications", "--state", "delivered", "--json", env=env)
    assert json.loads(out) == []


async def test_status_works_whether_or_not_the_daemon_runs(tmp_path: Path) -> None:
    from tests.helpers import eventually_async

    env = web_home(tmp_path / "home")
    code, out, _ = await run_cli("status", env=env)
    assert code == 0 and "daemon: not running" in out
    proc = await asyncio.create_subprocess_exec(*HOMING, "run", env=env,
                                                stderr=asyncio.subprocess.PIPE)
    try:
        url = await _listening_url(proc.stderr)
        async with aiohttp.ClientSession() as http, http.ws_connect(url + "ws") as ws:
            await ws.receive_json(timeout=20)

        async def running() -> dict:
            code, out, _ = await run_cli("status", "--json", env=env)
            report = json.loads(out)
            return report if report["daemon"]["running"] else {}

        report = await eventually_async(running, what="the running daemon in the status")
        assert report["daemon"]["pid"] == proc.pid
        assert report["daemon"]["platforms"] == {"web": True}
        assert report["live_sessions"] == 1 and report["running_jobs"] == 0
        assert report["pending_notifications"] == 0 and report["parked_notifications"] == {}
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 20) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
    code, out, _ = await run_cli("status", env=env)
    assert "daemon: not running (last seen" in out and "live sessions: 1" in out


async def test_a_configured_token_appears_nowhere_in_the_logs(tmp_path: Path) -> None:
    from tests.fakes.telegram_server import FakeTelegram

    async with FakeTelegram(token="424242:SECRET-token-value-0123456789abcd") as fake:
        home = tmp_path / "home"
        home.mkdir()
        (home / "config.yaml").write_text(
            "logging: {level: debug}\n"
            "platforms:\n  web: {port: 0, token: web-secret-123}\n"
            f"  telegram: {{enabled: true, token: '${{TG_TOKEN}}', base_url: '{fake.base_url}', "
            f"base_file_url: '{fake.base_file_url}', allowed_users: ['1']}}\n")
        env = {**_env(home), "TG_TOKEN": fake.token}
        proc = await asyncio.create_subprocess_exec(*HOMING, "run", env=env,
                                                    stderr=asyncio.subprocess.PIPE)
        url = await _listening_url(proc.stderr)
        fake.user_message(chat_id=1, text="/bg echo logged")
        await fake.wait_for_sent(2, timeout=20)
        async with aiohttp.ClientSession() as http:
            async with http.get(url + "api/sessions?token=wrong") as resp:
                assert resp.status == 401
        proc.send_signal(signal.SIGTERM)
        stderr = (await proc.stderr.read()).decode()
        assert await asyncio.wait_for(proc.wait(), 20) == 0
    log_file = (home / "logs" / "homing.log").read_text()
    assert "telegram_connected" in log_file and "job_started" in log_file
    for secret in (fake.token, "SECRET-token-value", "web-secret-123"):
        assert secret not in stderr and secret not in log_file


async def test_sigterm_exits_0_when_a_turn_outlasts_the_drain_timeout(tmp_path: Path) -> None:
    env = web_home(tmp_path / "home", "shutdown: {drain_timeout_seconds: 1}\n")
    proc = await asyncio.create_subprocess_exec(*HOMING, "run", env=env,
                                                stderr=asyncio.subprocess.PIPE)
    try:
        url = await _listening_url(proc.stderr)
        async with aiohttp.ClientSession() as http, http.ws_connect(url + "ws") as ws:
            await ws.receive_json(timeout=20)
            await ws.send_json({"type": "message", "text": "/run sleep 60"})
            await eventually(lambda: running_command("sleep 60", proc.pid),
                             what="the turn running its command")
            proc.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(proc.wait(), 30) == 0  # not held for 60 s
    finally:
        if proc.returncode is None:
            proc.kill()
