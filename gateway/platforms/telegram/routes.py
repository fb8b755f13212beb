"""Where a Telegram message lives, and how to address a send there.

Forum topics are the trap: a message's ``message_thread_id`` names a topic
only when ``is_topic_message`` is set — a reply inside the General topic
carries one that is not a topic — and the General topic itself has no thread
id (sending with ``message_thread_id=1`` is rejected). Private chats can have
topics too; those need a reply anchor.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from telegram import CallbackQuery, Message, ReplyParameters

from gateway.platforms.telegram.spec import PLATFORM
from gateway.words.route import Route

GENERAL_TOPIC = 1


def route_of(message: Message, platform: str = PLATFORM.name) -> Route | None:
    """The route of an inbound message, or None for chats we do not serve (channels).
    ``platform``: the bot's (``telegram``, or ``telegram/<account>``)."""
    chat = message.chat
    if chat.type == "private":
        chat_type = "dm"
    elif chat.type in ("group", "supergroup"):
        chat_type = "group"
    else:
        return None
    thread_id = None
    if message.is_topic_message and message.message_thread_id not in (None, GENERAL_TOPIC):
        thread_id = str(message.message_thread_id)
    user = message.from_user
    return Route(
        platform=platform, chat_type=chat_type, chat_id=str(chat.id), thread_id=thread_id,
        user_id=str(user.id) if user else None,
        user_name=user.username if user else None,
        chat_name=chat.title or chat.full_name or None,
        message_id=str(message.message_id),
    )


def route_of_press(query: CallbackQuery, platform: str = PLATFORM.name) -> Route | None:
    """The route of a tap on a button: the conversation of the message it is under (its
    chat and topic), as the one who tapped, anchored on that message — the route a
    message of theirs there would have. None when Telegram no longer shows the message
    (older than 48 hours: its topic is unknown) or for chats we do not serve."""
    message = query.message
    if not isinstance(message, Message):
        return None
    route = route_of(message, platform)
    if route is None:
        return None
    user = query.from_user
    return replace(route, user_id=str(user.id), user_name=user.username)


def send_arguments(route: Route, *, with_thread: bool = True,
                   chat_id: str | None = None) -> dict[str, Any]:
    """``send_message`` arguments for a route: its chat, its topic, and its reply anchor.

    Always built from the stored route — never from the library's reply helpers,
    which drop the thread unless the original message was a topic message.
    ``chat_id`` overrides the route's chat (a group that became a supergroup).
    """
    args: dict[str, Any] = {"chat_id": int(chat_id or route.chat_id)}
    if with_thread and route.thread_id is not None and route.thread_id != str(GENERAL_TOPIC):
        args["message_thread_id"] = int(route.thread_id)
    if route.message_id is not None:
        args["reply_parameters"] = ReplyParameters(message_id=int(route.message_id),
                                                   allow_sending_without_reply=True)
    return args
