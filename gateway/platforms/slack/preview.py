"""A Slack reply as it is written: a preview in the turn's thread (or channel, or DM),
edited by ``chat.update`` at most every ``platforms.slack.stream_edit_interval_seconds``
and skipped rather than waited for when Slack rate-limits the edits, then edited a last
time into the final text (see ``gateway/platforms/preview.py``): one message in the end,
carrying the reply's dedupe key from that edit on (``sends.py``).

What the turn is doing shows as the thread's status (``assistant.threads.setStatus``)
where the app has Slack's agent feature; elsewhere Slack refuses that, once, and the
status is a line in the preview instead, as on the other platforms."""

from __future__ import annotations

from typing import Any, Protocol

from gateway.formatting.mrkdwn import message_parts, render
from gateway.platforms.flow import FlowControl
from gateway.platforms.preview import (
    Draft,
    EditedPreview,
    PartsSender,
    PreviewGone,
    PreviewRateLimited,
    PreviewRefused,
)
from gateway.platforms.slack.api import SlackRefused, WebApi
from gateway.platforms.slack.sends import send_metadata
from gateway.platforms.slack.settings import SlackSettings
from gateway.words.route import Route

#: chat.update's answers that say the preview is no longer there to edit
_GONE = frozenset({"message_not_found", "channel_not_found", "thread_not_found"})


class SlackSender(PartsSender, Protocol):
    """What a preview uses of the Slack adapter besides sending."""

    settings: SlackSettings
    flow: FlowControl
    message_limit: int

    @property
    def api(self) -> WebApi: ...

    async def thread_status(self, route: Route, text: str) -> bool:
        """Show ``text`` as the thread's status; False where the app cannot."""


class SlackPreview(EditedPreview):
    def __init__(self, adapter: SlackSender, route: Route) -> None:
        super().__init__(adapter, route, limit=adapter.message_limit,
                         interval=adapter.settings.stream_edit_interval_seconds)
        self.adapter: SlackSender = adapter

    async def status(self, text: str) -> None:
        if not await self.adapter.thread_status(self.route, text):
            await super().status(text)

    def _may_preview(self) -> bool:
        return self.adapter.flow.try_admit(self.route.chat_id, group=True)

    def _render(self, markdown: str) -> str:
        return render(markdown)

    def _split(self, text: str) -> list[str]:
        return message_parts(text, self.limit)

    async def _post(self, draft: Draft) -> str:
        route = self.route
        try:
            data = await self.adapter.api.call(
                "chat.postMessage", wait_limit=0, channel=route.chat_id,
                thread_ts=route.thread_id, text=draft.markup, link_names=False,
                unfurl_links=False, unfurl_media=False)
        except SlackRefused as exc:
            raise _preview_error(exc) from exc
        return str(data["ts"])

    async def _edit_draft(self, message_id: str, draft: Draft) -> None:
        await self._update(message_id, draft.markup, wait_limit=0)

    async def _edit(self, message_id: str, text: str) -> None:
        await self.adapter.flow.admit(self.route.chat_id, group=True)
        await self._update(message_id, text)

    async def _edit_last(self, message_id: str, text: str, dedupe_key: str | None) -> None:
        """With the reply's dedupe key in the preview's metadata: after a crash,
        ``SlackAdapter.delivered`` finds the message it became (sends.py)."""
        await self.adapter.flow.admit(self.route.chat_id, group=True)
        await self._update(message_id, text, metadata=send_metadata(dedupe_key, 0))

    async def _delete(self, message_id: str) -> None:
        await self.adapter.flow.admit(self.route.chat_id, group=True)
        try:
            await self.adapter.api.call("chat.delete", channel=self.route.chat_id,
                                        ts=message_id)
        except SlackRefused as exc:
            raise _preview_error(exc) from exc

    async def _update(self, message_id: str, text: str, *, wait_limit: float = 60.0,
                      metadata: dict[str, Any] | None = None) -> None:
        """``metadata``: the message's from now on (None keeps what it had)."""
        extra: dict[str, Any] = {"metadata": metadata} if metadata is not None else {}
        try:
            await self.adapter.api.call("chat.update", wait_limit=wait_limit,
                                        channel=self.route.chat_id, ts=message_id, text=text,
                                        link_names=False, **extra)
        except SlackRefused as exc:
            raise _preview_error(exc) from exc


def _preview_error(exc: SlackRefused) -> Exception:
    if exc.retry_after is not None:
        return PreviewRateLimited(exc.retry_after)
    if exc.error in _GONE:
        return PreviewGone(str(exc))
    if exc.permanent:
        return PreviewRefused(str(exc))
    return exc
