"""A notice's life you can see (gateway/tracing.py, gateway/cli/trace.py): one trace per
unit of background work, its context carried through the store so a delivery after a
``kill -9`` and a restart joins it; spans with ids and outcomes and no text unless
asked; metrics over OTLP too; and ``homing trace`` telling the same story from the
store alone.
"""

from __future__ import annotations

import json
import re
import signal
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from gateway.cli.trace import lines, tell
from gateway.config.settings import Config, TelemetryConfig
from gateway.daemon.assembly import Gateway, running_gateway
from gateway.delivery.notifications import NewNotification
from gateway.sessions.store import SessionStore
from gateway.tracing import configure_tracing, tracing
from gateway.words.events import SendResult
from gateway.words.return_address import ReturnAddress
from gateway.words.route import Route
from tests.conftest import make_config
from tests.fakes.otlp_collector import FakeCollector
from tests.fakes.telegram_server import FakeTelegram
from tests.helpers import eventually, eventually_async, settled
from tests.memory_platform import MemoryAdapter
from tests.real_daemon import cli_json, daemon_settled, kill_leftover_jobs, run_cli, start_daemon
from tests.test_telegram import FORUM, daemon_env, notices

JOB_ID = re.compile(r"\bj[0-9a-f]{10}\b")
SECRET = "s3cret-marker"


def _values(attributes: object) -> list[str]:
    return [str(v) for v in dict(attributes or {}).values()]  # type: ignore[call-overload]


# -- across a kill -9: the real daemon, exporting to a collector on 127.0.0.1 ---------------

async def test_one_trace_holds_a_job_from_its_topic_through_a_kill_9_to_its_delivery(
        tmp_path: Path) -> None:
    async with FakeTelegram() as fake, FakeCollector() as collector:
        env = daemon_env(tmp_path / "home", fake)
        with (tmp_path / "home" / "config.yaml").open("a") as config:
            config.write(f"telemetry: {{otlp_endpoint: '{collector.endpoint}'}}\n")
        # spans leave the process within 50 ms (so the dead life's are out before the
        # kill), metrics every 300 ms
        env |= {"OTEL_BSP_SCHEDULE_DELAY": "50", "OTEL_METRIC_EXPORT_INTERVAL": "300"}
        first, _ = await start_daemon(env)
        second = None
        try:
            fake.user_message(chat_id=FORUM, chat_type="supergroup", is_forum=True,
                              thread_id=42, is_topic_message=True,
                              text=f"/bg sleep 1; echo {SECRET}")
            (started,) = await fake.wait_for_sent(1, timeout=20)
            match = JOB_ID.search(started.text)
            assert match, started.text
            job_id = match.group()
            fake.hold_sends()  # the notice's send hangs: the life dies before it lands

            def notice_held() -> bool:
                return any(method == "sendMessage" and str(p.get("text", "")).startswith("Job ")
                           for method, p in fake.calls)

            await eventually(notice_held, timeout=20, what="the notice's send, held")
            await collector.wait_for("job.end", job_id=job_id)
            first.send_signal(signal.SIGKILL)
            await first.wait()
            fake.release_sends()  # its bot is gone: nothing is posted
            second, _ = await start_daemon(env)
            await eventually(lambda: notices(fake), timeout=30, what="the completion")
            await daemon_settled(env)
            (notice,) = notices(fake)
            assert (notice.chat_id, notice.message_thread_id) == (FORUM, 42)
            await collector.wait_for("notice.recorded", outcome="delivered")
            await collector.wait_for("job.start", job_id=job_id)

            # one trace: the message, the job's start and end in the dead life; the
            # claim, the owner, the send and the record in the next
            (start,) = collector.named("job.start")
            spans = collector.trace(start.trace_id)
            names = [s.name for s in spans]
            (message,) = [s for s in spans if s.name == "message"]
            assert start.parent_span_id == message.span_id
            assert message.attributes["platform"] == "telegram"
            assert message.attributes["thread_id"] == "42"
            (end,) = [s for s in spans if s.name == "job.end"]
            assert (end.attributes["job_id"], end.attributes["exit_code"]) == (job_id, 0)
            pids = {s.resource["process.pid"] for s in spans}
            assert pids == {first.pid, second.pid}
            for s in (message, start, end):
                assert s.resource["process.pid"] == first.pid
            after = [s for s in spans if s.resource["process.pid"] == second.pid]
            # (a claim may come back before the platform is connected again: then
            # it is claimed, decided and recorded once more)
            (send,) = [s for s in after if s.name == "notice.send" and s.attributes["ok"]]
            assert (send.attributes["platform"], send.attributes["thread_id"]) == (
                "telegram", "42")
            assert send.attributes["message_id"] == str(notice.message_id)
            owners = [s.attributes["owner"] for s in after if s.name == "notice.owner"]
            assert owners and set(owners) == {"live"}
            recorded = [s.attributes["outcome"] for s in after
                        if s.name == "notice.recorded"]
            assert recorded[-1:] == ["delivered"] and recorded.count("delivered") == 1
            assert [s.name for s in after].count("notice.claimed") == len(owners)
            assert names.count("job.start") == 1
            # ids and outcomes only: neither the message nor the command is in a span
            assert not [v for s in collector.spans for v in _values(s.attributes)
                        if SECRET in v]
            # and the metrics went the same way
            await eventually(lambda: "homing_messages_in" in collector.metrics,
                             timeout=20, what="the metrics over OTLP")
            assert not collector.refused

            # `homing trace` tells the same from the store alone
            story = await cli_json("trace", job_id, env=env)
            assert story["job"]["id"] == job_id
            assert start.trace_id in story["job"]["trace_parent"]
            assert story["job"]["route"]["thread_id"] == "42"
            assert story["job"]["exit_code"] == 0
            assert story["started_by"]["platform"] == "telegram"
            assert SECRET in story["started_by"]["text"]
            (told,) = story["notices"]
            assert (told["state"], told["now"], told["owner"]) == ("delivered", "delivered",
                                                                   "live")
            assert told["sent_message_id"] == str(notice.message_id)
            assert start.trace_id in told["trace_parent"]
            code, out, err = await run_cli("trace", job_id, env=env)
            assert code == 0, err
            assert f"job {job_id}" in out and "thread 42" in out
            assert "exit code 0" in out and "now: delivered" in out
            by_notice = await cli_json("trace", str(told["id"]), env=env)
            assert by_notice["job"]["id"] == job_id
            assert by_notice["asked_about"] == {"notice": told["id"]}
        finally:
            for proc in (first, second):
                if proc is not None and proc.returncode is None:
                    proc.terminate()
                    await proc.wait()
            await kill_leftover_jobs(env)


async def test_trace_of_nothing_says_so_and_exits_non_zero(tmp_path: Path) -> None:
    from tests.real_daemon import web_home

    env = web_home(tmp_path / "home")
    code, _, err = await run_cli("trace", "j0000000000", env=env)
    assert code == 1 and "no state database" in err
    (tmp_path / "home" / "state.db").touch()
    code, _, err = await run_cli("trace", "j0000000000", env=env)
    assert code == 1 and "no job, notice, schedule or delegation 'j0000000000'" in err


# -- in process: the spans themselves, with an in-memory exporter -----------------------

@pytest.fixture
def exported() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    yield exporter
    tracing.shutdown()  # off again for the tests after


def _traced(exporter: InMemorySpanExporter, **settings: object) -> None:
    assert configure_tracing(TelemetryConfig(**settings), exporter=exporter)  # type: ignore[arg-type]


def _config(tmp_path: Path) -> Config:
    return make_config(tmp_path / "home", platforms__web__enabled=False)


@pytest.fixture
async def memory_gateway(tmp_path: Path) -> AsyncIterator[tuple[Gateway, MemoryAdapter]]:
    adapter = MemoryAdapter("memory")
    async with running_gateway(_config(tmp_path), [adapter]) as gw:
        yield gw, adapter


def _trace_of(exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    spans = list(exporter.get_finished_spans())
    (anchor,) = [s for s in spans if s.name == name]
    assert anchor.context is not None
    return [s for s in spans
            if s.context is not None and s.context.trace_id == anchor.context.trace_id]


async def _bg(gw: Gateway, adapter: MemoryAdapter, chat: str, command: str) -> None:
    route = Route("memory", "dm", chat, user_id=chat)
    await adapter.receive(command, route)
    await eventually(lambda: any(m.text.startswith("Job ") for m in adapter.sent),
                     timeout=20, what="the completion")
    await settled(gw)


async def test_spans_carry_ids_and_outcomes_and_no_text_unless_asked(
        tmp_path: Path, exported: InMemorySpanExporter,
        memory_gateway: tuple[Gateway, MemoryAdapter]) -> None:
    gw, adapter = memory_gateway
    _traced(exported)
    await _bg(gw, adapter, "c1", f"/bg echo {SECRET}")
    trace = _trace_of(exported, "job.start")
    names = {s.name for s in trace}
    assert {"message", "job.start", "job.end", "notice.claimed", "notice.owner",
            "notice.send", "notice.recorded"} <= names
    assert not [v for s in exported.get_finished_spans() for v in _values(s.attributes)
                if SECRET in v]
    tracing.shutdown()

    with_text = InMemorySpanExporter()  # (a provider's shutdown stops its exporter)
    _traced(with_text, include_text=True)
    adapter.sent.clear()
    await _bg(gw, adapter, "c2", f"/bg echo {SECRET}")
    trace = _trace_of(with_text, "job.start")
    (start,) = [s for s in trace if s.name == "job.start"]
    (message,) = [s for s in trace if s.name == "message"]
    assert start.attributes is not None and message.attributes is not None
    assert start.attributes["command"] == f"echo {SECRET}"
    assert message.attributes["text"] == f"/bg echo {SECRET}"


async def test_a_parked_notice_and_a_flood_limited_one_are_told_with_their_reasons(
        tmp_path: Path, exported: InMemorySpanExporter,
        memory_gateway: tuple[Gateway, MemoryAdapter]) -> None:
    gw, adapter = memory_gateway
    _traced(exported)
    # no platform runs for this one's conversation: parked, and why
    stray = ReturnAddress("agent:main:discord:dm:9", "s-none",
                          Route("discord", "dm", "9", user_id="9"))
    route = Route("memory", "dm", "c3", user_id="c3")
    key = gw.runner.session_key_for(route)
    session = await gw.store.get_or_create(key, route)
    here = ReturnAddress(key, session.id, route)
    adapter.scripted_failures["c3"] = [SendResult(ok=False, error="Too Many Requests",
                                                  retry_after=600.0)]
    with tracing.span("test.work") as work:
        await gw.outbox.produce([
            NewNotification("stray:completion:0", "completion", stray, "Job stray finished",
                            job_id="stray", trace_parent=work.traceparent),
            NewNotification("slow:completion:0", "completion", here, "Job slow finished",
                            job_id="slow", trace_parent=work.traceparent)])
    gw.outbox.wake()

    async def both_told() -> list[dict[str, object]]:
        rows = await gw.store.db.fetchall("SELECT id FROM notifications ORDER BY id")
        stories = [await tell(gw.store, str(r[0])) for r in rows]
        nows = [str(s["notices"][0]["now"]) for s in stories if s]
        ready = (any(n.startswith("parked") for n in nows)
                 and any(n.startswith("waiting on the platform") for n in nows))
        return [s["notices"][0] for s in stories if s] if ready else []

    told = await eventually_async(both_told, 20, what="both notices told")
    parked = next(n for n in told if str(n["now"]).startswith("parked"))
    assert parked["now"] == "parked: unknown_platform — platform 'discord' is not running here"
    assert parked["owner"] == "nobody"
    flood = next(n for n in told if n is not parked)
    assert str(flood["now"]).startswith("waiting on the platform's flood limits until ")
    (attempt,) = flood["not_delivered"]  # type: ignore[misc]
    assert (attempt["outcome"], attempt["retry_in"]) == ("flood_limited", 600.0)

    trace = _trace_of(exported, "test.work")
    owners = {s.attributes["notification_id"]: s.attributes for s in trace  # type: ignore[index]
              if s.name == "notice.owner"}
    assert owners[parked["id"]]["owner"] == "parked"
    assert owners[parked["id"]]["reason"] == "unknown_platform"
    assert owners[flood["id"]]["owner"] == "live"
    (sent,) = [s for s in trace if s.name == "notice.send"]
    assert sent.attributes is not None
    assert (sent.attributes["ok"], sent.attributes["retry_after"]) == (False, 600.0)
    recorded = {s.attributes["notification_id"]: s.attributes["outcome"]  # type: ignore[index]
                for s in trace if s.name == "notice.recorded"}
    assert recorded == {parked["id"]: "parked", flood["id"]: "flood_limited"}


def test_without_an_endpoint_nothing_is_traced_and_nothing_imported() -> None:
    import subprocess
    import sys

    code = ("import sys; from gateway.config.settings import TelemetryConfig; "
            "from gateway.tracing import configure_tracing, tracing; "
            "assert not configure_tracing(TelemetryConfig()); "
            "import gateway.daemon.assembly, gateway.cli.main; "
            "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert json.loads(out.replace("'", '"')) == []
    assert not tracing.enabled


async def test_a_schedule_run_and_a_delegation_are_each_one_trace_and_one_story(
        tmp_path: Path, exported: InMemorySpanExporter,
        memory_gateway: tuple[Gateway, MemoryAdapter]) -> None:
    gw, adapter = memory_gateway
    _traced(exported)
    route = Route("memory", "dm", "c4", user_id="c4")
    assert await adapter.receive("/every 1h echo hourly", route) == "handled"
    found = re.match(r"Schedule (s[0-9a-f]+):", adapter.sent[-1].text)
    assert found, adapter.sent[-1].text
    sid = found[1]
    await gw.scheduler.run_now(sid)
    await eventually(lambda: any("the run of" in m.text for m in adapter.sent), timeout=20,
                     what="the run's report")
    await settled(gw)
    story = await tell(gw.store, sid)
    assert story is not None
    (run,) = story["runs"]
    assert run["state"] == "finished"
    job = run["job"]
    assert job["job"]["command"] == "echo hourly"
    assert job["started_by"]["schedule_id"] == sid
    assert [n["now"] for n in job["notices"]] == ["delivered"]
    told = "\n".join(lines(story))
    assert f"schedule {sid} (every 1h)" in told and "run for " in told
    assert f"job {job['job']['id']}: echo hourly" in told and f"by schedule {sid}" in told
    trace = _trace_of(exported, "schedule.run")
    (run_span,) = [s for s in trace if s.name == "schedule.run"]
    (start,) = [s for s in trace if s.name == "job.start"]
    assert start.parent is not None and run_span.context is not None
    assert start.parent.span_id == run_span.context.span_id
    assert "notice.recorded" in {s.name for s in trace}

    assert await adapter.receive("/delegate echo delegated", route) == "handled"
    found = re.search(r"\bd[0-9a-f]{7}\b", adapter.sent[-1].text)
    assert found, adapter.sent[-1].text
    did = found.group()
    await eventually(lambda: any(m.text.startswith(f"Delegation {did} finished")
                                 for m in adapter.sent), timeout=20, what="the result")
    await settled(gw)
    story = await tell(gw.store, did)
    assert story is not None
    assert story["delegation"]["state"] == "finished"
    assert [n["now"] for n in story["notices"]] == ["delivered"]
    told = "\n".join(lines(story))
    assert f"delegation {did}: echo delegated" in told and "now: delivered" in told
    trace = _trace_of(exported, "delegation.start")
    names = [s.name for s in trace]
    assert {"message", "delegation.start", "delegation.end", "notice.owner", "notice.send",
            "notice.recorded"} <= set(names)


class _BrokenTracer:
    """A tracer whose every span fails to start (an SDK bug, an exporter gone wrong)."""

    def start_span(self, *args: object, **kwargs: object) -> object:
        raise RuntimeError("tracer broken")


async def test_a_tracer_that_breaks_mid_job_sends_its_notice_once_all_the_same(
        tmp_path: Path, exported: InMemorySpanExporter,
        memory_gateway: tuple[Gateway, MemoryAdapter]) -> None:
    gw, adapter = memory_gateway
    _traced(exported)
    route = Route("memory", "dm", "c5", user_id="c5")
    await adapter.receive("/bg sleep 2; echo once", route)
    await eventually_async(gw.jobs.list, 20, what="the job running")
    (job,) = await gw.jobs.list()
    assert job.trace_parent  # started traced: its notice carries the trace
    tracing._tracer = _BrokenTracer()  # every event the notice's delivery makes fails
    await eventually(lambda: any(m.text.startswith("Job ") for m in adapter.sent),
                     timeout=20, what="the completion")
    await settled(gw)
    assert [m.text.split()[:2] for m in adapter.sent if m.text.startswith("Job ")] == [
        ["Job", job.id]]
    (state, attempts), = await gw.store.db.fetchall(
        "SELECT state, attempts FROM notifications WHERE job_id = ?", (job.id,))
    assert (state, attempts) == ("delivered", 1)


async def test_homing_trace_tells_repeated_attempts_once_with_their_count(
        store: SessionStore) -> None:
    """A platform down for an hour, retried every few seconds, is one line with its
    count (on either store), not one a retry; an attempt never made, and one recorded
    by a router that no longer holds the claim, are none."""
    from gateway.delivery.outbox import DeliveryOutcome, Outbox

    outbox = Outbox(store.db)
    route = Route("memory", "dm", "c6", user_id="c6")
    await outbox.produce([NewNotification(
        "j1:completion:0", "completion",
        ReturnAddress("agent:main:memory:dm:c6", "s1", route), "Job j1 finished",
        job_id="j1")])
    down = DeliveryOutcome("retry", reason="platform disconnected", retry_in=0.0)
    for _ in range(3):
        (n,) = await outbox.claim("router-a")
        await outbox.record_outcomes("router-a", [(n, down)])
    (n,) = await outbox.claim("router-a")
    await outbox.record_outcomes("router-a", [(n, DeliveryOutcome(
        "retry", reason="Too Many Requests", retry_in=0.0, platform_wait=True))])
    (n,) = await outbox.claim("router-a")
    await outbox.record_outcomes("router-a", [(n, DeliveryOutcome(
        "retry", reason="gateway stopping", untried=True))])
    await outbox.record_outcomes("router-b", [(n, down)])  # holds no claim

    story = await tell(store, str(n.id))
    assert story is not None
    (told,) = story["notices"]
    assert [(a["claimer"], a["outcome"], a["detail"], a["repeats"])
            for a in told["not_delivered"]] == [
        ("router-a", "retry", "platform disconnected", 3),
        ("router-a", "flood_limited", "Too Many Requests", 1)]
    text = "\n".join(lines(story))
    assert "retry — platform disconnected; the same 2 more times, the last at " in text
    assert "flood_limited — Too Many Requests\n" in text + "\n"
    # what is not an id of the store is no notice (and no traceback)
    assert await tell(store, "²") is None
    assert await tell(store, "9" * 23) is None
