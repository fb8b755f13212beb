"""Choices on Telegram (``Adapter.send_choices``): a button a choice under a message, and
a tap on one taken as the one who tapped sending its command in that message's
conversation — its chat, its topic, anchored on the message.

A tap is handed to the runner like a message (``AdapterHost.receive``, the query's id
as its platform id), so it is authorized like one — someone not allowed is refused as
their message would be — and journaled before anything tells Telegram it was taken:
the tap is answered, and the poll's offset moves past it (or the webhook answers 200),
only once the journal holds it. Handed out again, the journal knows it by its id.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import structlog
from telegram import Bot, CallbackQuery, InlineKeyboardButton, InlineKeyboardMarkup

from gateway.contract.choices import choice_data, parse_choice
from gateway.platforms.telegram.routes import route_of_press
from gateway.platforms.telegram.taps import answer_tap
from gateway.words.events import Choice, MessageEvent, Taken

if TYPE_CHECKING:
    from gateway.contract.host import AdapterHost

__all__ = ["choice_keyboard", "is_choice", "take_choice"]

log = structlog.get_logger(__name__)

#: what the one who tapped is told, by how the runner took the command (none: nothing)
_NOTES: dict[Taken, str] = {
    "unauthorized": "You may not use this bot here.",
    "refused": "That was not taken; send the command instead.",
}


def choice_keyboard(choices: Sequence[Choice]) -> InlineKeyboardMarkup | None:
    """One button a row (labels are whole titles), for each choice whose command fits a
    button's data; None when none does (the text says how to type them)."""
    rows = [[InlineKeyboardButton(choice.label, callback_data=data)]
            for choice in choices if (data := choice_data(choice.command)) is not None]
    return InlineKeyboardMarkup(rows) if rows else None


def is_choice(query: CallbackQuery) -> bool:
    """Whether a tap is on a choice's button (an approval's is not)."""
    return bool(query.data) and parse_choice(query.data or "") is not None


async def take_choice(query: CallbackQuery, host: AdapterHost | None, bot: Bot | None,
                      platform: str) -> bool:
    """The tap as its command from the one who tapped; False while it is not journaled
    (the store failed), so Telegram hands it out again."""
    command = parse_choice(query.data or "")
    route = route_of_press(query, platform)
    if command is None or route is None:
        log.info("telegram_choice_skipped", query_id=query.id,
                 reason="no command" if command is None else "the message is not shown")
        await answer_tap(bot, query, "This button does nothing any more; send the command "
                                     "instead.")
        return True
    if host is None:
        return False  # not connected to the runner yet: asked for again
    received = host.receive(
        MessageEvent(text=command, route=route, message_id=route.message_id),
        platform_id=f"callback:{query.id}")
    taken = await received.journaled
    if taken == "failed":
        log.warning("telegram_choice_not_journaled", query_id=query.id,
                    hint="the tap is asked for again once the store is back")
        return False
    await answer_tap(bot, query, _NOTES.get(taken, ""))
    return True
