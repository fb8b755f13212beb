"""A stateful property test of the way back, over the real store, outbox and router.

Hypothesis drives conversations (forum topics, the General topic, DMs):
messages, work started (its return address captured by a real turn, as a
tool would), work finishing (job completions, watch matches, delegation
results), ``/new``, ``/compress``, crashes with notices pending or claimed,
and restarts. After every step, an independent model of the rules predicts
where each notice must have gone, and the test checks that it went there —
once — or was parked, and that nothing was lost.

CI runs a few thousand steps; for a longer soak run:
``HOMING_STATEFUL_EXAMPLES=500 HOMING_STATEFUL_STEPS=100 pytest tests/test_stateful_routing.py``
"""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from agent.command import CommandAgent
from gateway.notifications import NewNotification, ReturnAddress
from gateway.outbox import Outbox
from gateway.platforms.memory import MemoryAdapter
from gateway.route import Route
from gateway.router import Router
from gateway.runner import GatewayRunner
from gateway.store import SessionStore

from .conftest import make_config

FORUM = "-1005550"
CONVERSATIONS = {
    "topic42": Route("memory", "group", FORUM, thread_id="42", user_id="1"),
    "topic17": Route("memory", "group", FORUM, thread_id="17", user_id="1"),
    "general": Route("memory", "group", FORUM, user_id="1"),
    "other-forum-42": Route("memory", "group", "-1006660", thread_id="42", user_id="1"),
    "dm": Route("memory", "dm", "1", user_id="1"),
}
JOB_KINDS = ("completion", "watch_match")


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


@dataclass
class Model:
    """The rules, restated independently of the gateway's code."""

    live: dict[str, str] = field(default_factory=dict)  # conversation → live session id
    successor: dict[str, str] = field(default_factory=dict)  # compressed id → child id
    ended_by_reset: set[str] = field(default_factory=set)

    def outcome(self, session_id: str, delegation: bool) -> str:
        while session_id in self.successor:
            session_id = self.successor[session_id]
        if session_id not in self.ended_by_reset:
            return "turn"
        return "parked" if delegation else "labelled"


class RoutingMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.tmp = tempfile.TemporaryDirectory()
        self.config = make_config(Path(self.tmp.name) / "home")
        self.adapter = MemoryAdapter("memory")
        self.model = Model()
        self.work: list[Work] = []
        self.expected: list[Expected] = []
        self.counter = 0
        self.store: SessionStore | None = None
        self.run(self._start())

    def run(self, coro):
        return self.loop.run_until_complete(coro)

    async def _start(self) -> None:
        self.store = SessionStore(self.config.state_db)
        await self.store.initialize()
        self.outbox = Outbox(self.store.db)
        await self.outbox.reconcile_claimed()
        self.runner = GatewayRunner(self.config, self.store, CommandAgent())
        self.runner.add_adapter(self.adapter)
        await self.adapter.connect(self.runner)
        self.router = Router(self.outbox, self.store, self.runner)
        await self.router.start()

    async def _stop(self) -> None:
        await self.router.stop()
        await self.runner.drain(5)
        await self.router.settle()
        assert self.store is not None
        await self.store.close()

    def teardown(self) -> None:
        try:
            self.run(self._stop())
        finally:
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

    # helpers -------------------------------------------------------------------

    async def _produce(self, item: Work, watch: bool, twice: bool, settle: bool = True) -> None:
        item.notices += 1
        marker = f"marker-{self._next()}"
        kind = "async_delegation" if item.delegation else JOB_KINDS[watch]
        notice = NewNotification(f"{id(item)}-{item.notices}:{kind}:0", kind, item.address,
                                 f"{marker} from work in {item.conversation}")
        outcome = self.model.outcome(item.address.session_id, item.delegation)
        self.expected.append(Expected(marker, item.conversation, item.address.route.message_id,
                                      outcome))
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
            if open_rows[0] == 0 and not self.router._deliveries:
                return
            assert time.monotonic() < deadline, "notifications left undelivered"
            await asyncio.sleep(0.005)

    # invariants ----------------------------------------------------------------

    @invariant()
    def every_notice_went_to_its_owner_once_or_was_parked(self) -> None:
        async def check() -> None:
            parked = {n.text.split()[0]: n.reason for n in await self.outbox.list("parked")}
            for e in self.expected:
                sent = [m for m in self.adapter.sent
                        if m.kind == "notification" and e.marker + " " in m.text + " "]
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


RoutingMachine.TestCase.settings = settings(
    max_examples=int(os.environ.get("HOMING_STATEFUL_EXAMPLES", "40")),
    stateful_step_count=int(os.environ.get("HOMING_STATEFUL_STEPS", "50")),
    deadline=None,
)
test_routing_state_machine = RoutingMachine.TestCase
