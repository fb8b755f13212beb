"""The invariants where a one-line slip used to pass the whole suite (issue 18).

Each test goes through the real store, outbox, router and job manager (the
in-memory platform, or the real web chat, stands in for the outside world),
crashes at the exact point an invariant is about where it has one, restarts on
the same state directory, and counts sends only once the router is idle and
the notice has its outcome. The router's idle poll and every job-following
timer are an hour long here: whatever arrives at all was woken for, not polled
for (invariant 8), and no assertion is about time.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import aiohttp
import pytest

import gateway.delivery.router as router_module
import tools.job_output as job_output
import tools.job_process as job_process
from gateway.config.settings import Config
from gateway.daemon.assembly import Gateway, running_gateway
from gateway.delivery.notifications import NewNotification, Notification
from gateway.platforms.web.adapter import WebAdapter
from gateway.words.return_address import ReturnAddress
from gateway.words.route import Route
from tests.conftest import make_config
from tests.faults import CrashPoint, Gate, KilledAt, crash_on_write, inserts_notice
from tests.helpers import eventually, eventually_async
from tests.memory_platform import MemoryAdapter, SentMessage
from tests.test_web import open_tab

CHAT = Route("memory", "dm", "1", user_id="1")
KEY = "agent:main:memory:dm:1"
HOUR = 3600.0


@pytest.fixture(autouse=True)
def hour_long_polls(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(router_module, "IDLE_POLL_SECONDS", HOUR)
    monkeypatch.setattr(job_process, "POLL_SECONDS", HOUR)
    monkeypatch.setattr(job_output, "FALLBACK_SECONDS", HOUR)


@pytest.fixture
def memory_config(tmp_path: Path) -> Config:
    return make_config(tmp_path / "home", platforms__web__enabled=False,
                       jobs__watch__cooldown_seconds=0)


@asynccontextmanager
async def gateway(config: Config, adapter: MemoryAdapter) -> AsyncIterator[Gateway]:
    """One run of the gateway; a job a failed test left waiting on a gate is killed."""
    async with running_gateway(config, [adapter]) as gw:
        try:
            yield gw
        finally:
            for job in await gw.jobs.list():
                if job.state == "running" and job.pid:
                    job_process.signal_group(job.pid, signal.SIGKILL)


async def start_job(adapter: MemoryAdapter, text: str) -> str:
    assert await adapter.receive(text, CHAT) == "handled"
    reply = adapter.sent_to(CHAT)[-1].text
    assert reply.startswith("Started job"), reply
    return reply.split()[2].rstrip(",;")


def notices_of(adapter: MemoryAdapter, job_id: str) -> list[SentMessage]:
    return [m for m in adapter.sent if m.kind == "notification" and f"Job {job_id}" in m.text]


async def rows_of(gw: Gateway, job_id: str, kind: str = "completion") -> list[Notification]:
    return [n for n in await gw.outbox.list() if n.job_id == job_id and n.kind == kind]


async def settled(gw: Gateway, job_id: str, kind: str = "completion") -> Notification:
    """The job's notice once it is delivered or parked *and* the router is idle: nothing
    more will be sent for it, so sends can be counted (not "after a while")."""
    async def final() -> list[Notification]:
        rows = await rows_of(gw, job_id, kind)
        return rows if rows and rows[0].state in ("delivered", "parked") else []

    await eventually_async(final, what=f"the {kind} of job {job_id} delivered or parked")
    async with asyncio.timeout(10):
        await gw.router.wait_idle()
    (row,) = await final()
    return row


# 1. durable before visible: a job's end and its notice are one commit ------------------

async def test_a_crash_as_a_jobs_end_commits_loses_neither_and_the_restart_reports_it_once(
        memory_config: Config, monkeypatch: pytest.MonkeyPatch) -> None:
    adapter = MemoryAdapter("memory", send_delay=0.001)
    async with gateway(memory_config, adapter) as gw:
        crash = crash_on_write(monkeypatch, gw.store.db, inserts_notice("completion"))
        job_id = await start_job(adapter, "/bg echo end-marker; exit 3")
        await crash.wait()
        record = await gw.jobs.get(job_id)
        assert record is not None
        told = bool(await rows_of(gw, job_id))
        assert (record.state != "running") == told, (
            f"the job's end was committed without its completion notice "
            f"(job {record.state}, notice {'committed' if told else 'lost'})")
    async with gateway(memory_config, adapter) as gw:  # the restart after the crash
        row = await settled(gw, job_id)
        assert row.state == "delivered"
        assert "exit code 3" in row.text and "end-marker" in row.text
    assert len(notices_of(adapter, job_id)) == 1


# 2. exactly once: a send that was recorded is not sent again after a crash ------------

async def test_a_crash_between_a_recorded_send_and_its_completion_sends_nothing_twice(
        memory_config: Config, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Through the owner's lane (the owner is mid-turn when the job ends): the send's
    record commits with its transcript line, the row's completion after it."""
    adapter = MemoryAdapter("memory", send_delay=0.001)
    job_gate, turn_gate = Gate(tmp_path / "job-gate"), Gate(tmp_path / "turn-gate")
    async with gateway(memory_config, adapter) as gw:
        crash = CrashPoint()

        async def crash_before_completion(claimer: str, outcomes: object) -> None:
            await gw.store.db.flush()  # the send's record has committed: crash right after
            crash.crash("between the send's record and the row's completion")

        monkeypatch.setattr(gw.outbox, "record_outcomes", crash_before_completion)
        job_id = await start_job(adapter, f"/bg {job_gate.wait}; echo sent-once")
        turn = adapter.receive(f"/run {turn_gate.wait}; echo turn-over", CHAT)
        await eventually(lambda: gw.runner.is_busy(KEY), what="the owner mid-turn")
        await job_gate.open()  # its notice waits in the busy owner's lane
        await eventually_async(lambda: _in_lane(gw), what="the notice in the owner's lane")
        await turn_gate.open()
        await turn
        await crash.wait()
        assert len(notices_of(adapter, job_id)) == 1  # it went out before the crash
    async with gateway(memory_config, adapter) as gw:  # reconciled on restart
        row = await settled(gw, job_id)
        assert row.state == "delivered"
    sent = notices_of(adapter, job_id)
    assert len(sent) == 1, f"the notice was sent again after the restart: {len(sent)} sends"


async def _in_lane(gw: Gateway) -> bool:
    rows = await gw.outbox.list("claimed")
    return bool(rows) and gw.runner.lanes.waiting(KEY) > 0


async def test_a_crash_right_after_an_inline_posts_record_commits_sends_nothing_twice(
        memory_config: Config) -> None:
    """Posted inline (its owner idle): the send's record and the row's completion are
    one write. The state as committed the moment it is through is what the next life
    starts on (a ``kill -9`` there)."""
    adapter = MemoryAdapter("memory", send_delay=0.001)
    async with gateway(memory_config, adapter) as gw:
        killed = KilledAt(gw.config.state_db)
        told = gw.router._committed

        def snapshot_then_tell(committed: asyncio.Future[object]) -> None:
            if not killed.happened.is_set():
                killed.snapshot()  # the instant the commit is through, before anything else
            told(committed)

        gw.router._committed = snapshot_then_tell  # type: ignore[method-assign]
        job_id = await start_job(adapter, "/bg echo sent-once")
        await asyncio.wait_for(killed.happened.wait(), 30)
        assert len(notices_of(adapter, job_id)) == 1
    killed.restore()
    async with gateway(memory_config, adapter) as gw:  # the restart after the kill
        row = await settled(gw, job_id)
        assert row.state == "delivered"
    sent = notices_of(adapter, job_id)
    assert len(sent) == 1, f"the notice was sent again after the restart: {len(sent)} sends"


# 3. positive proof: a web tab proves ownership only while it is open ------------------

async def test_a_web_tab_proves_a_notice_whose_session_the_store_lacks_only_while_open(
        tmp_path: Path, http: aiohttp.ClientSession) -> None:
    """Branch (c) of the ownership rule through the real store and web chat. The store
    lacks a session only when it lost rows (a state database restored from a backup
    older than the work); the tab the work came from is then the only proof left."""
    async with running_gateway(make_config(tmp_path / "home")) as gw:
        web = gw.runner.adapters["web"].inner  # the platform's own, behind the fence
        assert isinstance(web, WebAdapter)
        base = f"http://127.0.0.1:{web.port}"
        leaving = await open_tab(http, base)
        staying = await open_tab(http, base, leaving.ready["conversation"])
        conversation, key = leaving.ready["conversation"], leaving.ready["session_key"]
        route = Route("web", "dm", conversation, user_id="web", user_name="web")

        async def notice_from(tab_id: str, name: str) -> Notification:
            address = ReturnAddress(key, "a-session-the-store-lost", route, tab_id=tab_id)
            await gw.outbox.produce([NewNotification(
                idempotency_key=f"{name}:completion:0", kind="async_delegation",
                address=address, job_id=name, text=f"result of {name}")])
            return await settled(gw, name, "async_delegation")

        proved = await notice_from(staying.ready["tab"], "d-open")
        assert proved.state == "delivered"
        frame = await staying.frame()
        assert frame["text"] == "result of d-open"
        assert frame["session_id"] == staying.ready["session_id"]  # the tab's live session

        await leaving.ws.close()
        await eventually(lambda: leaving.ready["tab"] not in web.open_tabs(conversation),
                         what="the closed tab gone from the web chat")
        unproved = await notice_from(leaving.ready["tab"], "d-closed")
        assert (unproved.state, unproved.reason) == ("parked", "no_route"), (
            f"a closed tab proved ownership: the notice was {unproved.state}")
        said = [m.text for m in await gw.store.messages(staying.ready["session_id"])]
        assert "result of d-closed" not in said


# 4. positive proof: an unknown session id is not the chat's live session -------------

async def test_a_notice_whose_session_is_unknown_is_parked_not_given_to_the_live_session(
        memory_config: Config) -> None:
    adapter = MemoryAdapter("memory", send_delay=0.001)
    async with gateway(memory_config, adapter) as gw:
        assert await adapter.receive("hello", CHAT) == "handled"  # the chat has a live session
        assert await gw.store.live_session(KEY) is not None
        await gw.outbox.produce([NewNotification(
            idempotency_key="j-unknown:completion:0", kind="completion", job_id="j-unknown",
            address=ReturnAddress(KEY, "a-session-the-store-never-had", CHAT),
            text="Job j-unknown finished: not this session's")])
        row = await settled(gw, "j-unknown")
        assert (row.state, row.reason) == ("parked", "no_route"), (
            f"an unknown session id reached the chat's live session: {row.state}")
        assert notices_of(adapter, "j-unknown") == []


# 5. a busy owner keeps its mail: its notice waits in its lane, tried once -------------

async def test_a_busy_owners_notice_waits_in_its_lane_and_is_delivered_on_the_first_attempt(
        memory_config: Config, tmp_path: Path) -> None:
    adapter = MemoryAdapter("memory", send_delay=0.001)
    job_gate, turn_gate = Gate(tmp_path / "job-gate"), Gate(tmp_path / "turn-gate")
    async with gateway(memory_config, adapter) as gw:
        job_id = await start_job(adapter, f"/bg {job_gate.wait}; echo job-over")
        turn = adapter.receive(f"/run {turn_gate.wait}; echo turn-over", CHAT)
        await eventually(lambda: gw.runner.is_busy(KEY), what="the owner mid-turn")
        await job_gate.open()  # the job ends while its owner is mid-turn

        async def placed() -> bool:  # in the owner's lane, or handed back to the outbox
            rows = await rows_of(gw, job_id)
            return bool(rows) and (gw.runner.lanes.waiting(KEY) > 0 or rows[0].attempts > 0)

        await eventually_async(placed, what="the router's decision about the notice")
        assert notices_of(adapter, job_id) == []  # not during the turn
        await turn_gate.open()
        assert await turn == "handled"
        row = await settled(gw, job_id)
        assert row.state == "delivered"
        assert row.attempts == 1, (
            f"the busy owner's notice went back to the outbox: {row.attempts} attempts")
    texts = [m.text for m in adapter.sent_to(CHAT)]
    assert len(notices_of(adapter, job_id)) == 1
    assert texts.index(next(t for t in texts if "turn-over" in t)) < texts.index(
        next(t for t in texts if f"Job {job_id} finished" in t))  # right after the turn


# 6. event-driven: with every poll an hour long, exits and matches still arrive --------

async def test_a_job_exit_is_delivered_though_every_poll_is_an_hour_long(
        memory_config: Config, tmp_path: Path) -> None:
    adapter = MemoryAdapter("memory", send_delay=0.001)
    gate = Gate(tmp_path / "gate")
    async with gateway(memory_config, adapter) as gw:
        job_id = await start_job(adapter, f"/bg {gate.wait}; echo exit-marker; exit 4")
        await gate.open()  # the job was running until now: its end cannot have been seen yet
        row = await settled(gw, job_id)
        assert row.state == "delivered" and "exit code 4" in row.text
        assert len(notices_of(adapter, job_id)) == 1


async def test_an_output_match_is_delivered_while_the_job_runs_though_polls_are_an_hour(
        memory_config: Config, tmp_path: Path) -> None:
    adapter = MemoryAdapter("memory", send_delay=0.001)
    first, last = Gate(tmp_path / "first"), Gate(tmp_path / "last")
    async with gateway(memory_config, adapter) as gw:
        job_id = await start_job(
            adapter, f"/watch match-marker {first.wait}; echo match-marker; {last.wait}")
        await first.open()  # the line is written after the watch began to follow the log
        match = await settled(gw, job_id, "watch_match")
        assert match.state == "delivered" and "match-marker" in match.text
        record = await gw.jobs.get(job_id)
        assert record is not None and record.state == "running"  # as it happened
        await last.open()
        assert (await settled(gw, job_id)).state == "delivered"
