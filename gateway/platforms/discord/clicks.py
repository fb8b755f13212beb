"""A click on one of our buttons is an interaction Discord wants answered exactly once,
within three seconds; what the answer says is its button's business (approvals.py,
choices.py). An answer that cannot be given is logged, never raised: whatever the click
decided stands, and the one who clicked sees it in the channel."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import discord
import structlog

__all__ = ["answer_once"]


async def answer_once(respond: Callable[[], Awaitable[object]],
                      click: structlog.typing.FilteringBoundLogger, event: str) -> None:
    """``respond()`` (one ``interaction.response`` call); a failure is logged as ``event``."""
    try:
        await respond()
    except discord.NotFound as exc:  # 10062: answered too late, or the click is unknown
        click.warning(event, error=str(exc),
                      hint="Discord wants an answer within 3 s; what the click did "
                           "stands all the same")
    except (discord.HTTPException, discord.InteractionResponded) as exc:  # 40060: twice
        click.warning(event, error=str(exc))
