"""A Discord reply as it is written: a preview in the channel or thread of the
turn, edited at most every ``platforms.discord.stream_edit_interval_seconds``
(discord.py waits out Discord's own rate limits; a preview edit kept waiting
longer than that is dropped), then edited into the final
text (see ``preview``). Discord renders the Markdown itself: the preview is the
final message's form of the text so far (an open code fence closed, tables as
code blocks)."""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

import discord

from gateway.formatting.discord_text import NO_MENTIONS, message_parts, render
from gateway.platforms.discord.settings import DiscordConfig
from gateway.platforms.flow import FlowControl
from gateway.platforms.preview import (
    Draft,
    EditedPreview,
    PartsSender,
    PreviewGone,
    PreviewRateLimited,
    PreviewRefused,
)
from gateway.words.route import Route


class DiscordSender(PartsSender, Protocol):
    """What a preview uses of the Discord adapter: its client, its flow control and its
    config, besides sending."""

    config: DiscordConfig
    flow: FlowControl
    message_limit: int

    @property
    def client(self) -> discord.Client | None: ...


class DiscordPreview(EditedPreview):
    def __init__(self, adapter: DiscordSender, route: Route) -> None:
        super().__init__(adapter, route, limit=adapter.message_limit,
                         interval=adapter.config.stream_edit_interval_seconds)
        self.adapter: DiscordSender = adapter

    def _channel(self) -> Any:
        client = self.adapter.client
        if client is None or client.is_closed():
            raise ConnectionError("discord is not connected")
        return client.get_partial_messageable(int(self.route.chat_id))

    def _may_preview(self) -> bool:
        return self.adapter.flow.try_admit(self.route.chat_id, group=False)

    def _render(self, markdown: str) -> str:
        return render(markdown)

    async def _post(self, draft: Draft) -> str:
        kwargs: dict[str, Any] = {"allowed_mentions": NO_MENTIONS}
        if self.route.message_id is not None:  # as the final message's first part would
            kwargs["reference"] = discord.MessageReference(
                message_id=int(self.route.message_id), channel_id=int(self.route.chat_id),
                fail_if_not_exists=False)
        message = await self._channel().send(draft.markup, **kwargs)
        return str(message.id)

    async def _edit_draft(self, message_id: str, draft: Draft) -> None:
        try:
            # discord.py waits out a 429 inside the request: a preview edit that would
            # wait longer than the interval is dropped (an edit is safe to cut short)
            async with asyncio.timeout(max(2.0, self.interval)):
                await self._edit_content(message_id, draft.markup)
        except TimeoutError as exc:
            raise PreviewRateLimited(self.interval) from exc

    async def _edit(self, message_id: str, text: str) -> None:
        await self.adapter.flow.admit(self.route.chat_id, group=False)
        await self._edit_content(message_id, text)

    async def _edit_content(self, message_id: str, content: str) -> None:
        message = self._channel().get_partial_message(int(message_id))
        try:
            await message.edit(content=content, allowed_mentions=NO_MENTIONS)
        except discord.NotFound as exc:
            raise PreviewGone(exc.text) from exc
        except discord.Forbidden as exc:
            raise PreviewRefused(exc.text) from exc
        except discord.HTTPException as exc:
            if exc.status == 400:
                raise PreviewRefused(exc.text) from exc
            raise

    async def _delete(self, message_id: str) -> None:
        await self.adapter.flow.admit(self.route.chat_id, group=False)
        try:
            await self._channel().get_partial_message(int(message_id)).delete()
        except discord.NotFound as exc:
            raise PreviewGone(exc.text) from exc

    def _split(self, text: str) -> list[str]:
        return message_parts(text)
