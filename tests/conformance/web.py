"""The web chat's harness: the gateway's own WebSocket and REST API, and a page.

The web chat has no server of its own to fake: the harness plays the page
(gateway/platforms/web/static/index.html) as a browser runs it, over aiohttp. Each
message goes with an id and the time it was typed, and stays in the page's queue until
its ``ack``; the queue is sent again on every (re)connection and after an error frame
that says ``retry``; a message frame whose ``key`` was shown before is not shown again.

Places: three conversations (the web chat has no threads: each conversation is a
chat of its own, as a thread is a route of its own elsewhere). A preview is the
``delta`` frames of a stream added up; a button press is an ``approve`` frame; the
cursor is the ``ack``.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, ClassVar

import aiohttp

from gateway.daemon.assembly import Gateway
from tests.conformance.harness import (
        GatewayHarness,
    Place,
    Places,
    Promise,
    Shown,
)
from tests.helpers import eventually
from tests.model_support import web_base


@dataclass
class _Approval:
    command: str
    outcome: str | None = None
    answers: int = 0  # frames back for a press: its outcome, or an error naming it


@dataclass
class _Stream:
    """A reply growing on the page from its deltas, until a message takes its place."""

    text: str = ""


@dataclass
class _Page:
    """One conversation open in a browser tab, with the page's queue and what it shows."""

    conversation: str
    ws: aiohttp.ClientWebSocketResponse | None = None
    session_id: str | None = None
    reader: asyncio.Task[None] | None = None
    #: messages typed and not acknowledged yet: id -> (text, typed at)
    unacked: dict[str, tuple[str, float]] = field(default_factory=dict)
    acked: list[str] = field(default_factory=list)  # texts acknowledged, in order
    #: what the page shows of the bot, in order: its messages (approval requests
    #: included, inline), and a stream still growing where it started
    shown: list[str | _Stream] = field(default_factory=list)
    files: list[tuple[str, bytes]] = field(default_factory=list)
    previews: list[str] = field(default_factory=list)
    approvals: dict[str, _Approval] = field(default_factory=dict)
    keys: set[str] = field(default_factory=set)
    streams: dict[str, _Stream] = field(default_factory=dict)  # growing, by stream id


class WebHarness(GatewayHarness):
    name = "web"
    does_not_apply: ClassVar[dict[Promise, str]] = {
        Promise.SEND_FAILURES: "no server to refuse a send: the web chat's sends are "
                               "frames to its own open tabs (and the transcript)",
    }

    def __init__(self) -> None:
        super().__init__()
        self._http: aiohttp.ClientSession | None = None
        self._pages = {place: _Page(place.where[0]) for place in self.places()}

    # -------------------------------------------------------------- lifecycle

    def serving(self) -> AbstractAsyncContextManager[object]:
        return self._serving()

    @asynccontextmanager
    async def _serving(self) -> AsyncIterator[aiohttp.ClientSession]:
        async with aiohttp.ClientSession() as http:  # the browser
            self._http = http
            yield http

    def platform_section(self) -> dict[str, Any]:
        return {}

    async def connected(self, gw: Gateway) -> None:
        for page in self._pages.values():
            await self._open(page)

    async def stopping(self) -> None:
        for page in self._pages.values():
            if page.ws is not None:
                await page.ws.close()
            if page.reader is not None:
                await asyncio.gather(page.reader, return_exceptions=True)
            page.ws = page.reader = None

    def quiet(self) -> bool:
        return all(not page.unacked for page in self._pages.values())

    async def _open(self, page: _Page) -> None:
        assert self._http is not None
        ws = await self._http.ws_connect(f"{web_base(self.gateway)}/ws",
                                         params={"conversation": page.conversation})
        ready = await ws.receive_json(timeout=20)
        assert ready["type"] == "ready", ready
        page.ws, page.session_id = ws, ready["session_id"]
        page.reader = asyncio.create_task(self._read(page), name=f"page-{page.conversation}")
        for frame_id in list(page.unacked):  # what waited for the gateway goes now
            await self._transmit(page, frame_id)

    # -------------------------------------------------------------- places

    def places(self) -> Places:
        return Places(Place("conversation-a", ("conformance-a",)),
                      Place("conversation-b", ("conformance-b",)),
                      Place("dm", ("conformance-dm",)))

    # -------------------------------------------------------------- the person

    async def say(self, place: Place, text: str) -> None:
        page = self._pages[place]
        frame_id = uuid.uuid4().hex[:16]
        page.unacked[frame_id] = (text, time.time())
        if page.ws is not None:
            await self._transmit(page, frame_id)

    async def _transmit(self, page: _Page, frame_id: str) -> None:
        assert page.ws is not None
        text, typed_at = page.unacked[frame_id]
        await page.ws.send_json({"type": "message", "text": text, "id": frame_id,
                                 "sent_at": typed_at})

    async def send_file(self, place: Place, name: str, data: bytes,
                        caption: str | None = None) -> None:
        page = self._pages[place]
        assert self._http is not None and page.session_id is not None
        form = aiohttp.FormData()
        if caption is not None:
            form.add_field("text", caption)
        form.add_field("file", data, filename=name, content_type="application/octet-stream")
        url = f"{web_base(self.gateway)}/api/sessions/{page.session_id}/files"
        async with self._http.post(url, data=form) as response:
            assert response.status == 200, await response.text()

    async def press(self, place: Place, approval_id: str, choice: str) -> None:
        page = self._pages[place]
        assert page.ws is not None
        approval = page.approvals[approval_id]
        answers = approval.answers
        await page.ws.send_json({"type": "approve", "id": approval_id, "decision": choice})
        await eventually(lambda: approval.answers > answers,
                         what=f"the answer to the press on {approval_id}")

    # -------------------------------------------------------------- the page

    async def _read(self, page: _Page) -> None:
        assert page.ws is not None
        async for message in page.ws:
            if message.type is not aiohttp.WSMsgType.TEXT:
                continue
            await self._on_frame(page, json.loads(message.data))

    async def _on_frame(self, page: _Page, frame: dict[str, Any]) -> None:
        kind = frame.get("type")
        if kind == "ack":
            taken = page.unacked.pop(frame["id"], None)
            if taken is not None:
                page.acked.append(taken[0])
        elif kind == "error" and frame.get("id") in page.approvals:
            page.approvals[frame["id"]].answers += 1
        elif kind == "error" and frame.get("id") in page.unacked:
            if frame.get("retry"):
                await self._transmit(page, frame["id"])  # the page sends it again
            else:
                page.unacked.pop(frame["id"])  # refused for what it holds
        elif kind == "delta":
            self._on_delta(page, frame)
        elif kind == "approval":
            if frame["id"] not in page.approvals:  # sent again to a tab opened later
                page.approvals[frame["id"]] = _Approval(frame["command"])
                page.shown.append(f"Approval needed ({frame['id']}): {frame['command']}")
        elif kind == "approval_decided":
            approval = page.approvals[frame["id"]]
            approval.outcome, approval.answers = frame["text"], approval.answers + 1
        elif kind == "message" and frame.get("kind") != "user":
            await self._on_message(page, frame)

    def _on_delta(self, page: _Page, frame: dict[str, Any]) -> None:
        stream = page.streams.get(frame["stream"])
        if frame.get("done"):  # the turn stopped: the page drops what grew
            if stream is not None:
                page.shown.remove(page.streams.pop(frame["stream"]))
            return
        if stream is None:
            stream = page.streams[frame["stream"]] = _Stream()
            page.shown.append(stream)
        stream.text = frame["text"] if frame.get("reset") else stream.text + frame["text"]
        page.previews.append(stream.text)

    async def _on_message(self, page: _Page, frame: dict[str, Any]) -> None:
        growing = page.streams.pop(frame.get("stream") or "", None)
        key = frame.get("key")
        if key is not None and key in page.keys:  # a send repeated after a crash: once
            if growing is not None:
                page.shown.remove(growing)
            return
        if key is not None:
            page.keys.add(key)
        posted = frame.get("file")
        if posted is not None:
            assert self._http is not None
            async with self._http.get(web_base(self.gateway) + posted["url"]) as response:
                assert response.status == 200, await response.text()
                page.files.append((posted["name"], await response.read()))
        if growing is not None:  # the message takes the growing reply's place
            page.shown[page.shown.index(growing)] = frame["text"]
        else:
            page.shown.append(frame["text"])

    # -------------------------------------------------------------- what is seen

    def bot_texts(self, place: Place) -> list[str]:
        return [e.text if isinstance(e, _Stream) else e for e in self._pages[place].shown]

    def previews(self, place: Place) -> list[str]:
        return list(self._pages[place].previews)

    def files_posted(self, place: Place) -> list[tuple[str, bytes]]:
        return list(self._pages[place].files)

    def approvals_shown(self, place: Place) -> list[Shown]:
        return [Shown(i, a.outcome) for i, a in self._pages[place].approvals.items()]

    def fail_sends(self, place: Place, status: int, *, count: int = 1,
                   retry_after: float | None = None, containing: str | None = None) -> None:
        raise AssertionError(self.does_not_apply[Promise.SEND_FAILURES])

    def confirmed(self, place: Place, text: str) -> bool:
        return text in self._pages[place].acked


HARNESS = WebHarness
