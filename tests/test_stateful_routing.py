"""A stateful property test of the way back, over the real store, outbox and router.

Hypothesis drives conversations (forum topics, the General topic, DMs):
messages, work started (its return address captured by a real turn, as a
tool would), work finishing (job completions, watch matches, delegation
results), ``/new``, ``/compress``, crashes with notices pending or claimed,
and restarts — and real background jobs whose daemon is killed between any
two steps of their life (row committed, process started, pid recorded,
output written, exit, notice committed), ending while it is down or after —
and inbound messages whose daemon is killed at each state of their journal
entry (received, started, acted, replied), replayed after the restart, some
delivered again by the platform.
After every step, an independent model of the rules predicts
where each notice must have gone, and the test checks that it went there —
once — or was parked, and that nothing was lost.

CI runs a few thousand steps; for a longer soak run:
``HOMING_STATEFUL_EXAMPLES=500 HOMING_STATEFUL_STEPS=100 pytest tests/test_stateful_routing.py``
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import tempfile
import time
import unittest
from dataclasses import dataclass, field
from pathlib import Path

from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from agent.command import CommandAgent
from gateway.delivery.notifications import NewNotification
from gateway.delivery.outbox import Outbox
from gateway.delivery.router import Router
from gateway.messages.runner import GatewayRunner
from gateway.sessions.store import SessionStore
from gateway.words.events import MessageEvent, MessageKind, NoticeInfo, SendResult
from gateway.words.return_address import ReturnAddress
from gateway.words.route import Route
from tests.conftest import make_config
from tests.memory_platform import MemoryAdapter, SentMessage
from tools.jobs import JobManager
from tools.terminal import Terminal

FORUM = "-1005550"
CONVERSATIONS = {
    "topic42": Route("memory", "group", FORUM, thread_id="42", user_id="1"),
    "topic17": Route("memory", "group", FORUM, thread_id="17", user_id="1"),
    "general": Route("memory", "group", FORUM, user_id="1"),
    "other-forum-42": Route("memory", "group", "-1006660", thread_id="42", user_id="1"),
    "dm": Route("memory", "dm", "1", user_id="1"),
}
JOB_KINDS = ("completion", "watch_match")
#: where a job's daemon is killed: after its row is committed, after its process was
#: spawned, after its pid was recorded, after it wrote output, after it exited (its end
#: not yet committed), after its completion was committed (not yet delivered)
CRASH_POINTS = ("row", "spawned", "pid", "output", "exit", "notice", None)


#: where a message's daemon is killed: journaled (its turn not begun), its turn begun,
#: its turn started a job (not yet replied), replied (its end not recorded)
INBOUND_CRASHES = ("received", "started", "acted", "replied", None)


class SimulatedCrash(Exception):
    """The daemon dies here: nothing after this point of the job's life runs."""


class CrashingJobManager(JobManager):
    """The real job manager, dying at a chosen step of the next job's life."""

    crash_at: str | None = None

    def _spawn(self, record, workdir):  # type: ignore[no-untyped-def]
        if self.crash_at == "row":
            raise SimulatedCrash
        pid = super()._spawn(record, workdir)
        if self.crash_at == "spawned":
            raise SimulatedCrash
        return pid

    async def _record_pid(self, record) -> None:  # type: ignore[no-untyped-def]
        await super()._record_pid(record)
        if self.crash_at == "pid":
            await self.db.flush()
            raise SimulatedCrash

    async def _commit_end(self, record, notices, ops) -> None:  # type: ignore[no-untyped-def]
        if self.crash_at == "exit":
            await self._die()
        await super()._commit_end(record, notices, ops)
        if self.crash_at == "notice":
            await self._die()

    async def _die(self) -> None:
        """Go no further; the machine then takes the daemon down around this task."""
        self.crashed.set()
        await asyncio.Event().wait()

    @property
    def crashed(self) -> asyncio.Event:
        if not hasattr(self, "_crashed"):
            self._crashed = asyncio.Event()
        return self._crashed


class CrashingAdapter(MemoryAdapter):
    """Memory platform whose next reply never goes out: the daemon dies sending it."""

    die_on_reply: asyncio.Event | None = None

    async def send(self, route: Route, text: str, *, kind: MessageKind = "reply",
                   session_id: str | None = None, dedupe_key: str | None = None,
                   notice: NoticeInfo | None = None
                   ) -> SendResult:
        if self.die_on_reply is not None and kind == "reply":
            self.die_on_reply.set()
            await asyncio.Event().wait()
        return await super().send(route, text, kind=kind, session_id=session_id,
                                  dedupe_key=dedupe_key)


async def _die(dying: asyncio.Event) -> None:
    dying.set()
    await asyncio.Event().wait()


@dataclass
class MessageExpected:
    """An inbound message: answered once, or (killed after it acted) told once."""

    marker: str
    conversation: str
    job: bool
    crash_at: str | None
    behind: str | None  # a second message queued behind it when the daemon died


@dataclass
class Work:
    """Something started in a conversation that will report back."""

    conversation: str
    address: ReturnAddress
    delegation: bool
    notices: int = 0


@dataclass
class Expected:
    marker: str
    conversation: str
    anchor: str | None
    outcome: str  # turn | labelled | parked
    #: the session whose work it reports (a parked one is offered again on its resume)
    session_id: str = ""


@dataclass
class JobExpected:
    """A real job's notices: its completion (or "did not start"), and a watch notice."""

    marker: str
    code: int
    conversation: str
    anchor: str | None
    outcome: str  # turn | labelled
    started: bool  # False: the daemon died before its process existed
    watched: bool


@dataclass
class Model:
    """The rules, restated independently of the gateway's code."""

    live: dict[str, str] = field(default_factory=dict)  # conversation → live session id
    successor: dict[str, str] = field(default_factory=dict)  # compressed id → child id
    ended_by_reset: set[str] = field(default_factory=set)
    #: conversation → its sessions ended for good (by /new or by a /resume of another),
    #: each of which /resume may make live again
    resumable: dict[str, list[str]] = field(default_factory=dict)

    def tip(self, session_id: str) -> str:
        while session_id in self.successor:
            session_id = self.successor[session_id]
        return session_id

    def outcome(self, session_id: str, delegation: bool) -> str:
        if self.tip(session_id) not in self.ended_by_reset:
            return "turn"
        return "parked" if delegation else "labelled"


class RoutingMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.tmp = tempfile.TemporaryDirectory()
        self.config = make_config(Path(self.tmp.name) / "home")
        self.adapter = CrashingAdapter("memory")
        self.model = Model()
        self.work: list[Work] = []
        self.expected: list[Expected] = []
        self.jobs_expected: list[JobExpected] = []
        self.messages_expected: list[MessageExpected] = []
        self.gates: list[int] = []
        self.counter = 0
        self.store: SessionStore | None = None
        self.run(self._start())

    def run(self, coro):
        return self.loop.run_until_complete(coro)

    def state_location(self) -> str | Path:
        """Where the store lives (tests/test_stateful_routing_pg.py: PostgreSQL)."""
        return self.config.state_db

    async def _start(self) -> None:
        self.store = SessionStore(self.state_location())
        await self.store.initialize()
        self.outbox = Outbox(self.store.db)
        await self.outbox.reconcile_claimed()
        self.jobs = CrashingJobManager(self.store.db, self.outbox, self.config)
        self.runner = GatewayRunner(self.config, self.store,
                                    CommandAgent(Terminal(self.jobs, foreground_timeout=10)))
        self.runner.add_adapter(self.adapter)
        self.router = Router(self.outbox, self.store, self.runner)
        await self.jobs.recover()  # before anything is taken in, as the daemon does
        await self.adapter.connect(self.runner)
        await self.runner.replay()  # what the killed daemon had taken in and not handled
        await self.router.start()

    async def _stop(self) -> None:
        await self.router.stop()
        await self.jobs.detach()
        await self.runner.drain(5)
        await self.router.settle()
        assert self.store is not None
        await self.store.close()

    def teardown(self) -> None:
        try:
            self.run(self._stop())
        finally:
            for gate in self.gates:  # let every job still waiting end
                os.write(gate, b"\n")
                os.close(gate)
            self.loop.close()
            self.tmp.cleanup()

    def _next(self) -> str:
        self.counter += 1
        return str(self.counter)

    async def _say(self, conversation: str, text: str) -> str:
        anchor = f"m{self._next()}"
        route = CONVERSATIONS[conversation].with_anchor(anchor)
        assert await self.adapter.receive(text, route, message_id=anchor) == "handled"
        session = await self.store.live_session(self.runner.session_key_for(route))
        self.model.live[conversation] = session.id
        return anchor

    # rules ---------------------------------------------------------------------

    @rule(conversation=st.sampled_from(sorted(CONVERSATIONS)))
    def message(self, conversation: str) -> None:
        self.run(self._say(conversation, "just chatting"))

    @rule(conversation=st.sampled_from(sorted(CONVERSATIONS)), delegation=st.booleans())
    def start_work(self, conversation: str, delegation: bool) -> None:
        async def go() -> None:
            await self._say(conversation, "/whoami")  # the tool's view of the turn
            seen = json.loads(self.adapter.sent_to(CONVERSATIONS[conversation])[-1].text)
            tool = seen["tool"]
            address = ReturnAddress(tool["session_key"], tool["session_id"],
                                    Route.from_dict(tool["route"]), tool["tab_id"])
            self.work.append(Work(conversation, address, delegation))
        self.run(go())

    @precondition(lambda self: self.work)
    @rule(pick=st.integers(min_value=0), watch=st.booleans(), twice=st.booleans())
    def work_reports(self, pick: int, watch: bool, twice: bool) -> None:
        """A job finishes or matches its watch, or a delegation returns its result."""
        item = self.work[pick % len(self.work)]
        self.run(self._produce(item, watch, twice))

    @precondition(lambda self: self.model.live)
    @rule(conversation=st.sampled_from(sorted(CONVERSATIONS)))
    def new(self, conversation: str) -> None:
        if conversation not in self.model.live:
            return
        old = self.model.live[conversation]
        self.run(self._say(conversation, "/new"))
        self.model.ended_by_reset.add(old)
        self.model.resumable.setdefault(conversation, []).append(old)

    @precondition(lambda self: any(self.model.resumable.values()))
    @rule(conversation=st.sampled_from(sorted(CONVERSATIONS)), pick=st.integers(min_value=0))
    def resume(self, conversation: str, pick: int) -> None:
        """An ended session live again: it owns its own work again (its parked notices
        are offered again and delivered), and the one it replaced is ended."""
        ended = self.model.resumable.get(conversation, [])
        if not ended or conversation not in self.model.live:
            return
        target = ended[pick % len(ended)]
        old = self.model.live[conversation]
        self.run(self._say(conversation, f"/resume {target}"))
        assert self.model.live[conversation] == target, "the resumed session is not live"
        ended.remove(target)
        ended.append(old)
        self.model.ended_by_reset.discard(target)
        self.model.ended_by_reset.add(old)
        for e in self.expected:
            if e.outcome == "parked" and self.model.tip(e.session_id) == target:
                e.outcome = "turn"
        self.run(self._settle())

    @precondition(lambda self: self.model.live)
    @rule(conversation=st.sampled_from(sorted(CONVERSATIONS)))
    def compress(self, conversation: str) -> None:
        if conversation not in self.model.live:
            return
        old = self.model.live[conversation]
        self.run(self._say(conversation, "/compress"))
        self.model.successor[old] = self.model.live[conversation]

    @rule()
    def restart(self) -> None:
        self.run(self._stop())
        self.run(self._start())

    @precondition(lambda self: self.work)
    @rule(pick=st.integers(min_value=0), claimed=st.booleans())
    def crash_with_a_notice_in_flight(self, pick: int, claimed: bool) -> None:
        """The daemon dies after committing a notice, before (or after) claiming it."""
        item = self.work[pick % len(self.work)]

        async def go() -> None:
            await self.router.stop()  # nothing is delivered from here on
            await self._produce(item, watch=False, twice=False, settle=False)
            if claimed:
                await self.outbox.claim("a-router-that-is-about-to-die")
            await self.runner.drain(5)
            await self.store.close()
            await self._start()
            await self._settle()
        self.run(go())

    @rule(conversation=st.sampled_from(sorted(CONVERSATIONS)),
          crash_at=st.sampled_from(CRASH_POINTS), ends_while_down=st.booleans(),
          watched=st.booleans())
    def job_life(self, conversation: str, crash_at: str | None, ends_while_down: bool,
                 watched: bool) -> None:
        """A real job, its daemon killed at ``crash_at``; then restarted."""
        event(f"job killed at {crash_at or 'no point'}")
        self.run(self._job_life(conversation, crash_at, ends_while_down, watched))

    async def _job_life(self, conversation: str, crash_at: str | None, ends_while_down: bool,
                        watched: bool) -> None:
        await self._say(conversation, "/whoami")
        tool = json.loads(self.adapter.sent_to(CONVERSATIONS[conversation])[-1].text)["tool"]
        address = ReturnAddress(tool["session_key"], tool["session_id"],
                                Route.from_dict(tool["route"]), tool["tab_id"])
        number = int(self._next())
        marker, code = f"jobmark-{number:06d}", number % 5  # no marker is part of another
        gate_path = Path(self.tmp.name) / f"gate-{number}"
        os.mkfifo(gate_path)
        gate = os.open(gate_path, os.O_RDWR | os.O_NONBLOCK)  # the job's read waits on it
        self.gates.append(gate)
        self.jobs_expected.append(JobExpected(
            marker, code, conversation, address.route.message_id,
            self.model.outcome(address.session_id, delegation=False),
            started=crash_at != "row", watched=watched))
        command = f"echo {marker}; read x < {gate_path}; exit {code}"
        release = lambda: os.write(gate, b"\n")  # noqa: E731
        if crash_at == "notice":
            await self.router.stop()  # committed, then the daemon dies before delivering
        self.jobs.crash_at = crash_at
        try:
            record = await self.jobs.start(command, address,
                                           watch_patterns=["jobmark-[0-9]+"] if watched else None)
        except SimulatedCrash:
            record = None
        log_path = Path(self.config.home_path) / "jobs"
        if crash_at == "output" or (crash_at in ("exit", "notice") and record is not None):
            await _until(lambda: _logged(log_path, marker), "the job's output")
        if crash_at in ("exit", "notice"):
            release()
            await asyncio.wait_for(self.jobs.crashed.wait(), 10)
        if crash_at is None:
            release()
            await _until(lambda: not self.jobs.running, "the job's end")
            await self._settle()
            return
        # the daemon dies: nothing of this process delivers or records anything more
        if crash_at != "notice":
            await self.router.stop()
        await self.jobs.detach()
        await self.runner.drain(5)
        await self.store.close()
        if ends_while_down and crash_at not in ("exit", "notice"):
            release()
            if crash_at != "row":
                await _until(lambda: _exited(log_path, marker), "the job's end while down")
        await self._start()
        if not ends_while_down and crash_at not in ("exit", "notice"):
            release()
        await _until(lambda: not self.jobs.running, "the re-attached job's end")
        await self._settle()

    @rule(conversation=st.sampled_from(sorted(CONVERSATIONS)), job=st.booleans(),
          crash_at=st.sampled_from(INBOUND_CRASHES), behind=st.booleans(),
          redelivered=st.booleans())
    def inbound_message(self, conversation: str, job: bool, crash_at: str | None,
                        behind: bool, redelivered: bool) -> None:
        """A platform message, its daemon killed at ``crash_at`` of its journal entry;
        then replayed, and perhaps delivered again by the platform."""
        if crash_at == "acted" and not job:
            crash_at = "started"  # a chat turn starts nothing that lasts
        event(f"message killed at {crash_at or 'no point'}")
        self.run(self._inbound(conversation, job, crash_at, behind, redelivered))

    async def _inbound(self, conversation: str, job: bool, crash_at: str | None,
                       behind: bool, redelivered: bool) -> None:
        number = int(self._next())
        marker = f"inmark-{number:06d}"
        first = self._message(conversation, f"/bg echo {marker}" if job else f"hi {marker}",
                              f"in{number}")
        dying = asyncio.Event()
        if crash_at == "received":  # journaled; the daemon dies before its turn begins
            self.runner.handle_entry = lambda *a, **k: _die(dying)  # type: ignore
        elif crash_at == "started":  # its turn began, nothing else happened
            self.runner._handle = lambda *a, **k: _die(dying)  # type: ignore
        elif crash_at == "acted":  # it started a job; its reply never went out
            self.adapter.die_on_reply = dying
        elif crash_at == "replied":  # answered; the end of its handling never recorded
            self.runner.inbound.finished = lambda *a, **k: dying.set()  # type: ignore
        received = self.runner.receive(first, platform_id=first.message_id)
        assert await received.journaled == "journaled"
        behind_marker = f"{marker}-behind" if behind else None
        if behind_marker is not None:  # queued in the same conversation, behind it
            second = self._message(conversation, f"hi {behind_marker}", f"in{number}b")
            later = self.runner.receive(second, platform_id=second.message_id)
            assert await later.journaled == "journaled"
        self.messages_expected.append(MessageExpected(marker, conversation, job, crash_at,
                                                      behind_marker))
        if crash_at is None:
            await received.handled
        else:
            await asyncio.wait_for(dying.wait(), 10)
            await self._kill()
            await self._start()
        if redelivered:  # the platform sends it again (Telegram's offset, a web resend)
            again = self.runner.receive(first, platform_id=first.message_id)
            assert await again.journaled == "duplicate"
        await _until(lambda: not self.runner._lanes, "the replayed messages' turns")
        await _until(lambda: not self.jobs.running, "the messages' jobs")
        await self._settle()
        await _until(lambda: not self.runner._lanes, "the jobs' notices")
        live = await self.store.live_session(self.runner.session_key_for(first.route))
        assert live is not None
        self.model.live[conversation] = live.id

    def _message(self, conversation: str, text: str, platform_id: str) -> MessageEvent:
        route = CONVERSATIONS[conversation].with_anchor(platform_id)
        return MessageEvent(text=text, route=route, message_id=platform_id)

    async def _kill(self) -> None:
        """The daemon is killed: nothing more is sent or recorded, what was committed stays."""
        self.adapter.die_on_reply = None
        self.runner.inbound.finished = lambda *a, **k: None  # type: ignore
        await self.router.stop()
        await self.jobs.detach()
        lanes = [lane.task for lane in self.runner._lanes.values() if lane.task]
        for task in lanes:
            task.cancel()
        await asyncio.gather(*lanes, return_exceptions=True)
        await self.store.close()

    # helpers -------------------------------------------------------------------

    async def _produce(self, item: Work, watch: bool, twice: bool, settle: bool = True) -> None:
        item.notices += 1
        marker = f"marker-{self._next()}"
        kind = "async_delegation" if item.delegation else JOB_KINDS[watch]
        notice = NewNotification(f"{id(item)}-{item.notices}:{kind}:0", kind, item.address,
                                 f"{marker} from work in {item.conversation}")
        outcome = self.model.outcome(item.address.session_id, item.delegation)
        self.expected.append(Expected(marker, item.conversation, item.address.route.message_id,
                                      outcome, item.address.session_id))
        await self.outbox.produce([notice])
        if twice:  # a producer retrying after a crash: the idempotency key keeps it single
            await self.outbox.produce([notice])
        if settle:
            await self._settle()

    async def _settle(self) -> None:
        deadline = time.monotonic() + 10
        while True:
            self.router.wake()
            await self.router.settle()
            open_rows = await self.store.db.fetchone(
                "SELECT COUNT(*) FROM notifications WHERE state IN ('pending', 'claimed')")
            if open_rows[0] == 0 and not self.router.unsettled:
                return
            assert time.monotonic() < deadline, "notifications left undelivered"
            await asyncio.sleep(0.005)

    # invariants ----------------------------------------------------------------

    @invariant()
    def every_notice_went_to_its_owner_once_or_was_parked(self) -> None:
        async def check() -> None:
            parked = {n.text.split()[0]: n.reason for n in await self.outbox.list("parked")}
            notifications = [m for m in self.adapter.sent if m.kind == "notification"]
            for e in self.expected:
                sent = [m for m in notifications if e.marker + " " in m.text + " "]
                if e.outcome == "parked":
                    assert sent == [], f"{e.marker} should be parked, went to {sent}"
                    assert parked.get(e.marker) == "owner_ended", e
                    continue
                assert len(sent) == 1, f"{e.marker}: expected once, sent {len(sent)} times"
                route = sent[0].route
                want = CONVERSATIONS[e.conversation]
                assert (route.chat_id, route.thread_id) == (want.chat_id, want.thread_id), e
                assert route.message_id == e.anchor, e
                labelled = sent[0].text.startswith("[from an ended session")
                assert labelled == (e.outcome == "labelled"), e
        self.run(check())


    @invariant()
    def every_job_reported_its_real_end_once_in_its_conversation(self) -> None:
        notifications = [m for m in self.adapter.sent if m.kind == "notification"]
        for e in self.jobs_expected:
            want = CONVERSATIONS[e.conversation]
            mine = [m for m in notifications if e.marker in m.text]
            ends = [m for m in mine if "output matched" not in m.text]
            assert len(ends) == 1, f"{e}: its end was told {len(ends)} times"
            text = ends[0].text
            if e.started:
                assert f"finished: exit code {e.code} " in text, (e, text)
            else:
                assert "did not start" in text, (e, text)
            matches = [m for m in mine if "output matched" in m.text]
            assert len(matches) == (1 if e.watched and e.started else 0), (e, matches)
            for m in mine:
                assert (m.route.chat_id, m.route.thread_id) == (want.chat_id, want.thread_id), e
                assert m.route.message_id == e.anchor, e
                assert m.text.startswith("[from an ended session") == (
                    e.outcome == "labelled"), e
            if matches:
                assert self.adapter.sent.index(matches[0]) < self.adapter.sent.index(ends[0])

    @invariant()
    def every_message_was_answered_once_or_told_once_and_its_job_ran_once(self) -> None:
        jobs = Path(self.config.home_path) / "jobs"
        outputs: list[tuple[Path, str]] | None = None  # each job's output, read once a check
        by_place: dict[tuple[str, str | None], list[SentMessage]] = {}  # what each chat got
        for m in self.adapter.sent:
            by_place.setdefault((m.route.chat_id, m.route.thread_id), []).append(m)
        for e in self.messages_expected:
            want = CONVERSATIONS[e.conversation]
            here = by_place.get((want.chat_id, want.thread_id), [])
            told = [m for m in here if m.kind == "system" and e.marker in m.text
                    and "may not have finished" in m.text]
            if e.job:
                if outputs is None:
                    outputs = [(f, _read(f / "output.log")) for f in jobs.iterdir()]
                folders = [f for f, output in outputs if e.marker in output]
                assert len(folders) == 1, f"{e}: its job ran {len(folders)} times"
                replies = [m for m in here if m.kind == "reply"
                           and m.text.startswith(f"Started job {folders[0].name};")]
                ends = [m for m in here if m.kind == "notification" and e.marker in m.text]
                assert len(ends) == 1, f"{e}: its job's end was told {len(ends)} times"
            else:
                replies = [m for m in here if m.kind == "reply" and e.marker + "\n" in m.text]
            if e.crash_at == "acted":
                assert (len(replies), len(told)) == (0, 1), (e, replies, told)
            else:
                assert (len(replies), len(told)) == (1, 0), (e, replies, told)
            for m in replies + told:
                assert m.route.message_id == f"in{int(e.marker[7:])}", e
            if e.behind is not None:
                later = [m for m in here if m.kind == "reply" and e.behind + "\n" in m.text]
                assert len(later) == 1, f"{e}: the message behind it answered {len(later)}"
                first = (replies + told)[0]
                assert self.adapter.sent.index(first) < self.adapter.sent.index(later[0]), e


async def _until(check, what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.005)


def _job_folder(jobs: Path, marker: str) -> Path | None:
    for folder in jobs.iterdir() if jobs.exists() else ():
        log = folder / "output.log"
        if log.exists() and marker in log.read_text():
            return folder
    return None


def _read(path: Path) -> str:
    return path.read_text() if path.exists() else ""


def _logged(jobs: Path, marker: str) -> bool:
    return _job_folder(jobs, marker) is not None


def _exited(jobs: Path, marker: str) -> bool:
    folder = _job_folder(jobs, marker)
    return folder is not None and (folder / "exit_code").exists()


#: the examples run as this many tests, so a parallel run (pytest-xdist) spreads them
#: over its workers instead of waiting on one long test at its end
PARTS = 4


def in_parts(name: str, machine: type[RuleBasedStateMachine], examples: int,
             parts: int = PARTS) -> dict[str, type[unittest.TestCase]]:
    """``machine`` as ``parts`` test cases, ``<name>_part_<n>``, that together run
    ``examples`` examples of HOMING_STATEFUL_STEPS steps each."""
    each = settings(max_examples=max(1, math.ceil(examples / parts)),
                    stateful_step_count=int(os.environ.get("HOMING_STATEFUL_STEPS", "50")),
                    deadline=None)
    return {f"{name}_part_{n}":
            type(f"{machine.__name__}Part{n}", (machine.TestCase,), {"settings": each})
            for n in range(1, parts + 1)}


globals().update(in_parts("test_routing_state_machine", RoutingMachine,
                          int(os.environ.get("HOMING_STATEFUL_EXAMPLES", "40"))))
