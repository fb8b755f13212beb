"""The window between a send and its record is one send, never a batch.

A notice that went out is recorded (its sent id, its transcript line) before the next
send of its conversation starts, whether it was posted inline with a batch or given
its owner's turn in the lane: a ``kill -9`` can leave at most the one send under way
unrecorded. After such a kill that send's row comes back marked as interrupted, and
before it is sent again the platform is asked whether it went out, where the platform
can tell; where it cannot and does not deduplicate (Telegram), it is sent again and
logged as ``maybe_repeated`` with the notice's id. It goes alone, under the key it had,
never merged anew with other notices (a platform that deduplicates by key would not
recognise it inside another message).
"""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest
import structlog

import gateway.delivery.router as router_module
from gateway.config.settings import Config
from gateway.daemon.assembly import Gateway, running_gateway
from gateway.delivery.notifications import NewNotification
from gateway.words.events import MessageKind, NoticeInfo, SendResult
from gateway.words.return_address import ReturnAddress
from gateway.words.route import Route
from tests.conftest import make_config
from tests.helpers import eventually_async, settled
from tests.memory_platform import MemoryAdapter

CONVERSATIONS = 8
PER_CONVERSATION = 6
#: a claimer whose process is gone: what a kill -9 leaves on its claimed rows
DEAD_ROUTER = "router-4194301-1-dead00"


@pytest.fixture(autouse=True)
def hour_long_polls(monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever is delivered was woken for, not found by the slow poll."""
    monkeypatch.setattr(router_module, "IDLE_POLL_SECONDS", 3600.0)


def _config(tmp_path: Path) -> Config:
    return make_config(tmp_path / "home", platforms__web__enabled=False)


class RecordWatchingAdapter(MemoryAdapter):
    """A memory platform that, as each notice's send begins, reads the state database
    for the notices it posted before into the same chat: any that is neither recorded as
    sent nor delivered is one a kill at this instant would send a second time.

    The read is synchronous on purpose: a real send's first bytes leave without the
    sender yielding, so nothing may be given the chance to commit first."""

    def __init__(self, state_db: Path) -> None:
        super().__init__("memory")
        self._state_db = state_db
        #: by chat, the idempotency keys of the notices posted there so far
        self.posted: dict[str, list[str]] = {}
        #: (the notice being sent, an earlier one of its chat not recorded yet)
        self.unrecorded: list[tuple[str, str]] = []

    async def send(self, route: Route, text: str, *, kind: MessageKind = "reply",
                   session_id: str | None = None, dedupe_key: str | None = None,
                   notice: NoticeInfo | None = None) -> SendResult:
        if kind == "notification" and dedupe_key is not None:
            key = dedupe_key.rsplit(":", 1)[0]
            earlier = self.posted.setdefault(route.chat_id, [])
            if earlier:
                with sqlite3.connect(f"file:{self._state_db}?mode=ro", uri=True) as db:
                    recorded = {k for (k,) in db.execute(
                        "SELECT idempotency_key FROM notifications WHERE "
                        "sent_message_id IS NOT NULL OR state = 'delivered'")}
                self.unrecorded += [(key, e) for e in earlier if e not in recorded]
            earlier.append(key)
        return await super().send(route, text, kind=kind, session_id=session_id,
                                  dedupe_key=dedupe_key, notice=notice)


async def _addresses(gw: Gateway, adapter: MemoryAdapter) -> list[ReturnAddress]:
    addresses = []
    for chat in range(1, CONVERSATIONS + 1):
        route = Route("memory", "dm", str(chat), user_id=str(chat))
        assert await adapter.receive("hello", route) == "handled"
        session = await gw.store.live_session(f"agent:main:memory:dm:{chat}")
        assert session is not None
        addresses.append(ReturnAddress(session.session_key, session.id, route))
    return addresses


def _notices(addresses: list[ReturnAddress]) -> list[NewNotification]:
    """Every conversation's notices, made in turns as a busy daemon's jobs end."""
    return [NewNotification(f"c{chat}n{i}:completion:0", "completion", address,
                            f"Job c{chat}n{i} finished: exit code 0 after {i} s.",
                            job_id=f"c{chat}n{i}")
            for i in range(1, PER_CONVERSATION + 1)
            for chat, address in enumerate(addresses, start=1)]


def _jobs_sent(adapter: MemoryAdapter, chat: int) -> list[str]:
    return [m.text.split()[1] for m in adapter.sent
            if m.kind == "notification" and m.route.chat_id == str(chat)]


async def test_each_notice_is_recorded_before_the_next_send_of_its_conversation_starts(
        tmp_path: Path) -> None:
    """Eight conversations' notices claimed as one batch and posted inline, the
    conversations side by side: at the start of every send, every earlier notice of
    that chat is recorded already."""
    config = _config(tmp_path)
    adapter = RecordWatchingAdapter(config.state_db)
    async with running_gateway(config, [adapter]) as gw:
        addresses = await _addresses(gw, adapter)
        await gw.outbox.produce(_notices(addresses))
        await settled(gw)
    for chat in range(1, CONVERSATIONS + 1):
        assert _jobs_sent(adapter, chat) == [f"c{chat}n{i}"
                                             for i in range(1, PER_CONVERSATION + 1)]
    assert adapter.unrecorded == []


async def test_a_notice_given_its_owners_turn_is_recorded_before_the_next_one_goes(
        tmp_path: Path) -> None:
    """The conversations' lanes are busy when the notices come, so each goes through
    its lane as the owner's turn (the runner's send): the same bound there."""
    config = _config(tmp_path)
    adapter = RecordWatchingAdapter(config.state_db)
    async with running_gateway(config, [adapter]) as gw:
        addresses = await _addresses(gw, adapter)
        busy = asyncio.Event()
        lanes = [gw.runner.run_in_lane(a.session_key, busy.wait) for a in addresses]
        await gw.outbox.produce(_notices(addresses))

        async def all_queued() -> bool:
            return sum(gw.runner.lanes.waiting(a.session_key) for a in addresses) \
                == CONVERSATIONS * PER_CONVERSATION

        await eventually_async(all_queued, what="every notice queued behind its busy lane")
        busy.set()
        await asyncio.gather(*lanes)
        await settled(gw)
    for chat in range(1, CONVERSATIONS + 1):
        assert _jobs_sent(adapter, chat) == [f"c{chat}n{i}"
                                             for i in range(1, PER_CONVERSATION + 1)]
    assert adapter.unrecorded == []


class ConfirmingAdapter(MemoryAdapter):
    """A platform that can tell whether a send keyed so went out (``answer``), and
    notes what it was asked."""

    def __init__(self, answer: bool | None) -> None:
        super().__init__("memory")
        self.answer = answer
        self.asked: list[str] = []

    async def delivered(self, route: Route, dedupe_key: str) -> bool | None:
        self.asked.append(dedupe_key)
        return self.answer


async def _interrupted_notices(config: Config, count: int) -> list[int]:
    """``count`` notices of one conversation, the first as a kill -9 leaves the one send
    under way: claimed by a router that is gone, nothing of its send recorded; the rest
    pending. Their ids."""
    adapter = MemoryAdapter("memory")
    async with running_gateway(config, [adapter]) as gw:
        (address, *_) = await _addresses(gw, adapter)
        await gw.router.stop()  # (nothing delivers them in this life)
        await gw.outbox.produce([
            NewNotification(f"k{i}:completion:0", "completion", address,
                            f"Job k{i} finished: exit code 0 after {i} s.", job_id=f"k{i}")
            for i in range(1, count + 1)])
        ids = sorted(n.id for n in await gw.outbox.list())
    with sqlite3.connect(config.state_db) as db:
        db.execute("UPDATE notifications SET state = 'claimed', claimed_by = ?, "
                   "claimed_at = created_at WHERE id = ?", (DEAD_ROUTER, ids[0]))
    return ids


async def _after_the_restart(config: Config, adapter: MemoryAdapter, count: int
                             ) -> list[dict[str, object]]:
    with structlog.testing.capture_logs() as logs:
        async with running_gateway(config, [adapter]) as gw:
            async def delivered() -> bool:
                rows = await gw.outbox.list()
                return len(rows) == count and {n.state for n in rows} == {"delivered"}

            await eventually_async(delivered, what="the notices delivered after the restart")
            await settled(gw)
            session = await gw.store.live_session("agent:main:memory:dm:1")
            assert session is not None
            lines = [line.text for line in await gw.store.messages(session.id)]
    assert sum("Job k1 finished" in line for line in lines) == 1  # in the transcript once
    return logs


async def test_an_interrupted_send_the_platform_says_went_out_is_not_sent_again(
        tmp_path: Path) -> None:
    config = _config(tmp_path)
    (interrupted,) = await _interrupted_notices(config, 1)
    adapter = ConfirmingAdapter(answer=True)
    logs = await _after_the_restart(config, adapter, 1)
    assert adapter.asked == ["k1:completion:0:0"]
    assert [m for m in adapter.sent if m.kind == "notification"] == []
    assert any(e["event"] == "notification_sent_before_stop"
               and e["notification_id"] == interrupted for e in logs)
    assert not any(e["event"] == "maybe_repeated" for e in logs)


async def test_an_interrupted_send_the_platform_says_never_went_out_is_sent_once(
        tmp_path: Path) -> None:
    config = _config(tmp_path)
    await _interrupted_notices(config, 1)
    adapter = ConfirmingAdapter(answer=False)
    logs = await _after_the_restart(config, adapter, 1)
    assert [m.text for m in adapter.sent if m.kind == "notification"] == [
        "Job k1 finished: exit code 0 after 1 s."]
    assert not any(e["event"] == "maybe_repeated" for e in logs)


async def test_where_the_platform_cannot_tell_an_interrupted_send_is_logged_maybe_repeated(
        tmp_path: Path) -> None:
    config = _config(tmp_path)
    (interrupted,) = await _interrupted_notices(config, 1)
    adapter = ConfirmingAdapter(answer=None)
    logs = await _after_the_restart(config, adapter, 1)
    assert len([m for m in adapter.sent if m.kind == "notification"]) == 1
    (repeated,) = [e for e in logs if e["event"] == "maybe_repeated"]
    assert repeated["notification_id"] == interrupted
    assert repeated["job_id"] == "k1"


async def test_an_interrupted_notice_goes_alone_under_its_key_though_the_chat_is_short(
        tmp_path: Path) -> None:
    """The chat takes nothing more now, so its waiting notices go together — but the
    one that may have gone out before the kill goes as it went then, alone and under
    its own key (a platform that deduplicates posts it once), and the others after it,
    together."""
    config = _config(tmp_path)
    await _interrupted_notices(config, 3)
    adapter = ConfirmingAdapter(answer=None)
    adapter.room = 0
    await _after_the_restart(config, adapter, 3)
    first, *rest = [m for m in adapter.sent if m.kind == "notification"]
    assert first.dedupe_key == "k1:completion:0:0"
    assert first.text == "Job k1 finished: exit code 0 after 1 s."
    assert len(rest) == 1 and "2 notices at once" in rest[0].text
    assert "Job k2 " in rest[0].text and "Job k3 " in rest[0].text



class LateConnectingAdapter(ConfirmingAdapter):
    """A platform not connected yet when the restarted router first claims (as Slack's
    socket or Discord's gateway often are), and able to tell what went out."""

    def __init__(self) -> None:
        super().__init__(answer=True)
        self.is_connected = False

    @property
    def connected(self) -> bool:
        return self.is_connected


async def test_an_interrupted_notice_still_asks_after_a_retry_before_its_platform_connects(
        tmp_path: Path) -> None:
    """The first try after the restart finds the platform not connected and gives the
    notice back for a retry; that retry still knows the notice may have gone out before
    the kill, asks, and does not post it a second time."""
    config = _config(tmp_path)
    await _interrupted_notices(config, 1)
    adapter = LateConnectingAdapter()
    async with running_gateway(config, [adapter]) as gw:
        async def given_back() -> bool:
            rows = await gw.outbox.list()
            return len(rows) == 1 and rows[0].state == "pending" and rows[0].attempts == 1

        await eventually_async(given_back, what="the notice given back: not connected")
        adapter.is_connected = True
        await gw.outbox.make_due("agent:main:memory")
        gw.router.wake()

        async def delivered() -> bool:
            return [n.state for n in await gw.outbox.list()] == ["delivered"]

        await eventually_async(delivered, what="the notice delivered once connected")
        await settled(gw)
    assert adapter.asked == ["k1:completion:0:0"]
    assert [m for m in adapter.sent if m.kind == "notification"] == []
