"""Inline keyboards in the fake Telegram server: the buttons a bot puts under its message,
a user's tap on one (a ``callback_query`` update) and the bot's answer to that tap.

Kept apart from the messages because a keyboard has rules of its own — what a button
must hold, what ``callback_data`` may be, which queries can still be answered — while
``telegram_messages`` stores the keyboard with the message it belongs to (sendMessage,
editMessageText, editMessageReplyMarkup). Mixed into
:class:`~tests.fakes.telegram_server.FakeTelegram`::

    await bot.send_message(7, "run it?", reply_markup=InlineKeyboardMarkup(...))
    fake.message_markup(7, 1)        # {"inline_keyboard": [[{"text": ..., ...}]]}
    query_id = fake.press(7, 1, "approve:42")   # the next getUpdates returns the tap
    await bot.answer_callback_query(query_id, text="done")  # fake.callback_answers

Errors as the Bot API answers them: ``callback_data`` outside 1-64 bytes is
``BUTTON_DATA_INVALID``, a bad ``url`` ``BUTTON_URL_INVALID``; an unknown or already
answered query is "query is too old ...". The text for a button with no action, or with
more than one, is the fake's own ("can't parse inline keyboard button: ...").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tests.fakes.telegram_api import ApiError, as_bool, as_json

if TYPE_CHECKING:
    from tests.fakes.telegram_messages import Posted

__all__ = ["BUTTON_DATA_INVALID", "QUERY_INVALID", "BotButtons", "CallbackAnswer",
           "inline_markup"]

JSON = dict[str, Any]

BUTTON_DATA_INVALID = "Bad Request: BUTTON_DATA_INVALID"
BUTTON_URL_INVALID = "Bad Request: BUTTON_URL_INVALID"
QUERY_INVALID = ("Bad Request: query is too old and response timeout expired or "
                 "query ID is invalid")
MAX_CALLBACK_DATA_BYTES = 64


@dataclass
class CallbackAnswer:
    """One successful ``answerCallbackQuery``."""

    id: str
    text: str | None
    show_alert: bool


class BotButtons:
    """The keyboard half of :class:`~tests.fakes.telegram_server.FakeTelegram`."""

    # the state FakeTelegram keeps for it
    _posted: dict[tuple[int, int], Posted]
    raw_update: Callable[[JSON], None]

    def _init_buttons(self) -> None:
        self.callback_answers: list[CallbackAnswer] = []
        self._open_queries: set[str] = set()  # pressed and not answered yet
        self._next_query_id = 4_000_000_000_000_000_000

    # ------------------------------------------------------------------ tests drive

    def message_markup(self, chat_id: int, message_id: int) -> JSON | None:
        """The inline keyboard on a message the bot sent, as it stands now; None if it has
        none, or the message is deleted or was never sent."""
        posted = self._posted.get((chat_id, message_id))
        return None if posted is None else posted.inline_markup

    def press(self, chat_id: int, message_id: int, callback_data: str, *, user_id: int = 1,
              username: str | None = "alice", first_name: str = "Alice") -> str:
        """A user taps a button: queue the ``callback_query`` update Telegram sends and
        return its id (for ``answerCallbackQuery``).

        The message is the bot's as it stands now, chat, topic and keyboard included.
        ``callback_data`` need not be on the keyboard: an old client can send stale data.
        """
        posted = self._posted.get((chat_id, message_id))
        if posted is None:
            raise KeyError(f"the bot has no message {message_id} in chat {chat_id} to press")
        sender: JSON = {"id": user_id, "is_bot": False, "first_name": first_name}
        if username is not None:
            sender["username"] = username
        self._next_query_id += 1
        query_id = str(self._next_query_id)
        self._open_queries.add(query_id)
        self.raw_update({"callback_query": {
            "id": query_id, "from": sender, "message": dict(posted.message),
            "chat_instance": _chat_instance(chat_id), "data": callback_data}})
        return query_id

    # ------------------------------------------------------------------ methods

    async def _answer_callback_query(self, params: dict[str, Any]) -> bool:
        """Each query once; an unknown one, or one answered before, is "too old"."""
        query_id = str(params.get("callback_query_id") or "")
        if query_id not in self._open_queries:
            raise ApiError(400, QUERY_INVALID)
        text = params.get("text")
        if text is not None and len(text) > 200:
            raise ApiError(400, "Bad Request: MESSAGE_TOO_LONG")
        self._open_queries.discard(query_id)
        self.callback_answers.append(CallbackAnswer(
            id=query_id, text=text or None, show_alert=as_bool(params.get("show_alert"))))
        return True


# ---------------------------------------------------------------------- module helpers

def inline_markup(value: Any) -> JSON | None:
    """The inline keyboard a ``reply_markup`` parameter gives a message, checked as the
    Bot API checks it; None for none (an empty keyboard, or a reply keyboard, which
    belongs to the chat and not to the message)."""
    markup = as_json(value)
    if value is not None and value != "" and markup is None:
        raise ApiError(400, "Bad Request: can't parse reply keyboard markup JSON object")
    if not isinstance(markup, dict) or "inline_keyboard" not in markup:
        return None
    rows = markup["inline_keyboard"]
    if not isinstance(rows, list) or not all(isinstance(row, list) for row in rows):
        raise ApiError(400, 'Bad Request: field "inline_keyboard" of the InlineKeyboardMarkup '
                            'should be an Array of Arrays')
    for row in rows:
        for button in row:
            _check_button(button)
    return markup if any(rows) else None


def _check_button(button: Any) -> None:
    if not isinstance(button, dict) or not isinstance(button.get("text"), str):
        raise ApiError(400, "Bad Request: can't parse inline keyboard button: "
                            'Field "text" must be of type String')
    actions = [k for k in _BUTTON_ACTIONS if k in button]
    if len(actions) != 1:
        raise ApiError(400, "Bad Request: can't parse inline keyboard button: "
                            f"exactly one action field is needed, got {actions or 'none'}")
    if "callback_data" in button:
        data = button["callback_data"]
        if not isinstance(data, str) or not 1 <= len(data.encode()) <= MAX_CALLBACK_DATA_BYTES:
            raise ApiError(400, BUTTON_DATA_INVALID)
    if "url" in button:
        url = button["url"]
        if not isinstance(url, str) or not url.startswith(("http://", "https://", "tg://")) \
                or len(url) <= len("https://"):
            raise ApiError(400, BUTTON_URL_INVALID)


def _chat_instance(chat_id: int) -> str:
    """Telegram's opaque, stable id of the chat a message with the button is in."""
    return str(abs(chat_id) * 2_654_435_761 % (1 << 63))


#: the fields of which an InlineKeyboardButton holds exactly one
_BUTTON_ACTIONS = ("url", "callback_data", "web_app", "login_url", "switch_inline_query",
                   "switch_inline_query_current_chat", "switch_inline_query_chosen_chat",
                   "copy_text", "callback_game", "pay")
