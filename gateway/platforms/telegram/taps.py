"""A tap on a button (a callback query), answered: Telegram shows the answer to the one
who tapped and stops the button's spinner. Each query is answered once; the approval
buttons and the choice buttons both answer through here."""

from __future__ import annotations

import structlog
from telegram import Bot, CallbackQuery
from telegram.error import TelegramError

__all__ = ["answer_tap"]

log = structlog.get_logger(__name__)

#: Telegram shows at most this much of a callback answer
ANSWER_LIMIT = 200


async def answer_tap(bot: Bot | None, query: CallbackQuery, note: str = "", *,
                     alert: bool = False) -> None:
    """Answer ``query`` (once: Telegram refuses a second answer as "too old"). A failure
    is logged: the tap was taken all the same."""
    if bot is None:
        log.warning("telegram_callback_not_answered", query_id=query.id,
                    reason="telegram is not connected")
        return
    if len(note) > ANSWER_LIMIT:
        note = note[:ANSWER_LIMIT - 1] + "…"
    try:
        await bot.answer_callback_query(query.id, text=note or None, show_alert=alert)
    except TelegramError as exc:  # the tap timed out on the user's side; it still counts
        log.warning("telegram_callback_not_answered", query_id=query.id, error=str(exc))
