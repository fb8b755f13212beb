"""A web chat reply as it is written: ``delta`` frames to every tab of the
conversation, then the final ``message`` frame carrying the same ``stream`` id.

The page grows a bubble from the deltas and replaces it with the final text,
so a tab that missed deltas (opened mid-reply) still ends with the whole
message. A retried model call starts its text again: that delta carries
``"reset": true`` and the whole text so far.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from ..events import MessageKind, SendResult
from ..route import Route

if TYPE_CHECKING:
    from .web import WebAdapter


class WebLiveReply:
    def __init__(self, adapter: WebAdapter, route: Route) -> None:
        self.adapter = adapter
        self.route = route
        self._stream: str | None = None
        self._shown = ""

    async def show(self, text: str) -> None:
        if self._stream is None:
            self._stream = uuid.uuid4().hex[:12]
        frame: dict[str, Any] = {"type": "delta", "stream": self._stream}
        if text.startswith(self._shown):
            frame["text"] = text[len(self._shown):]
        else:
            frame.update(text=text, reset=True)
        self._shown = text
        if frame["text"] or frame.get("reset"):
            await self.adapter.delta(self.route, frame)

    async def status(self, text: str) -> None:
        await self.adapter.status(self.route, text)

    async def finish(self, text: str, *, kind: MessageKind, session_id: str | None,
                     dedupe_key: str | None = None) -> SendResult:
        stream, self._stream, self._shown = self._stream, None, ""
        return await self.adapter.send(self.route, text, kind=kind, session_id=session_id,
                                       dedupe_key=dedupe_key, stream=stream)

    async def close(self) -> None:
        """Deltas no message finished (the turn was stopped): the page drops them."""
        stream, self._stream, self._shown = self._stream, None, ""
        if stream is not None:
            await self.adapter.delta(self.route, {"type": "delta", "stream": stream,
                                                  "text": "", "done": True})
