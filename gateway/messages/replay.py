"""At start-up: what a stopped process had journaled and not answered, handled once and
in order — or, for a message whose turn had already done something that lasts, its
conversation told that it may not have finished (never done twice).

A message whose reply went out just before the stop, its record lost with it, is
finished as an answered one is, where the platform can show that reply
(``Adapter.delivered``: Matrix finds the bot's event by its transaction id): no second
answer, and no word that it may not have finished after the answer itself.

The daemon queues the replay before the platforms connect, so in each conversation's
lane it comes before anything new; the replayed work then waits for its platform.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol

import structlog

from gateway.config.registry import dedupes_sends
from gateway.inbound.journal import EntryState, JournalEntry
from gateway.words.events import reply_key

if TYPE_CHECKING:
    from gateway.contract.adapter import Adapter
    from gateway.inbound.journal import Inbound
    from gateway.words.events import MessageOutcome, SendResult

log = structlog.get_logger(__name__)


class ReplayHost(Protocol):
    """What a replay asks of the message path (the runner): the journal, the lanes,
    the platforms, and a journaled message's turn."""

    @property
    def inbound(self) -> Inbound: ...

    @property
    def adapters(self) -> Mapping[str, Adapter]: ...

    def run_in_lane(self, session_key: str,
                    work: Callable[[], Awaitable[Any]]) -> asyncio.Future[Any]: ...

    async def handle_entry(self, key: str, entry: JournalEntry, *,
                           replayed: bool = False) -> MessageOutcome: ...

    async def tell(self, entry: JournalEntry, text: str) -> SendResult: ...


class Replay:
    def __init__(self, runner: ReplayHost) -> None:
        self.runner = runner
        self._connecting = asyncio.Event()  # set once the adapters' connect has begun
        self._connecting.set()

    def hold(self) -> None:
        """Replayed messages wait until :meth:`release` (their platforms start)."""
        self._connecting.clear()

    def release(self) -> None:
        self._connecting.set()

    async def __call__(self) -> int:
        """Queue every unfinished entry in its conversation's lane; how many there were."""
        runner = self.runner
        entries = await runner.inbound.unfinished()
        for entry in entries:
            log.info("message_replayed", entry_id=entry.id, platform=entry.platform,
                     platform_id=entry.platform_id, state=entry.state)
            if entry.state == "replied":  # answered; only its end was not recorded
                runner.inbound.finished(entry.id)
            elif entry.state == "acted":  # it started something: never twice
                runner.run_in_lane(entry.session_key, partial(self._interrupted, entry))
            else:  # nothing of it lasted, not even a reply: handled again
                runner.run_in_lane(entry.session_key, partial(self._replayed, entry))
        if entries:
            log.info("inbound_replayed", messages=len(entries))
        return len(entries)

    async def _replayed(self, entry: JournalEntry) -> MessageOutcome:
        await self._platform_ready(entry.platform)
        if entry.state == EntryState.STARTED:
            answered = await self._answered(entry)
            if answered:
                return "handled"
            if answered is None and not dedupes_sends(entry.platform):
                log.warning("maybe_repeated", entry_id=entry.id,
                            session_key=entry.session_key, platform=entry.platform,
                            platform_id=entry.platform_id,
                            reason="its gateway stopped during the message's turn; the "
                                   "platform cannot tell whether its reply went out")
        return await self.runner.handle_entry(entry.session_key, entry, replayed=True)

    async def _interrupted(self, entry: JournalEntry) -> MessageOutcome:
        await self._platform_ready(entry.platform)
        if await self._answered(entry):
            return "handled"
        self.runner.inbound.finished(entry.id)
        await self.runner.tell(entry, f"(The gateway stopped while it was handling “"
                                      f"{' '.join(entry.event.text.split())[:60]}”; it may "
                                      f"not have finished. Send it again if needed.)")
        return "handled"

    async def _answered(self, entry: JournalEntry) -> bool | None:
        """Whether the platform shows the message's first reply out before the stop: then
        it is finished, as a ``replied`` one is. None: it cannot tell (or the look
        failed), which is not answered."""
        adapter = self.runner.adapters.get(entry.platform)
        if adapter is None:
            return None
        try:
            sent = await adapter.delivered(entry.event.route, reply_key(entry.dedupe_key, 0))
        except Exception:  # a look that failed: the message is treated as not answered
            log.warning("reply_lookup_failed", entry_id=entry.id, platform=entry.platform,
                        exc_info=True)
            return None
        if sent is not True:
            return sent
        log.info("message_answered_before_stop", entry_id=entry.id, platform=entry.platform,
                 platform_id=entry.platform_id, state=entry.state)
        self.runner.inbound.finished(entry.id)
        return True

    async def _platform_ready(self, platform: str, timeout: float = 60.0) -> None:
        await self._connecting.wait()
        adapter = self.runner.adapters.get(platform)
        if adapter is not None:
            try:
                await adapter.wait_connected(timeout)
            except (TimeoutError, ConnectionError):
                log.warning("platform_not_ready_for_replay", platform=platform)
