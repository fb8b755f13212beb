"""Two instances of the daemon on one PostgreSQL store, side by side in this process.

Each has its own name, home and web port, as on two hosts; what they share is the
store. (Killing one, and the failover of the Telegram poller, is in
tests/test_pg_failover.py, with real processes.)
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path

import aiohttp
import pytest

from gateway.daemon import Gateway, running_gateway
from gateway.platforms.memory import MemoryAdapter
from gateway.platforms.web_fanout import PAYLOAD_BYTES

from .conftest import make_config
from .helpers import eventually_async
from .real_daemon import home_env, run_cli
from .test_schedules import CHAT, START, Clock, move_to, runs, say, schedule_id
from .test_web import Tab, open_tab


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


def _config(home: Path, url: str, name: str, **more: object):
    return make_config(home, store__url=url, instance__name=name, schedules__timezone="UTC",
                       **more)


async def test_two_instances_run_side_by_side_and_status_lists_both(
        tmp_path: Path, pg_fresh_url: str) -> None:
    async with running_gateway(_config(tmp_path / "a", pg_fresh_url, "vps1")), \
            running_gateway(_config(tmp_path / "b", pg_fresh_url, "vps2")):
        config = tmp_path / "a" / "config.yaml"
        config.write_text(f"store: {{url: '{pg_fresh_url}'}}\n")
        code, out, err = await run_cli("status", "--json", "--config", str(config),
                                       env=home_env(tmp_path / "a"))
        assert code == 0, err
        rows = json.loads(out)["instances"]
        assert [(r["name"], r["state"]) for r in rows] == [("vps1", "live"), ("vps2", "live")]


async def test_two_tabs_of_one_conversation_on_two_instances_both_get_every_frame(
        tmp_path: Path, pg_fresh_url: str, http: aiohttp.ClientSession) -> None:
    async with running_gateway(_config(tmp_path / "a", pg_fresh_url, "vps1")) as one, \
            running_gateway(_config(tmp_path / "b", pg_fresh_url, "vps2")) as two:
        here, there = _base(one), _base(two)
        first = await open_tab(http, here, echo="1")
        conversation = first.ready["conversation"]
        second = await open_tab(http, there, conversation, echo="1")
        other = await open_tab(http, there)  # another conversation on the second
        assert second.ready["session_id"] == first.ready["session_id"]

        await first.say("hello from the first host")
        echo = await second.frame()
        assert (echo["kind"], echo["text"]) == ("user", "hello from the first host")
        for tab in (first, second):  # the reply, made on the first, reaches both
            reply = await tab.frame()
            assert (reply["kind"], reply["session_id"]) == ("reply", first.ready["session_id"])
            assert "hello from the first host" in reply["text"]

        big = "x" * (PAYLOAD_BYTES + 1000)  # past a notification's payload: via the table
        await second.say(big)
        assert (await first.frame())["text"] == big  # the echo, made on the second
        for tab in (first, second):
            assert (await tab.frame())["kind"] == "reply"

        await first.say("/bg echo job-done-marker")  # its notice: whichever routes it
        assert (await second.frame())["kind"] == "user"
        await _both_get(first, second, "Started job")
        await _both_get(first, second, "job-done-marker")
        await other.no_frame()
        await first.no_frame(0.05)
        await second.no_frame(0.05)


async def _both_get(first: Tab, second: Tab, text: str) -> None:
    for tab in (first, second):
        frame = await tab.frame(10)
        assert frame["type"] == "message" and text in frame["text"], frame


def _base(gw: Gateway) -> str:
    return f"http://127.0.0.1:{gw.runner.adapters['web'].port}"  # type: ignore[attr-defined]


async def test_a_scheduled_job_runs_once_per_due_time_with_two_instances(
        tmp_path: Path, pg_fresh_url: str) -> None:
    clock = Clock(START)
    adapters = [MemoryAdapter("memory"), MemoryAdapter("memory")]
    async with AsyncExitStack() as stack:
        gateways = [await stack.enter_async_context(running_gateway(
            _config(tmp_path / name, pg_fresh_url, name), [adapter], clock=clock))
            for name, adapter in zip(("vps1", "vps2"), adapters, strict=True)]
        sid = schedule_id(await say(adapters[0], "/every 10m echo run-$HOMING_JOB_ID", CHAT))
        for minute in (10, 20, 30, 40, 50):
            clock.now = START + minute * 60 + 1
            for gw in gateways:  # both tick at every due time
                await move_to(gw, clock, clock.now)

            async def told(count: int = minute // 10) -> bool:
                return sum(len(runs(a, sid)) for a in adapters) >= count

            await eventually_async(told, timeout=20, what=f"the run of minute {minute}")
        for gw in gateways:
            await gw.router.settle()
        all_runs = [m for a in adapters for m in runs(a, sid)]
        assert len(all_runs) == 5, [m.text for m in all_runs]
        started = await gateways[0].store.db.fetchall(
            "SELECT scheduled_for FROM schedule_runs WHERE schedule_id = ?", (sid,))
        assert len(started) == len({row[0] for row in started}) == 5
        jobs = {line.split("run-")[1].split()[0] for m in all_runs for line in m.text.splitlines()
                if line.startswith("run-")}
        assert len(jobs) == 5  # five jobs, each run on one instance
