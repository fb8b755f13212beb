"""A web chat reply as it is written: ``delta`` frames to every tab of the
conversation, then the final ``message`` frame carrying the same ``stream`` id.

Each delta carries the text added and ``html``, the whole reply so far rendered
as the final message will be (its unfinished Markdown made safe to show by
``formatting.preview``): the page shows that HTML in a growing bubble and puts
the final message in its place, which looks the same but for what was still
being written; a tab that missed deltas (opened mid-reply) still shows it all.
The finished blocks' HTML is kept (``GrowingPreview``): a delta renders only the
block being written, however long the reply. A retried model call starts its text
again: that delta carries ``"reset": true`` and the whole text so far. Deltas are
batched (at most one every ``DELTA_INTERVAL``, longer while rendering takes
longer), so a fast model does not cost a frame per token.

Deltas go to the other instances' tabs without their ``html`` (a long reply's would
be a row of ``web_frames`` each time, see ``fanout``): ``StreamsElsewhere``
adds up the text there and renders it the same way.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import OrderedDict
from typing import Any, Protocol

from gateway.formatting.preview import GrowingPreview
from gateway.formatting.web_html import render as render_html
from gateway.words.events import MessageKind, SendResult
from gateway.words.route import Route

#: deltas go out at most this often (the first at once): a fast model's tokens are
#: batched rather than each a frame to every tab
DELTA_INTERVAL = 0.05
#: the wait between deltas is at least this many times the last one took to render, so
#: a block of many pages is not rendered more often than the machine can afford
RENDER_SHARE = 4.0
#: streams of other instances followed at once (one whose end never came is forgotten)
FOLLOWED_ELSEWHERE = 64


class Tabs(Protocol):
    """What a reply being written uses of the web chat: frames to the conversation's
    tabs, and its final message."""

    async def delta(self, route: Route, frame: dict[str, Any]) -> None: ...

    async def status(self, route: Route, text: str) -> None: ...

    async def send(self, route: Route, text: str, *, kind: MessageKind = "reply",
                   session_id: str | None = None, dedupe_key: str | None = None,
                   stream: str | None = None) -> SendResult: ...


class WebLiveReply:
    def __init__(self, adapter: Tabs, route: Route) -> None:
        self.adapter = adapter
        self.route = route
        self._stream: str | None = None
        self._shown = ""
        self._latest = ""
        self._sent_at = 0.0
        self._gap = DELTA_INTERVAL
        self._pending: asyncio.Task[None] | None = None
        self._render = GrowingPreview(render_html)

    async def show(self, text: str) -> None:
        if self._stream is None:
            self._stream = uuid.uuid4().hex[:12]
        self._latest = text
        if self._pending is not None:
            return  # the batch under way takes it
        wait = self._sent_at + self._gap - time.monotonic()
        if wait <= 0:
            await self._send_delta()
        else:
            self._pending = asyncio.create_task(self._send_later(wait), name="web-delta")

    async def status(self, text: str) -> None:
        await self.adapter.status(self.route, text)

    async def finish(self, text: str, *, kind: MessageKind, session_id: str | None,
                     dedupe_key: str | None = None) -> SendResult:
        stream = self._end()
        return await self.adapter.send(self.route, text, kind=kind, session_id=session_id,
                                       dedupe_key=dedupe_key, stream=stream)

    async def close(self) -> None:
        """Deltas no message finished (the turn was stopped): the page drops them."""
        stream = self._end()
        if stream is not None:
            await self.adapter.delta(self.route, {"type": "delta", "stream": stream,
                                                  "text": "", "done": True})

    async def _send_later(self, wait: float) -> None:
        await asyncio.sleep(wait)
        self._pending = None
        await self._send_delta()

    async def _send_delta(self) -> None:
        text, stream = self._latest, self._stream
        if stream is None or text == self._shown:
            return
        frame: dict[str, Any] = {"type": "delta", "stream": stream}
        if text.startswith(self._shown):
            frame["text"] = text[len(self._shown):]
        else:
            frame.update(text=text, reset=True)
        started = time.monotonic()
        frame["html"] = self._render(text)
        self._shown = text
        self._sent_at = time.monotonic()
        self._gap = max(DELTA_INTERVAL, RENDER_SHARE * (self._sent_at - started))
        await self.adapter.delta(self.route, frame)

    def _end(self) -> str | None:
        """The stream that ends here; deltas not yet sent are not needed any more."""
        if self._pending is not None:
            self._pending.cancel()
            self._pending = None
        stream, self._stream, self._shown, self._latest = self._stream, None, "", ""
        self._gap = DELTA_INTERVAL
        self._render = GrowingPreview(render_html)
        return stream


class StreamsElsewhere:
    """The replies other instances are streaming into conversations with tabs here:
    their deltas come without ``html``, which is made here from the text they add up
    to (a tab here still shows the whole reply so far, formatted)."""

    def __init__(self) -> None:
        # stream id -> (its text so far, its renderer), the least recently heard first
        self._streams: OrderedDict[str, tuple[str, GrowingPreview]] = OrderedDict()

    def follow(self, frame: dict[str, Any], *, shown: bool) -> dict[str, Any]:
        """``frame`` as this instance's tabs get it (``shown``: there are some); a delta
        gets its ``html``, and the message or ``done`` that ends a stream forgets it."""
        stream = frame.get("stream")
        if not isinstance(stream, str):
            return frame
        if frame.get("type") != "delta" or frame.get("done"):
            self._streams.pop(stream, None)
            return frame
        text, render = self._streams.pop(stream, ("", GrowingPreview(render_html)))
        added = str(frame.get("text", ""))
        text = added if frame.get("reset") else text + added
        self._streams[stream] = (text, render)
        while len(self._streams) > FOLLOWED_ELSEWHERE:
            self._streams.popitem(last=False)
        return {**frame, "html": render(text)} if shown else frame
