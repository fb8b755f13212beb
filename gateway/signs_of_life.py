"""Signs of life while a turn runs: "typing" in its conversation — its topic, its
thread — renewed until the turn ends. Best effort: never the turn's failure."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

import structlog

from .route import Route

if TYPE_CHECKING:
    from .platforms.base import Adapter

log = structlog.get_logger(__name__)

#: "typing" shows for about five seconds on Telegram: renewed this often
TYPING_RENEW_SECONDS = 4.0


@contextlib.asynccontextmanager
async def signs_of_life(adapter: Adapter | None, route: Route) -> AsyncIterator[None]:
    if adapter is None:
        yield
        return

    async def keep_typing() -> None:
        while True:
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
