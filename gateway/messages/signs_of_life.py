"""Signs of life while a turn runs: "typing" in its conversation — its topic, its
thread — renewed until the turn ends, and the reply shown as it is written.
Best effort: never the turn's failure. Like every send they wait while this
instance's renewal is overdue (``acting``), and stop once its life is over: a
survivor answers the message then, and a stalled life must not keep talking."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

import structlog

from gateway.cluster.lives import Acting
from gateway.words.events import MessageKind, SendResult
from gateway.words.route import Route

if TYPE_CHECKING:
    from gateway.contract.adapter import Adapter, LiveReply
    from gateway.messages.turn import Turn

log = structlog.get_logger(__name__)

#: "typing" shows for about five seconds on Telegram: renewed this often
TYPING_RENEW_SECONDS = 4.0


@contextlib.asynccontextmanager
async def signs_of_life(adapter: Adapter | None, route: Route, acting: Acting
                        ) -> AsyncIterator[None]:
    if adapter is None:
        yield
        return

    async def keep_typing() -> None:
        while await acting():
            try:
                await adapter.typing(route, True)
            except Exception as exc:
                log.debug("typing_failed", platform=route.platform, error=str(exc))
            await asyncio.sleep(TYPING_RENEW_SECONDS)

    keeper = asyncio.create_task(keep_typing(), name="typing")
    try:
        yield
    finally:
        keeper.cancel()
        await asyncio.gather(keeper, return_exceptions=True)
        with contextlib.suppress(Exception):
            if await acting():
                await adapter.typing(route, False)


@contextlib.asynccontextmanager
async def live_reply(adapter: Adapter | None, turn: Turn, acting: Acting
                     ) -> AsyncIterator[None]:
    """``turn.live`` for the turn's duration, where its platform shows replies growing;
    closed at the end, /stop included, so no half-written preview is left behind."""
    shown = (adapter.live_reply(turn.route, turn.session.id)
             if adapter is not None and turn.may_stream else None)
    if shown is None:
        yield
        return
    turn.live = live = HeldLive(shown, acting)
    try:
        yield
    finally:
        turn.live = None
        # shielded: a second /stop must not leave a preview behind
        closing = asyncio.ensure_future(live.close())
        try:
            await asyncio.shield(closing)
        except Exception as exc:
            log.warning("live_reply_close_failed", platform=turn.route.platform,
                        error=str(exc))


class HeldLive:
    """A live reply whose preview waits like every send while this life's renewal is
    overdue, and is left as it stands once the life is over. (``finish`` is the final
    message: the runner's ``post`` holds it before it gets here.)"""

    def __init__(self, live: LiveReply, acting: Acting) -> None:
        self._live = live
        self._acting = acting

    async def show(self, text: str) -> None:
        if await self._acting():
            await self._live.show(text)

    async def status(self, text: str) -> None:
        if await self._acting():
            await self._live.status(text)

    async def finish(self, text: str, *, kind: MessageKind, session_id: str | None,
                     dedupe_key: str | None = None) -> SendResult:
        return await self._live.finish(text, kind=kind, session_id=session_id,
                                       dedupe_key=dedupe_key)

    async def close(self) -> None:
        if await self._acting():
            await self._live.close()
