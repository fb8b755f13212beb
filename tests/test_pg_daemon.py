"""The whole daemon with its state on PostgreSQL (``store.url``), one instance.

The tests are the SQLite suite's own, imported: only the ``gateway`` fixture
differs, so each one proves the same behaviour on the second backend — jobs
reporting to their topics, watches, labelled notices after ``/new``, parking,
a busy owner's notices, schedules at their times, and runs across a restart.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from gateway.daemon.assembly import Gateway, running_gateway
from tests.conftest import make_config
from tests.helpers import eventually_async
from tests.memory_platform import MemoryAdapter
from tests.pg_cluster import PgCluster
from tests.real_daemon import home_env, start_daemon
from tests.test_jobs import (  # noqa: F401  (collected here with the PostgreSQL gateway)
    test_a_busy_owner_keeps_its_notice_until_its_turn_ends,
    test_a_job_started_before_new_reports_as_a_labelled_notice_without_a_turn,
    test_a_watch_reports_while_running_then_disables_then_completes_once,
    test_notices_go_to_the_topic_and_anchor_that_started_each_job,
    test_unprovable_notifications_are_parked_and_sent_nowhere,
)
from tests.test_schedules import (  # noqa: F401
    START,
    Clock,
    test_cron_and_at_schedules_run_at_their_times_and_a_one_shot_only_once,
    test_every_reports_each_run_in_its_topic_under_its_message,
    test_schedules_lists_pauses_resumes_runs_now_and_removes,
)


@pytest.fixture
def clock() -> Clock:
    return Clock(START)


@pytest.fixture
async def gateway(tmp_path: Path, pg_fresh_url: str, clock: Clock
                  ) -> AsyncIterator[tuple[Gateway, MemoryAdapter]]:
    adapter = MemoryAdapter("memory", send_delay=0.002)
    config = make_config(tmp_path / "home", store__url=pg_fresh_url, schedules__timezone="UTC",
                         jobs__watch__cooldown_seconds=2, jobs__watch__max_notices=3)
    async with running_gateway(config, [adapter], clock=clock) as gw:
        yield gw, adapter


@asynccontextmanager
async def web_socket(gw: Gateway) -> AsyncIterator[aiohttp.ClientWebSocketResponse]:
    """A web chat tab's socket, past its ``ready`` frame."""
    port = gw.runner.adapters["web"].port  # type: ignore[attr-defined]
    async with aiohttp.ClientSession() as http, \
            http.ws_connect(f"http://127.0.0.1:{port}/ws") as ws:
        await ws.receive_json(timeout=20)
        yield ws


async def say(ws: aiohttp.ClientWebSocketResponse, text: str, timeout: float = 5
              ) -> dict[str, Any]:
    await ws.send_json({"type": "message", "text": text})
    frame: dict[str, Any] = await ws.receive_json(timeout=timeout)
    return frame


async def test_the_web_chat_answers_and_nothing_is_written_to_the_home(
        tmp_path: Path, pg_fresh_url: str) -> None:
    home = tmp_path / "home"
    async with running_gateway(make_config(home, store__url=pg_fresh_url)) as gw:
        async with web_socket(gw) as ws:
            assert "hello postgres" in (await say(ws, "hello postgres"))["text"]
        async def both_recorded() -> bool:  # transcript lines are written behind
            await gw.store.db.flush()
            (count,) = await gw.store.db.fetchone("SELECT COUNT(*) FROM messages")
            return bool(count >= 2)  # the message and its answer, in PostgreSQL

        await eventually_async(both_recorded, what="the message and its answer recorded")
    assert not (home / "state.db").exists()


async def test_a_notice_committed_elsewhere_wakes_the_router_without_a_poll(
        tmp_path: Path, pg_fresh_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another process (or instance) commits a notice: PostgreSQL's NOTIFY wakes this
    router at once. The slow poll is set to an hour, so a delivery at all proves it."""
    import gateway.delivery.router as router_module
    from gateway.delivery.notifications import NewNotification
    from gateway.delivery.outbox import Outbox
    from gateway.store.postgres import PgDatabase
    from gateway.words.return_address import ReturnAddress
    from gateway.words.route import Route
    from tests.helpers import eventually

    monkeypatch.setattr(router_module, "IDLE_POLL_SECONDS", 3600.0)
    adapter = MemoryAdapter("memory")
    config = make_config(tmp_path / "home", store__url=pg_fresh_url)
    async with running_gateway(config, [adapter]) as gw:
        route = Route("memory", "group", "-100", thread_id="42", user_id="1")
        key = gw.runner.session_key_for(route)
        session = await gw.store.get_or_create(key, route)
        await gw.router.wait_idle()
        other = PgDatabase(pg_fresh_url)  # not this daemon's: its commits wake nobody here
        await other.open()
        try:
            await Outbox(other).produce([NewNotification(
                "elsewhere:completion:0", "completion", ReturnAddress(key, session.id, route),
                "made by another instance")])
        finally:
            await other.close()
        sent = await eventually(
            lambda: [m for m in adapter.sent if "made by another instance" in m.text],
            what="the notice from elsewhere")
        assert sent[0].route.thread_id == "42"


async def test_the_daemon_carries_on_after_postgresql_restarts(
        tmp_path: Path, pg_cluster: PgCluster, pg_fresh_url: str) -> None:
    """An upgrade of the server's package restarts it: every connection is cut, and the
    next reads and writes go on new ones."""
    async with running_gateway(make_config(tmp_path / "home", store__url=pg_fresh_url)) as gw:
        async with web_socket(gw) as ws:
            assert "before the restart" in (await say(ws, "before the restart"))["text"]
            await asyncio.to_thread(pg_cluster.restart)
            reply = await say(ws, "after the restart", timeout=30)
            assert "after the restart" in reply["text"], reply

        async def recorded() -> bool:
            await gw.store.db.flush()
            rows = await gw.store.db.fetchall("SELECT text FROM messages")
            return any("after the restart" in text for (text,) in rows)

        await eventually_async(recorded, what="the message after the restart recorded")
        assert gw.instance is not None and gw.instance.alive


async def test_a_daemon_whose_name_another_process_took_stops_for_its_restart(
        tmp_path: Path, pg_fresh_url: str) -> None:
    """Two processes under one instance name: the older life ends at its next renewal and
    exits 1, so that systemd starts it again (under a new epoch), never 2."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.yaml").write_text(
        f"store: {{url: '{pg_fresh_url}'}}\ninstance: {{name: vps1}}\n"
        "cluster: {lease_seconds: 3, failover_seconds: 3}\nplatforms: {web: {port: 0}}\n")
    env = home_env(home)
    first, _ = await start_daemon(env)
    second, _ = await start_daemon(env)
    try:
        code = await asyncio.wait_for(first.wait(), 20)
        assert code == 1
        assert second.returncode is None  # the newer life goes on
    finally:
        for proc in (first, second):
            if proc.returncode is None:
                proc.terminate()
                await proc.wait()
    logged = (home / "logs" / "homing.log").read_text()
    assert '"event": "instance_ended_stopping"' in logged
    assert "another process started as vps1" in logged
