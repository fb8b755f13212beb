"""Two instances of the daemon on one PostgreSQL store, side by side in this process.

Each has its own name, home and web port, as on two hosts; what they share is the
store. (Killing one, and the failover of the Telegram poller, is in
tests/test_pg_failover.py, with real processes.)
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path

import aiohttp
import pytest

import gateway.formatting.web_html as web_html
from gateway.daemon.assembly import Gateway, running_gateway
from gateway.platforms.web.fanout import PAYLOAD_BYTES
from tests.approval_support import runs as marker_runs
from tests.conftest import make_config
from tests.fakes.openai_server import FakeOpenAI
from tests.helpers import eventually_async
from tests.memory_platform import MemoryAdapter
from tests.model_support import model_config
from tests.real_daemon import home_env, run_cli
from tests.test_approvals import choose, next_of
from tests.test_schedules import CHAT, START, Clock, move_to, runs, say, schedule_id
from tests.test_web import Tab, open_tab


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


def _config(home: Path, url: str, name: str, **more: object):
    return make_config(home, store__url=url, instance__name=name, schedules__timezone="UTC",
                       **more)


async def test_two_instances_run_side_by_side_and_status_lists_both(
        tmp_path: Path, pg_fresh_url: str, http: aiohttp.ClientSession) -> None:
    async with running_gateway(_config(tmp_path / "a", pg_fresh_url, "vps1")), \
            running_gateway(_config(tmp_path / "b", pg_fresh_url, "vps2")) as two:
        tab = await open_tab(http, _base(two))
        await tab.say("/bg sleep 30")  # a job on the second instance
        started = (await tab.frame())["text"]
        job_id = re.search(r"Started job (j[0-9a-f]+)", started)[1]  # type: ignore[index]
        config = tmp_path / "a" / "config.yaml"
        config.write_text(f"store: {{url: '{pg_fresh_url}'}}\n")
        code, out, err = await run_cli("status", "--json", "--config", str(config),
                                       env=home_env(tmp_path / "a"))
        assert code == 0, err
        rows = json.loads(out)["instances"]
        assert [(r["name"], r["state"], r["running_jobs"]) for r in rows] == [
            ("vps1", "live", 0), ("vps2", "live", 1)]
        code, out, err = await run_cli("status", "--config", str(config),
                                       env=home_env(tmp_path / "a"))
        assert "vps2  epoch 1  live" in out and "1 running jobs" in out, out
        await tab.say(f"/kill {job_id}")
        assert f"Stopped job {job_id}" in (await tab.frame(10))["text"]


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


async def test_a_long_streamed_reply_reaches_the_other_instance_formatted_in_small_frames(
        tmp_path: Path, pg_fresh_url: str, model: FakeOpenAI,
        http: aiohttp.ClientSession) -> None:
    """Deltas go to the other instances without their HTML (the whole reply so far,
    past a notification's payload here): the tab there still gets each formatted as
    the tab where it is written does, and not one frame waits in web_frames."""
    from tests.fakes.openai_server import Say
    from tests.previews_support import ANSWERS

    answer = "\n\n".join(ANSWERS * 6)
    assert len(web_html.render(answer).encode()) > PAYLOAD_BYTES
    model.chunk_delay = 0.005
    model.brain = lambda req: Say(answer)
    configs = [model_config(tmp_path / name, model, store__url=pg_fresh_url,
                            instance__name=name) for name in ("vps1", "vps2")]
    async with running_gateway(configs[0]) as one, running_gateway(configs[1]) as two:
        here = await open_tab(http, _base(one))
        there = await open_tab(http, _base(two), here.ready["conversation"])
        await here.say("the long report")
        frames: dict[str, list[dict[str, object]]] = {"here": [], "there": []}
        for name, tab in (("here", here), ("there", there)):
            while not frames[name] or frames[name][-1]["type"] != "message":
                frames[name].append(await tab.frame(20, deltas=True))
        (waited,) = await one.runner.store.db.fetchone("SELECT count(*) FROM web_frames")
    written, read = frames["here"][:-1], frames["there"][:-1]
    assert len(written) > 3 and [d["text"] for d in read] == [d["text"] for d in written]
    assert [d["html"] for d in read] == [d["html"] for d in written]
    assert len(str(written[-1]["html"]).encode()) > PAYLOAD_BYTES
    assert frames["there"][-1]["text"] == answer
    assert waited == 1  # the final message only: each delta went as a notification


async def test_a_job_on_one_host_is_stopped_and_waited_for_from_a_tab_on_the_other(
        tmp_path: Path, pg_fresh_url: str, http: aiohttp.ClientSession) -> None:
    """The job runs where it was started; a tab of its conversation on the other
    instance asks its instance to stop it (/kill), and is told where its output is."""
    async with running_gateway(_config(tmp_path / "a", pg_fresh_url, "vps1")) as one, \
            running_gateway(_config(tmp_path / "b", pg_fresh_url, "vps2")) as two:
        first = await open_tab(http, _base(one))
        second = await open_tab(http, _base(two), first.ready["conversation"])
        marker = tmp_path / "never"
        await first.say(f"/bg sleep 30; touch {marker}")
        started = await _text_in(second, "Started job")
        job_id = re.search(r"Started job (j[0-9a-f]+)", started)[1]  # type: ignore[index]
        assert one.jobs.here(job_id) and not two.jobs.here(job_id)

        await second.say(f"/log {job_id}")
        log_reply = await _text_in(second, job_id)
        assert "on the host of instance vps1" in log_reply, log_reply
        await second.say(f"/kill {job_id}")
        assert f"Stopped job {job_id}" in await _text_in(second, "job")
        ended = await one.jobs.get(job_id)
        assert ended is not None and ended.state != "running" and ended.killed
        assert "killed" in await _text_in(first, f"Job {job_id}")  # its end, reported
        assert not one.jobs.here(job_id) and not marker.exists()


async def _text_in(tab: Tab, text: str) -> str:
    """The next message frame on ``tab`` that says ``text`` (others are passed over)."""
    while True:
        frame = await tab.frame(15)
        if frame["type"] == "message" and text in frame["text"]:
            return str(frame["text"])


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


async def test_an_approval_pressed_on_the_other_instance_runs_in_the_turn_that_asked(
        tmp_path: Path, pg_fresh_url: str, model: FakeOpenAI, marker: Path,
        http: aiohttp.ClientSession) -> None:
    """The turn waits in one instance's memory; the press may come in through another
    (its tab, its platform connection): the waiting turn runs the command, once."""
    configs = [model_config(tmp_path / name, model, store__url=pg_fresh_url,
                            instance__name=name) for name in ("vps1", "vps2")]
    async with running_gateway(configs[0]) as one, running_gateway(configs[1]) as two:
        asking = await open_tab(http, _base(one))
        pressing = await open_tab(http, _base(two), asking.ready["conversation"])
        await asking.say("clean up")
        asked = await next_of(pressing, "approval")  # shown on the other instance too
        assert marker_runs(marker) == 0
        await choose(pressing, asked["id"], "once")
        for tab in (asking, pressing):
            decided = await next_of(tab, "approval_decided")
            assert (decided["id"], decided["state"]) == (asked["id"], "approved")
        reply = await next_of(asking, "message", timeout=30)  # the turn went on
        assert reply["text"].startswith("tool said: ")
        assert json.loads(reply["text"].removeprefix("tool said: "))["exit"] == "exit code 0"
        record = await one.runner.approvals.get(asked["id"])  # type: ignore[union-attr]
        assert record is not None and record.ran == "run in the turn"
        assert marker_runs(marker) == 1


async def test_a_session_ended_on_one_instance_is_not_live_on_the_other(
        tmp_path: Path, pg_fresh_url: str, http: aiohttp.ClientSession) -> None:
    async with running_gateway(_config(tmp_path / "a", pg_fresh_url, "vps1")) as one, \
            running_gateway(_config(tmp_path / "b", pg_fresh_url, "vps2")) as two:
        here = await open_tab(http, _base(one))
        there = await open_tab(http, _base(two), here.ready["conversation"])  # cached there
        old, key = here.ready["session_id"], here.ready["session_key"]
        assert two.store.is_live_session(old)
        await here.say("/new")
        await here.frame()

        async def forgotten() -> bool:
            return not two.store.is_live_session(old)

        await eventually_async(forgotten, what="the other instance to forget the session")
        live = await two.store.live_session(key)
        assert live is not None and live.id != old
        assert (await there.frame())["text"].startswith("Started a new session")


async def test_a_notice_waits_for_the_turn_another_instance_has_in_hand(
        tmp_path: Path, pg_fresh_url: str, http: aiohttp.ClientSession) -> None:
    """The busy owner keeps its mail across instances: the second instance does not
    deliver into a conversation while the first is in the middle of its turn."""
    async with running_gateway(_config(tmp_path / "a", pg_fresh_url, "vps1")) as one, \
            running_gateway(_config(tmp_path / "b", pg_fresh_url, "vps2")):
        tab = await open_tab(http, _base(one))
        await tab.say("/bg sleep 1; echo marker-A")
        started = (await tab.frame())["text"]
        assert "Started job" in started
        job_id = started.split()[2].rstrip(",;")
        await one.router.stop()  # only the second instance routes from here
        go_on = tmp_path / "go-on"  # mid-turn when the job ends, until this is there
        await tab.say(f"/run while [ ! -e {go_on} ]; do sleep 0.05; done; echo slow-done")

        async def notice_waiting() -> bool:  # committed, and not taken by the second
            return any(n.job_id == job_id for n in await one.outbox.list("pending"))

        await eventually_async(notice_waiting, timeout=30, what="the job's notice")
        await tab.no_frame(0.3)  # the second instance leaves it while the turn goes on
        go_on.touch()
        first, second = await tab.frame(15), await tab.frame(15)
        assert (first["kind"], "slow-done" in first["text"]) == ("reply", True), first
        assert (second["kind"], "marker-A" in second["text"]) == ("notification", True)
