"""A Discord reply as it is written: a preview in the channel or thread of the
turn, edited at most every ``platforms.discord.stream_edit_interval_seconds``
(discord.py waits out Discord's own rate limits), then edited into the final
text (see ``preview``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import discord

from ..events import MessageKind, SendResult
from ..route import Route
from .preview import EditedPreview, PreviewGone, PreviewRateLimited

if TYPE_CHECKING:
    from .discord import DiscordAdapter


class DiscordPreview(EditedPreview):
    def __init__(self, adapter: DiscordAdapter, route: Route) -> None:
        super().__init__(limit=adapter.message_limit,
                         interval=adapter.config.stream_edit_interval_seconds)
        self.adapter = adapter
        self.route = route

    def _channel(self) -> Any:
        client = self.adapter.client
        if client is None or client.is_closed():
            raise ConnectionError("discord is not connected")
        return client.get_partial_messageable(int(self.route.chat_id))

    def _may_preview(self) -> bool:
        return self.adapter.flow.try_admit(self.route.chat_id, group=False)

    async def _post(self, text: str) -> str:
        kwargs: dict[str, Any] = {}
        if self.route.message_id is not None:  # as the final message's first part would
            kwargs["reference"] = discord.MessageReference(
                message_id=int(self.route.message_id), channel_id=int(self.route.chat_id),
                fail_if_not_exists=False)
        try:
            message = await self._channel().send(text, **kwargs)
        except discord.RateLimited as exc:
            raise PreviewRateLimited(exc.retry_after) from exc
        return str(message.id)

    async def _edit(self, message_id: str, text: str, *, final: bool) -> None:
        if final:
            await self.adapter.flow.admit(self.route.chat_id, group=False)
        try:
            await self._channel().get_partial_message(int(message_id)).edit(content=text)
        except discord.RateLimited as exc:
            raise PreviewRateLimited(exc.retry_after) from exc
        except discord.NotFound as exc:
            raise PreviewGone(exc.text) from exc

    async def _delete(self, message_id: str) -> None:
        try:
            await self._channel().get_partial_message(int(message_id)).delete()
        except discord.NotFound as exc:
            raise PreviewGone(exc.text) from exc

    async def _send(self, text: str, kind: MessageKind, session_id: str | None,
                    dedupe_key: str | None) -> SendResult:
        return await self.adapter.send(self.route, text, kind=kind, session_id=session_id,
                                       dedupe_key=dedupe_key)

    async def _send_parts(self, parts: list[str], kind: MessageKind) -> SendResult:
        return await self.adapter.send_parts(self.route, parts)
