"""A Telegram reply as it is written: a preview in the conversation's own topic,
edited with ``editMessageText`` at most every
``platforms.telegram.stream_edit_interval_seconds`` and only while flood
control has room, then edited into the final text (see ``preview``).

Previews and the final text alike go as HTML, and as plain text when Telegram
cannot parse that HTML, as every message does (``HtmlOrPlain``); the plain retry is
a request flood control counts, and once a preview's HTML is refused the reply's
later previews go plain at once (the final text is tried as HTML again)."""

from __future__ import annotations

import functools
from typing import TypeVar

from telegram import Bot
from telegram.error import BadRequest, RetryAfter

from gateway.formatting.splitter import utf16_len
from gateway.formatting.telegram_html import (
    HtmlOrPlain,
    TextRequest,
    message_parts,
    plain_fallback,
    visible_text,
)
from gateway.formatting.telegram_html import render as render_html
from gateway.platforms.preview import (
    Draft,
    EditedPreview,
    PreviewGone,
    PreviewRateLimited,
    PreviewRefused,
)
from gateway.platforms.telegram.bot import TelegramBot
from gateway.platforms.telegram.routes import send_arguments
from gateway.words.route import Route

_T = TypeVar("_T")

#: the preview is not there (deleted, or never made); "message can't be edited" or "can't
#: be deleted" is not among them: the message is there, and refuses (see _edit_text, _delete)
_GONE = ("message to edit not found", "message to delete not found", "message_id_invalid")


class TelegramPreview(EditedPreview):
    def __init__(self, adapter: TelegramBot, route: Route) -> None:
        super().__init__(adapter, route, limit=adapter.message_limit,
                         interval=adapter.config.stream_edit_interval_seconds,
                         measure=utf16_len)
        self.adapter: TelegramBot = adapter
        self._html_refused = False  # a preview's HTML was refused: the next go plain

    @property
    def _bot(self) -> Bot:
        if self.adapter.app is None or not self.adapter.connected:
            raise ConnectionError("telegram is not connected")
        bot: Bot = self.adapter.app.bot
        return bot

    def _may_preview(self) -> bool:
        return self.adapter.flow.try_admit(self.route.chat_id,
                                           group=self.route.chat_type == "group")

    def _render(self, markdown: str) -> str:
        return render_html(markdown)

    def _rendered_size(self, markup: str) -> int:
        return utf16_len(visible_text(markup))

    async def _post(self, draft: Draft) -> str:
        arguments = send_arguments(self.route)
        try:
            message = await self._send_draft(
                draft, functools.partial(self._bot.send_message, **arguments))
        except RetryAfter as exc:
            raise PreviewRateLimited(self._flood(exc)) from exc
        return str(message.message_id)

    def _split(self, text: str) -> list[str]:
        return message_parts(text, self.limit)

    async def _edit_draft(self, message_id: str, draft: Draft) -> None:
        await self._send_draft(draft, functools.partial(self._edit_text, message_id))

    async def _edit(self, message_id: str, text: str) -> None:
        await self._admit()
        formatted = HtmlOrPlain(render_html(text), plain_fallback(text, self.limit))
        await formatted.send(functools.partial(self._edit_text, message_id), self._admit)

    async def _send_draft(self, draft: Draft, request: TextRequest[_T]) -> _T:
        """A draft as HTML, or plain at once once a preview's HTML was refused."""
        room = self.limit - utf16_len(draft.suffix)
        formatted = HtmlOrPlain(None if self._html_refused else draft.markup,
                                plain_fallback(draft.source, room) + draft.suffix)
        try:
            return await formatted.send(request, self._admit_draft)
        finally:
            self._html_refused = formatted.markup is None

    async def _admit(self) -> None:
        await self.adapter.flow.admit(self.route.chat_id, group=self.route.chat_type == "group")

    async def _admit_draft(self) -> None:
        """A preview's plain retry waits for nothing: with no room it is skipped."""
        if not self._may_preview():
            raise PreviewRateLimited(self.interval)

    async def _edit_text(self, message_id: str, *, text: str, parse_mode: str | None
                         ) -> None:
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
        await self._admit()
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


    def _reset(self) -> None:
        super()._reset()
        self._html_refused = False  # the turn's next reply tries HTML again

    def _flood(self, exc: RetryAfter) -> float:
        """Telegram's "retry after" holds for every send to the chat, not only ours."""
        retry = exc.retry_after
        seconds = float(retry.total_seconds()) if hasattr(retry, "total_seconds") else float(retry)
        self.adapter.flow.pause(self.route.chat_id, seconds)
        return seconds
