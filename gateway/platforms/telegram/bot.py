"""The Telegram adapter as its parts see it: the preview of a reply being written and
the approval buttons use its bot, its flow control and its sending of long messages,
and nothing else of it."""

from __future__ import annotations

from typing import Any, Protocol

from telegram import InlineKeyboardMarkup
from telegram.ext import Application

from gateway.platforms.flow import FlowControl
from gateway.platforms.telegram.settings import TelegramConfig
from gateway.words.events import MessageKind, SendResult
from gateway.words.route import Route

#: the library's application, whatever its bot, context and job queue types
AnyApplication = Application[Any, Any, Any, Any, Any, Any]


class TelegramBot(Protocol):
    """What a preview or the approval buttons use of the Telegram adapter."""

    config: TelegramConfig
    flow: FlowControl
    message_limit: int
    #: the bot's routes' platform (``telegram``, or ``telegram/<account>``)
    platform: str

    @property
    def app(self) -> AnyApplication | None: ...

    @property
    def connected(self) -> bool: ...

    async def send(self, route: Route, text: str, *, kind: MessageKind = "reply",
                   session_id: str | None = None, dedupe_key: str | None = None,
                   ) -> SendResult: ...

    async def send_parts(self, route: Route, parts: list[str], *, first_patient: bool = True,
                         keyboard: InlineKeyboardMarkup | None = None) -> SendResult: ...
