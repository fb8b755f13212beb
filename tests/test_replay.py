"""A message whose turn a kill cut short is handled again at start — and where the
platform can neither show whether its reply went out nor posts a repeat once
(Telegram), the possible second answer is logged ``maybe_repeated`` with the
message's journal id, so an operator can find the one the person may see twice."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from structlog.testing import capture_logs

from gateway.inbound.journal import EntryState, JournalEntry
from gateway.messages.replay import Replay
from gateway.words.events import MessageEvent, SendResult
from gateway.words.route import Route


class Platform:
    """An adapter as far as a replay asks it: connected, and what it knows of a send."""

    def __init__(self, knows: bool | None) -> None:
        self.knows = knows
        self.asked: list[str] = []

    async def wait_connected(self, timeout: float) -> None:
        return None

    async def delivered(self, route: Route, dedupe_key: str) -> bool | None:
        self.asked.append(dedupe_key)
        return self.knows


class Journal:
    def __init__(self, entries: list[JournalEntry]) -> None:
        self.entries = entries
        self.ended: list[int] = []

    async def unfinished(self) -> list[JournalEntry]:
        return self.entries

    def finished(self, entry_id: int) -> None:
        self.ended.append(entry_id)


class Host:
    """The message path as a replay sees it; each lane's work runs at once."""

    def __init__(self, platform: str, adapter: Platform, entry: JournalEntry) -> None:
        self.inbound = Journal([entry])
        self.adapters = {platform: adapter}
        self.handled: list[int] = []
        self.told: list[str] = []
        self.lanes: list[asyncio.Future[Any]] = []

    def run_in_lane(self, session_key: str,
                    work: Callable[[], Awaitable[Any]]) -> asyncio.Future[Any]:
        future = asyncio.ensure_future(work())
        self.lanes.append(future)
        return future

    async def handle_entry(self, key: str, entry: JournalEntry, *,
                           replayed: bool = False) -> Any:
        self.handled.append(entry.id)
        return "handled"

    async def tell(self, entry: JournalEntry, text: str) -> SendResult:
        self.told.append(text)
        return SendResult(ok=True)


def started(platform: str, entry_id: int = 7) -> JournalEntry:
    route = Route(platform, "group", "-1001", thread_id="42", user_id="5")
    now = time.time()
    return JournalEntry(entry_id, platform, f"upd-{entry_id}", f"agent:main:{platform}:x",
                        MessageEvent(text="hello", route=route), now, now,
                        EntryState.STARTED.value)


async def replay(platform: str, knows: bool | None) -> tuple[Host, list[dict[str, Any]]]:
    host = Host(platform, Platform(knows), started(platform))
    with capture_logs() as logs:
        await Replay(host)()  # type: ignore[arg-type]
        await asyncio.gather(*host.lanes)
    return host, logs


async def test_a_telegram_turn_cut_short_is_run_again_and_logged_maybe_repeated() -> None:
    host, logs = await replay("telegram", None)
    assert host.handled == [7]
    doubts = [e for e in logs if e["event"] == "maybe_repeated"]
    assert [(e["entry_id"], e["platform"], e["platform_id"]) for e in doubts] == [
        (7, "telegram", "upd-7")]


@pytest.mark.parametrize("platform", ["discord", "web"])
async def test_where_a_repeat_posts_once_a_turn_run_again_is_not_doubted(
        platform: str) -> None:
    host, logs = await replay(platform, None)
    assert host.handled == [7]
    assert [e for e in logs if e["event"] == "maybe_repeated"] == []


async def test_a_turn_whose_reply_the_platform_shows_out_is_finished_not_run_again() -> None:
    host, logs = await replay("slack", True)
    assert host.handled == []
    assert host.inbound.ended == [7]
    assert [e for e in logs if e["event"] == "maybe_repeated"] == []
