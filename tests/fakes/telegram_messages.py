"""The bot's messages in the fake Telegram server: what sendMessage, editMessageText and
deleteMessage do to them, and what a user sees of them.

Kept apart from the rest of the server because it is a store with rules of its own —
message ids per chat, topics, replies, the length limit counted in UTF-16 units of the
text as parsed, and the Bot API's answers to an edit that finds nothing, changes nothing
or is too long — while the server handles polling, commands and the HTTP side. Mixed
into :class:`~tests.fakes.telegram_server.FakeTelegram`, which holds the store.

As on Telegram, a message sent with ``parse_mode="HTML"`` is parsed (``telegram_entities``)
before anything else is checked, and the Message answered carries the text the user
sees plus its ``entities``; the fake keeps the raw text as sent too (``message_text``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from tests.fakes.telegram_api import (
    ApiError,
    Failure,
    as_int,
    as_json,
    consume_failure,
    message_key,
)
from tests.fakes.telegram_buttons import inline_markup
from tests.fakes.telegram_entities import Rendered, render, utf16_len

__all__ = ["MAX_MESSAGE_LENGTH", "BotMessages", "EditRecord", "Posted", "SentRecord",
           "guess_chat", "check_thread", "utf16_len"]

JSON = dict[str, Any]

THREAD_NOT_FOUND = "Bad Request: message thread not found"
EDIT_NOT_FOUND = "Bad Request: message to edit not found"
DELETE_NOT_FOUND = "Bad Request: message to delete not found"
NOT_MODIFIED = ("Bad Request: message is not modified: specified new message content and "
                "reply markup are exactly the same as a current content and reply markup "
                "of the message")
MAX_MESSAGE_LENGTH = 4096


@dataclass
class SentRecord:
    """One successful ``sendMessage`` call, as the fake received it."""

    chat_id: int
    text: str
    message_thread_id: int | None
    reply_to_message_id: int | None
    parse_mode: str | None
    message_id: int
    params: dict[str, Any] = field(repr=False)  # the request parameters, values as sent
    #: when it was sent (time.monotonic: tests compare it with when they killed a peer)
    at: float = field(default_factory=time.monotonic, repr=False)


@dataclass
class EditRecord:
    """One successful ``editMessageText`` call, as the fake received it."""

    chat_id: int
    message_id: int
    text: str
    message_thread_id: int | None  # the edited message's thread (an edit cannot move it)
    parse_mode: str | None
    params: dict[str, Any] = field(repr=False)  # the request parameters, values as sent


@dataclass
class Posted:
    """A message the bot sent, as it stands now (after its edits)."""

    message: JSON  # the Message object the API answers, text and edit_date kept current
    raw_text: str  # the text (or a file's caption) as sent, markup and all
    parse_mode: str | None
    inline_markup: JSON | None  # the inline keyboard, part of what "not modified" compares

    def __post_init__(self) -> None:
        self.set_markup(self.inline_markup)

    def set_markup(self, markup: JSON | None) -> None:
        """Put on (or, with None, take off) the message's inline keyboard; the Message
        answered and sent in callback queries carries it as ``reply_markup``."""
        self.inline_markup = markup
        if markup is None:
            self.message.pop("reply_markup", None)
        else:
            self.message["reply_markup"] = markup

    @property
    def thread_id(self) -> int | None:
        return self.message.get("message_thread_id")

    @property
    def is_text(self) -> bool:
        """A text message (not a photo or a document, whose caption is not its text)."""
        return "text" in self.message


class BotMessages:
    """The message half of :class:`~tests.fakes.telegram_server.FakeTelegram`.

    Numbers messages with FakeTelegram's ``_next_message_id`` and wakes its waiters
    with ``_wake``.
    """

    # the state FakeTelegram keeps for it
    bot_user: JSON
    sent: list[SentRecord]
    edits: list[EditRecord]
    deleted: set[tuple[int, int]]
    deleted_threads: set[tuple[int, int]]
    _chats: dict[int, JSON]
    _posted: dict[tuple[int, int], Posted]
    _user_messages: set[tuple[int, int]]
    _send_failures: list[Failure]
    _edit_failures: list[Failure]
    _delete_failures: list[Failure]

    # ------------------------------------------------------------------ what a user sees

    def message_text(self, chat_id: int, message_id: int) -> str | None:
        """The current text of a message the bot sent, as sent (HTML markup and all);
        None if deleted or never sent."""
        posted = self._posted.get((chat_id, message_id))
        return None if posted is None else posted.raw_text

    def visible_text(self, chat_id: int, message_id: int) -> str | None:
        """What the user sees of that message now (tags gone, entities unescaped): its
        text, or a photo's or document's caption; None if deleted or never sent."""
        posted = self._posted.get((chat_id, message_id))
        return None if posted is None else posted.message.get("text",
                                                              posted.message.get("caption"))

    def visible(self, chat_id: int, thread_id: int | None = None) -> list[str]:
        """What a user sees of the bot in that chat: the current texts (as rendered, so
        without HTML markup) of its undeleted text messages in the topic ``thread_id``
        (None: outside any topic), oldest first. Files are in ``sent_files``."""
        return [p.message["text"] for (chat, _), p in sorted(self._posted.items())
                if chat == chat_id and p.thread_id == thread_id and p.is_text]

    # ------------------------------------------------------------------ methods

    async def _send_message(self, params: dict[str, Any]) -> JSON:
        try:
            chat_id = int(params.get("chat_id", ""))
        except (TypeError, ValueError):
            raise ApiError(400, "Bad Request: chat not found") from None
        text = params.get("text") or ""
        thread_id = as_int(params.get("message_thread_id"))
        reply_params = as_json(params.get("reply_parameters"))
        reply_to = as_int(reply_params.get("message_id")) if isinstance(reply_params, dict) \
            else as_int(params.get("reply_to_message_id"))
        parse_mode = params.get("parse_mode")

        consume_failure(self._send_failures, chat_id, text)
        markup = inline_markup(params.get("reply_markup"))
        rendered = render(text, parse_mode)
        if not rendered.text.strip():
            raise ApiError(400, "Bad Request: message text is empty")
        check_thread(self, chat_id, thread_id)
        if utf16_len(rendered.text) > MAX_MESSAGE_LENGTH:
            raise ApiError(400, "Bad Request: message is too long")

        message = self._new_message(chat_id, thread_id, reply_to)
        message["text"] = rendered.text
        if rendered.entities:
            message["entities"] = rendered.entities
        self._posted[(chat_id, message["message_id"])] = Posted(
            message, text, parse_mode, markup)
        self.sent.append(SentRecord(chat_id=chat_id, text=text, message_thread_id=thread_id,
                                    reply_to_message_id=reply_to, parse_mode=parse_mode,
                                    message_id=message["message_id"], params=params))
        self._wake("sent")
        return message

    async def _edit_message_text(self, params: dict[str, Any]) -> JSON:
        """In the Bot API's order: the text, the message, then what Telegram itself checks."""
        text = params.get("text") or ""
        parse_mode = params.get("parse_mode")
        if "inline_message_id" in params and "chat_id" not in params:
            raise ApiError(400, "Bad Request: MESSAGE_ID_INVALID")  # the fake has none
        chat_id, message_id = message_key(params)
        consume_failure(self._edit_failures, chat_id)
        markup = inline_markup(params.get("reply_markup"))  # none given: the keyboard goes
        rendered = render(text, parse_mode)
        if not rendered.text.strip():
            raise ApiError(400, "Bad Request: message text is empty")
        posted = self._editable(chat_id, message_id)
        if not posted.is_text:
            raise ApiError(400, "Bad Request: there is no text in the message to edit")
        if utf16_len(rendered.text) > MAX_MESSAGE_LENGTH:
            raise ApiError(400, "Bad Request: MESSAGE_TOO_LONG")
        current = posted.message
        if (_content(text, parse_mode, rendered), markup) == \
                (_content(posted.raw_text, posted.parse_mode, None), posted.inline_markup):
            raise ApiError(400, NOT_MODIFIED)

        current.update(text=rendered.text, edit_date=int(time.time()))
        current.pop("entities", None)
        if rendered.entities:
            current["entities"] = rendered.entities
        posted.raw_text, posted.parse_mode = text, parse_mode
        posted.set_markup(markup)
        self.edits.append(EditRecord(chat_id=chat_id, message_id=message_id, text=text,
                                     message_thread_id=posted.thread_id,
                                     parse_mode=parse_mode, params=params))
        self._wake("edits")
        return dict(current)

    async def _edit_message_reply_markup(self, params: dict[str, Any]) -> JSON:
        """Only the keyboard changes (not recorded in ``edits``); none given removes it."""
        if "inline_message_id" in params and "chat_id" not in params:
            raise ApiError(400, "Bad Request: MESSAGE_ID_INVALID")
        chat_id, message_id = message_key(params)
        markup = inline_markup(params.get("reply_markup"))
        posted = self._editable(chat_id, message_id)
        if markup == posted.inline_markup:
            raise ApiError(400, NOT_MODIFIED)
        posted.set_markup(markup)
        posted.message["edit_date"] = int(time.time())
        return dict(posted.message)

    def _editable(self, chat_id: int, message_id: int) -> Posted:
        """The bot's message an edit names; a user's "can't be edited", others not found."""
        posted = self._posted.get((chat_id, message_id))
        if posted is None:
            if (chat_id, message_id) in self._user_messages:
                raise ApiError(400, "Bad Request: message can't be edited")
            raise ApiError(400, EDIT_NOT_FOUND)
        return posted

    async def _delete_message(self, params: dict[str, Any]) -> bool:
        """The bot's own messages, and users' (as an admin, or in a private chat)."""
        key = message_key(params)
        consume_failure(self._delete_failures, key[0])
        if self._posted.pop(key, None) is None:
            if key not in self._user_messages:
                raise ApiError(400, DELETE_NOT_FOUND)
            self._user_messages.discard(key)
        self.deleted.add(key)
        return True

    def _new_message(self, chat_id: int, thread_id: int | None, reply_to: int | None) -> JSON:
        """The Message the bot just posted, before its text or file: numbered per chat,
        in its topic, replying where asked."""
        chat = self._chats.get(chat_id) or guess_chat(chat_id)
        message: JSON = {"message_id": self._next_message_id(chat_id),
                         "date": int(time.time()), "chat": chat, "from": self.bot_user}
        if thread_id is not None:
            message["message_thread_id"] = thread_id
            if chat.get("is_forum"):
                message["is_topic_message"] = True
        if reply_to is not None:
            message["reply_to_message"] = {"message_id": reply_to, "date": message["date"],
                                           "chat": chat}
        return message


# ---------------------------------------------------------------------- module helpers

def _content(text: str, parse_mode: str | None,
             rendered: Rendered | None) -> tuple[str, list[JSON], str | None]:
    """What "not modified" compares: Telegram compares the rendered text and its entities;
    Markdown is not parsed here, so its mode counts when the text holds its markup."""
    rendered = rendered or render(text, parse_mode)
    mode = (parse_mode or "").lower() or None
    if mode not in _MARKUP or not any(c in text for c in _MARKUP[mode]):
        mode = None
    return rendered.text, rendered.entities, mode


def check_thread(messages: BotMessages, chat_id: int, thread_id: int | None) -> None:
    """The General topic (1) and deleted topics are not threads one can post in."""
    if thread_id == 1 or (thread_id is not None
                          and (chat_id, thread_id) in messages.deleted_threads):
        raise ApiError(400, THREAD_NOT_FOUND)


def guess_chat(chat_id: int) -> JSON:
    """A chat never seen inbound: private for positive ids, else a (super)group."""
    if chat_id > 0:
        return {"id": chat_id, "type": "private", "first_name": "User"}
    kind = "supergroup" if str(chat_id).startswith("-100") else "group"
    return {"id": chat_id, "type": kind, "title": f"Group {chat_id}"}


#: characters that can start formatting in each parse mode
_MARKUP = {"markdown": "_*`[", "markdownv2": "_*[]()~`>#+-=|{}.!\\"}
