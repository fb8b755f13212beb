"""Signs of life while a turn runs: "typing" in its conversation — its topic, its
thread — renewed until the turn ends, and the reply shown as it is written.
Best effort: never the turn's failure. Like every send they go through the fenced
adapter (gateway/contract/fenced.py): they wait while this instance's renewal is
overdue, and show nothing once its life is over: a survivor answers the message
then, and a stalled life must not keep talking."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

import structlog

from gateway.words.route import Route

if TYPE_CHECKING:
    from gateway.contract.adapter import Adapter
    from gateway.messages.turn import Turn

log = structlog.get_logger(__name__)

#: "typing" shows for about five seconds on Telegram: renewed this often
TYPING_RENEW_SECONDS = 4.0


@contextlib.asynccontextmanager
async def signs_of_life(adapter: Adapter | None, route: Route) -> AsyncIterator[None]:
    if adapter is None:
        yield
        return

    async def keep_typing() -> None:
        while True:  # (held while this life is overdue, and shown nothing once it is over)
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
            await adapter.typing(route, False)


@contextlib.asynccontextmanager
async def live_reply(adapter: Adapter | None, turn: Turn) -> AsyncIterator[None]:
    """``turn.live`` for the turn's duration, where its platform shows replies growing;
    closed at the end, /stop included, so no half-written preview is left behind."""
    shown = (adapter.live_reply(turn.route, turn.session.id)
             if adapter is not None and turn.may_stream else None)
    if shown is None:
        yield
        return
    turn.live = live = shown
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
