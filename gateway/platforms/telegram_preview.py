"""A Telegram reply as it is written: a preview in the conversation's own topic,
edited with ``editMessageText`` at most every
``platforms.telegram.stream_edit_interval_seconds`` and only while flood
control has room, then edited into the final text (see ``preview``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from telegram import Bot
from telegram.constants import ParseMode
from telegram.error import BadRequest, RetryAfter

from ..formatting.telegram_html import cannot_parse, message_parts, plain_fallback
from ..formatting.telegram_html import render as render_html
from ..route import Route
from ..splitter import utf16_len
from .preview import EditedPreview, PreviewGone, PreviewRateLimited, PreviewRefused
from .telegram_routes import send_arguments

if TYPE_CHECKING:
    from .telegram import TelegramAdapter

#: the preview is not there (deleted, or never made); "message can't be edited" or "can't
#: be deleted" is not among them: the message is there, and refuses (see _edit_text, _delete)
_GONE = ("message to edit not found", "message to delete not found", "message_id_invalid")


class TelegramPreview(EditedPreview):
    def __init__(self, adapter: TelegramAdapter, route: Route) -> None:
        super().__init__(adapter, route, limit=adapter.message_limit,
                         interval=adapter.config.stream_edit_interval_seconds,
                         measure=utf16_len)
        self.adapter: TelegramAdapter = adapter

    @property
    def _bot(self) -> Bot:
        if self.adapter.app is None or not self.adapter.connected:
            raise ConnectionError("telegram is not connected")
        bot: Bot = self.adapter.app.bot
        return bot

    def _may_preview(self) -> bool:
        return self.adapter.flow.try_admit(self.route.chat_id,
                                           group=self.route.chat_type == "group")

    async def _post(self, text: str) -> str:
        try:
            message = await self._bot.send_message(text=text, **send_arguments(self.route))
        except RetryAfter as exc:
            raise PreviewRateLimited(self._flood(exc)) from exc
        return str(message.message_id)

    def _split(self, text: str) -> list[str]:
        return message_parts(text, self.limit)

    async def _edit(self, message_id: str, text: str, *, final: bool) -> None:
        """A preview shows the Markdown as written; the final edit is formatted (plain
        when Telegram cannot parse its HTML)."""
        if not final:
            await self._edit_text(message_id, text, None)
            return
        await self.adapter.flow.admit(self.route.chat_id,
                                      group=self.route.chat_type == "group")
        try:
            await self._edit_text(message_id, render_html(text), ParseMode.HTML)
        except PreviewRefused as exc:
            if not cannot_parse(str(exc)):
                raise
            await self._edit_text(message_id, plain_fallback(text, self.limit), None)

    async def _edit_text(self, message_id: str, text: str, parse_mode: str | None) -> None:
        try:
            await self._bot.edit_message_text(text, chat_id=int(self.route.chat_id),
                                              message_id=int(message_id),
                                              parse_mode=parse_mode)
        except RetryAfter as exc:
            raise PreviewRateLimited(self._flood(exc)) from exc
        except BadRequest as exc:
            said = exc.message.lower()
            if "not modified" in said:
                return  # it already says that: an earlier try went through
            if any(gone in said for gone in _GONE):
                raise PreviewGone(exc.message) from exc
            raise PreviewRefused(exc.message) from exc

    async def _delete(self, message_id: str) -> None:
        await self.adapter.flow.admit(self.route.chat_id, group=self.route.chat_type == "group")
        try:
            await self._bot.delete_message(int(self.route.chat_id), int(message_id))
        except RetryAfter as exc:
            raise PreviewRateLimited(self._flood(exc)) from exc
        except BadRequest as exc:
            said = exc.message.lower()
            if any(gone in said for gone in _GONE):
                raise PreviewGone(exc.message) from exc
            if "can't be deleted" in said:  # too old, or no rights: asking again won't help
                raise PreviewRefused(exc.message) from exc
            raise


    def _flood(self, exc: RetryAfter) -> float:
        """Telegram's "retry after" holds for every send to the chat, not only ours."""
        retry = exc.retry_after
        seconds = float(retry.total_seconds()) if hasattr(retry, "total_seconds") else float(retry)
        self.adapter.flow.pause(self.route.chat_id, seconds)
        return seconds
