"""A claimed batch delivered as a batch (gateway/delivery/router.py): notices posted as
they are go out inline, a few conversations at once, each conversation's in order, its
lane held meanwhile — and nothing a user sees changes: the order, the one message each,
a message said meanwhile answered after them, one slow chat holding up no other, and a
stop in the middle losing and doubling nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

import gateway.delivery.router as router_module
from gateway.config.settings import Config
from gateway.daemon.assembly import Gateway, running_gateway
from gateway.delivery.notifications import NewNotification
from gateway.words.events import MessageKind, NoticeInfo, SendResult
from gateway.words.return_address import ReturnAddress
from gateway.words.route import Route
from tests.conftest import make_config
from tests.helpers import eventually, settled
from tests.memory_platform import MemoryAdapter

HOUR = 3600.0


@pytest.fixture(autouse=True)
def hour_long_polls(monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever is delivered was woken for, not found by the slow poll."""
    monkeypatch.setattr(router_module, "IDLE_POLL_SECONDS", HOUR)


class GatedAdapter(MemoryAdapter):
    """A memory platform whose sends to the chats in ``stuck`` wait until let go."""

    def __init__(self) -> None:
        super().__init__("memory", send_delay=0.001)
        self.stuck: set[str] = set()
        self.waiting: set[str] = set()
        self._go = asyncio.Event()

    def let_go(self) -> None:
        self._go.set()

    async def send(self, route: Route, text: str, *, kind: MessageKind = "reply",
                   session_id: str | None = None, dedupe_key: str | None = None,
                   notice: NoticeInfo | None = None) -> SendResult:
        if route.chat_id in self.stuck:
            self.waiting.add(route.chat_id)
            await self._go.wait()
        return await super().send(route, text, kind=kind, session_id=session_id,
                                  dedupe_key=dedupe_key, notice=notice)


def _config(tmp_path: Path, **settings: object) -> Config:
    return make_config(tmp_path / "home", platforms__web__enabled=False, **settings)


@asynccontextmanager
async def _gateway(config: Config, adapter: MemoryAdapter) -> AsyncIterator[Gateway]:
    async with running_gateway(config, [adapter]) as gw:
        yield gw


async def _address(gw: Gateway, chat: str) -> ReturnAddress:
    route = Route("memory", "dm", chat, user_id=chat)
    key = gw.runner.session_key_for(route)
    session = await gw.store.get_or_create(key, route)
    return ReturnAddress(key, session.id, route)


def _notice(name: str, address: ReturnAddress, **extra: str) -> NewNotification:
    return NewNotification(f"{name}:completion:0", "completion", address,
                           f"Job {name} finished", job_id=name, **extra)


def _said(adapter: MemoryAdapter, chat: str) -> list[str]:
    return [m.text.split()[1] for m in adapter.sent
            if m.route.chat_id == chat and m.text.startswith("Job ")]


async def test_a_conversations_notices_keep_their_order_across_inline_posts_and_its_lane(
        tmp_path: Path) -> None:
    """The second notice carries a file, so it goes through the lane; the third, posted
    as it is, must not overtake it by going inline."""
    adapter = MemoryAdapter("memory", send_delay=0.001)
    artifact = tmp_path / "report.txt"
    artifact.write_text("the report\n")
    async with _gateway(_config(tmp_path), adapter) as gw:
        here = await _address(gw, "1")
        await gw.outbox.produce([_notice("a1", here),
                                 _notice("a2", here, file_path=str(artifact)),
                                 _notice("a3", here), _notice("a4", here)])
        await settled(gw)
    assert _said(adapter, "1") == ["a1", "a2", "a3", "a4"]


async def test_a_message_said_while_notices_are_posted_is_answered_after_them(
        tmp_path: Path) -> None:
    adapter = GatedAdapter()
    adapter.stuck.add("1")
    async with _gateway(_config(tmp_path), adapter) as gw:
        here = await _address(gw, "1")
        await gw.outbox.produce([_notice(f"n{i}", here) for i in range(5)])
        await eventually(lambda: "1" in adapter.waiting, what="the first notice being sent")
        assert gw.runner.is_busy(here.session_key)  # the conversation's lane is held
        answered = adapter.receive("hello", here.route)
        await asyncio.sleep(0.05)  # a turn that did not wait would have answered by now
        assert not answered.done()
        adapter.let_go()
        assert await answered == "handled"
        await settled(gw)
    texts = [m.text for m in adapter.sent_to(here.route)]
    assert [t.split()[1] for t in texts[:5]] == [f"n{i}" for i in range(5)]
    assert texts[5].startswith("Received: hello")


async def test_one_slow_chat_holds_up_no_other_conversation_of_the_batch(
        tmp_path: Path) -> None:
    adapter = GatedAdapter()
    adapter.stuck.add("slow")
    async with _gateway(_config(tmp_path), adapter) as gw:
        slow = await _address(gw, "slow")
        others = [await _address(gw, f"c{i}") for i in range(20)]
        notices = [_notice("slow-1", slow), _notice("slow-2", slow)]
        notices += [_notice(f"o{i}", address) for i, address in enumerate(others)]
        await gw.outbox.produce(notices)  # one commit: one claimed batch
        await eventually(lambda: all(_said(adapter, f"c{i}") == [f"o{i}"]
                                     for i in range(20)),
                         what="every other conversation's notice while one chat is stuck")
        assert _said(adapter, "slow") == []
        adapter.let_go()
        await settled(gw)
    assert _said(adapter, "slow") == ["slow-1", "slow-2"]


async def test_a_stop_while_a_notice_is_being_posted_gives_it_back_and_the_next_life_sends_it_once(
        tmp_path: Path) -> None:
    config = _config(tmp_path, shutdown__drain_timeout_seconds=0.2)
    stuck = GatedAdapter()
    stuck.stuck.add("1")
    async with _gateway(config, stuck) as gw:
        here = await _address(gw, "1")
        await gw.outbox.produce([_notice("n1", here), _notice("n2", here)])
        await eventually(lambda: "1" in stuck.waiting, what="the first notice being sent")
    # the drain ran out: both went back to the outbox, untried and unrecorded
    adapter = MemoryAdapter("memory", send_delay=0.001)
    async with _gateway(config, adapter) as gw:
        await settled(gw)
        rows = sorted(await gw.outbox.list(), key=lambda n: n.id)
    assert [(n.job_id, n.state) for n in rows] == [("n1", "delivered"), ("n2", "delivered")]
    assert _said(adapter, "1") == ["n1", "n2"] and _said(stuck, "1") == []
