"""The one fence: what the core sends through an adapter goes out while this life
may act, and nothing does once it is over — whichever kind of send it is."""

from __future__ import annotations

import asyncio
from pathlib import Path

from gateway.contract.approval import ApprovalRecord, ApprovalState
from gateway.contract.fenced import FencedAdapter
from gateway.words.events import MessageKind, SendResult
from gateway.words.return_address import ReturnAddress
from gateway.words.route import Route
from tests.memory_platform import MemoryAdapter

DM = Route("memory", "dm", "7", user_id="7")


class Everything(MemoryAdapter):
    """A platform that records every kind of call the core may make."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    async def send_file(self, route: Route, path: Path, caption: str | None = None, *,
                        session_id: str | None = None) -> SendResult:
        self.calls.append(f"file {path.name}")
        return SendResult.sent("f1")

    async def ask_approval(self, route: Route, record: ApprovalRecord) -> SendResult:
        self.calls.append(f"ask {record.id}")
        return SendResult.sent("a1")

    async def settle_approval(self, route: Route, record: ApprovalRecord) -> None:
        self.calls.append(f"settle {record.id}")

    async def typing(self, route: Route, active: bool) -> None:
        self.calls.append(f"typing {active}")

    async def status(self, route: Route, text: str) -> None:
        self.calls.append(f"status {text}")

    def live_reply(self, route: Route, session_id: str | None) -> Live:
        return Live(self)


class Live:
    def __init__(self, adapter: Everything) -> None:
        self.adapter = adapter

    async def show(self, text: str) -> None:
        self.adapter.calls.append(f"preview {text}")

    async def status(self, text: str) -> None:
        self.adapter.calls.append(f"preview status {text}")

    async def finish(self, text: str, *, kind: MessageKind, session_id: str | None,
                     dedupe_key: str | None = None) -> SendResult:
        self.adapter.calls.append(f"final {text}")
        return SendResult.sent("m1")

    async def close(self) -> None:
        self.adapter.calls.append("preview closed")


def record() -> ApprovalRecord:
    return ApprovalRecord(
        id="a1", tool="terminal", command="make", action={}, reason="runs make",
        grant_key="terminal:make", address=ReturnAddress("k", "s", DM), requester="7",
        state=ApprovalState.PENDING, decision=None, decided_by=None, message_id=None,
        ran=None, created_at=0.0, expires_at=60.0, decided_at=None)


async def every_kind_of_send(fenced: FencedAdapter) -> list[SendResult]:
    results = [await fenced.send(DM, "a reply"),
               await fenced.send_file(DM, Path("/tmp/out.log")),
               await fenced.ask_approval(DM, record())]
    await fenced.settle_approval(DM, record())
    await fenced.typing(DM, True)
    await fenced.status(DM, "running make")
    live = fenced.live_reply(DM, "s")
    assert live is not None
    await live.show("half")
    await live.status("reading")
    results.append(await live.finish("all of it", kind="reply", session_id="s"))
    await live.close()
    return results


async def test_a_life_that_may_act_sends_everything_through_the_fence() -> None:
    inner = Everything()

    async def acting() -> bool:
        return True

    results = await every_kind_of_send(FencedAdapter(inner, acting))
    assert all(r.ok for r in results)
    assert [m.text for m in inner.sent] == ["a reply"]
    assert inner.calls == ["file out.log", "ask a1", "settle a1", "typing True",
                           "status running make", "preview half", "preview status reading",
                           "final all of it", "preview closed"]


async def test_a_life_that_is_over_sends_nothing_and_each_send_says_withheld() -> None:
    inner = Everything()

    async def over() -> bool:
        return False

    results = await every_kind_of_send(FencedAdapter(inner, over))
    assert inner.sent == [] and inner.calls == []
    assert all(not r.ok and r.untried for r in results)


async def test_a_send_waits_while_the_renewal_is_overdue_then_goes_once() -> None:
    inner = Everything()
    renewed = asyncio.Event()

    async def overdue_then_renewed() -> bool:
        await renewed.wait()
        return True

    fenced = FencedAdapter(inner, overdue_then_renewed)
    sending = asyncio.ensure_future(fenced.send(DM, "held"))
    await asyncio.sleep(0.05)
    assert not sending.done() and inner.sent == []
    renewed.set()
    assert (await asyncio.wait_for(sending, 30)).ok
    assert [m.text for m in inner.sent] == ["held"]


def test_what_only_the_platform_has_is_reached_through_the_fence() -> None:
    inner = Everything()

    async def acting() -> bool:
        return True

    fenced = FencedAdapter(inner, acting)
    assert fenced.platform == "memory" and fenced.inner is inner
    assert fenced.sent_to(DM) == []  # the platform's own method, not the contract's
