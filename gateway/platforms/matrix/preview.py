"""A Matrix reply as it is written: a preview in the turn's thread (or room, or DM),
edited (``m.replace``) at most every ``platforms.matrix.stream_edit_interval_seconds``
and skipped rather than waited for while the homeserver rate-limits the bot, then
edited a last time into the final text (see ``gateway/platforms/preview.py``): one
message in the end, its edits behind it."""

from __future__ import annotations

from typing import Any, Protocol

from gateway.formatting.matrix_html import message_parts, render
from gateway.platforms.flow import FlowControl
from gateway.platforms.matrix import content
from gateway.platforms.matrix.api import MatrixRefused
from gateway.platforms.matrix.routes import thread_relation
from gateway.platforms.matrix.settings import MatrixSettings
from gateway.platforms.preview import (
    Draft,
    EditedPreview,
    PartsSender,
    PreviewGone,
    PreviewRateLimited,
    PreviewRefused,
)
from gateway.words.route import Route


class MatrixSender(PartsSender, Protocol):
    """What a preview uses of the Matrix adapter besides sending."""

    settings: MatrixSettings
    flow: FlowControl
    message_limit: int

    async def put_event(self, room_id: str, event_type: str, body: dict[str, Any], *,
                        txn: str, wait_limit: float = ...) -> str: ...

    async def redact(self, room_id: str, event_id: str) -> None: ...


class MatrixPreview(EditedPreview):
    def __init__(self, adapter: MatrixSender, route: Route) -> None:
        super().__init__(adapter, route, limit=adapter.message_limit,
                         interval=adapter.settings.stream_edit_interval_seconds)
        self.adapter: MatrixSender = adapter

    def _may_preview(self) -> bool:
        return self.adapter.flow.try_admit(self.route.chat_id, group=True)

    def _render(self, markdown: str) -> str:
        return render(markdown)

    def _split(self, text: str) -> list[str]:
        return message_parts(text, self.limit)

    async def _post(self, draft: Draft) -> str:
        body = content.formatted(draft.source, suffix=draft.suffix)
        relation = thread_relation(self.route)
        if relation is not None:
            body["m.relates_to"] = relation
        return await self._put(body, wait_limit=0)

    async def _edit_draft(self, message_id: str, draft: Draft) -> None:
        await self._put(content.edit(message_id, content.formatted(
            draft.source, suffix=draft.suffix)), wait_limit=0)

    async def _edit(self, message_id: str, text: str) -> None:
        await self._edit_last(message_id, text, None)

    async def _edit_last(self, message_id: str, text: str, dedupe_key: str | None) -> None:
        """Keyed by the reply's dedupe key: tried again, it is one edit; after a crash,
        ``MatrixAdapter.delivered`` finds it by its transaction id."""
        await self.adapter.flow.admit(self.route.chat_id, group=True)
        await self._put(content.edit(message_id, content.formatted(text)),
                        txn=content.txn_id(dedupe_key, 0, content.FINAL_EDIT))

    async def _delete(self, message_id: str) -> None:
        await self.adapter.flow.admit(self.route.chat_id, group=True)
        try:
            await self.adapter.redact(self.route.chat_id, message_id)
        except MatrixRefused as exc:
            raise _preview_error(exc) from exc

    async def _put(self, body: dict[str, Any], *, wait_limit: float = 60.0,
                   txn: str | None = None) -> str:
        try:
            return await self.adapter.put_event(
                self.route.chat_id, "m.room.message", body,
                txn=txn or content.txn_id(None, 0, ""), wait_limit=wait_limit)
        except MatrixRefused as exc:
            raise _preview_error(exc) from exc


def _preview_error(exc: MatrixRefused) -> Exception:
    if exc.retry_after is not None:
        return PreviewRateLimited(exc.retry_after)
    if exc.errcode == "M_NOT_FOUND":
        return PreviewGone(str(exc))
    if exc.permanent:
        return PreviewRefused(str(exc))
    return exc
