"""A fake "Relay" chat server, for the example third-party platform package
(tests/example_platform/): the smallest platform that has what the adapter contract
asks for — chats with threads and direct messages, a token, sends that can be refused
with 429 or 5xx and deduplicated by a key, and updates kept until the client confirms
them by asking for a later offset (as Telegram's getUpdates does).

The protocol (JSON over HTTP, ``Authorization: Bearer <token>``):

- ``GET /v1/me`` → ``{"ok": true, "user": {"id": "bot", "name": ...}}``
- ``GET /v1/updates?offset=N&timeout=S`` → ``{"ok": true, "updates": [...]}``: every
  update with ``id >= N``, waiting up to S seconds for one; asking with N confirms (and
  forgets) every update before N.
- ``POST /v1/messages`` with ``{"chat": id, "thread": id|null, "text": ..., "key":
  str|null}`` → ``{"ok": true, "message": {"id": ...}}``; the same ``key`` again gives
  the first message back, posted once.
- errors: 401 ``{"ok": false, "error": "unauthorized"}``; 404 ``no such chat`` or
  ``no such thread``; 400 ``text too long`` (over 2000 characters) or ``text empty``;
  429 ``{"ok": false, "error": "slow down", "retry_after": 1}``; 5xx as asked.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from tests.fakes.local_server import LocalServer

TOKEN = "relay-token-0123456789abcdef"
TEXT_LIMIT = 2000


@dataclass
class Posted:
    """One message the bot posted."""

    id: str
    chat: str
    thread: str | None
    text: str
    key: str | None
    at: float = field(default_factory=time.monotonic)


class FakeRelay(LocalServer):
    """The server; a test writes as people with :meth:`user_message` and reads what the
    bot posted in :attr:`posted`."""

    def __init__(self, token: str = TOKEN) -> None:
        self.token = token
        #: chat id -> "dm" or "group"; a group's threads
        self.chats: dict[str, str] = {"g1": "group", "dm-u1": "dm"}
        self.threads: dict[str, set[str]] = {"g1": {"t-a", "t-b"}}
        self.posted: list[Posted] = []
        #: every update not yet confirmed, oldest first
        self.pending: list[dict[str, Any]] = []
        #: the offset the client last asked with: what it has confirmed
        self.confirmed_offset = 0
        self._next_update = 1
        self._next_message = 1
        self._by_key: dict[str, Posted] = {}
        #: (status, retry_after, text it must hold or None), the first that matches is used
        self._failures: list[tuple[int, float, str | None]] = []
        self._arrived = asyncio.Event()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def _build_app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/v1/me", self._me)
        app.router.add_get("/v1/updates", self._updates)
        app.router.add_post("/v1/messages", self._messages)
        return app

    async def _before_stop(self) -> None:
        self._arrived.set()  # long polls return

    # -- what people do ---------------------------------------------------------------

    def user_message(self, *, chat: str, text: str, thread: str | None = None,
                     user: str = "u1") -> int:
        """A person writes; the update's id."""
        update = {"id": self._next_update, "message": {
            "chat": chat, "chat_type": self.chats[chat], "thread": thread, "user": user,
            "text": text, "id": f"m{self._next_update}", "at": time.time()}}
        self._next_update += 1
        self.pending.append(update)
        self._arrived.set()
        return int(update["id"])

    def fail_next_sends(self, count: int, *, status: int = 429, retry_after: float = 1,
                        containing: str | None = None) -> None:
        """The next ``count`` sends (those whose text holds ``containing``, if given) are
        refused with ``status``."""
        self._failures += [(status, retry_after, containing)] * count

    def posted_in(self, chat: str, thread: str | None = None) -> list[Posted]:
        return [p for p in self.posted if p.chat == chat and p.thread == thread]

    # -- the API ----------------------------------------------------------------------

    def _authorised(self, request: web.Request) -> bool:
        return request.headers.get("Authorization") == f"Bearer {self.token}"

    @staticmethod
    def _error(status: int, error: str, **extra: Any) -> web.Response:
        return web.json_response({"ok": False, "error": error, **extra}, status=status)

    async def _me(self, request: web.Request) -> web.Response:
        if not self._authorised(request):
            return self._error(401, "unauthorized")
        return web.json_response({"ok": True, "user": {"id": "bot", "name": "relay bot"}})

    async def _updates(self, request: web.Request) -> web.Response:
        if not self._authorised(request):
            return self._error(401, "unauthorized")
        try:
            offset = int(request.query.get("offset", "0"))
            timeout = float(request.query.get("timeout", "0"))
        except ValueError:
            return self._error(400, "offset and timeout are numbers")
        self.confirmed_offset = max(self.confirmed_offset, offset)
        self.pending = [u for u in self.pending if u["id"] >= offset]
        deadline = time.monotonic() + min(timeout, 30)
        while not self.pending and time.monotonic() < deadline and self._runner is not None:
            self._arrived.clear()
            try:
                await asyncio.wait_for(self._arrived.wait(), deadline - time.monotonic())
            except TimeoutError:
                break
        return web.json_response({"ok": True, "updates": self.pending[:100]})

    async def _messages(self, request: web.Request) -> web.Response:
        if not self._authorised(request):
            return self._error(401, "unauthorized")
        try:
            body = await request.json()
        except ValueError:
            return self._error(400, "the body is not JSON")
        chat, thread = str(body.get("chat", "")), body.get("thread")
        text, key = body.get("text"), body.get("key")
        failure = next((f for f in self._failures if f[2] is None
                        or (isinstance(text, str) and f[2] in text)), None)
        if failure is not None:
            self._failures.remove(failure)
            status, retry_after, _ = failure
            if status == 429:
                return self._error(429, "slow down", retry_after=retry_after)
            return self._error(status, "the server is having trouble")
        if chat not in self.chats:
            return self._error(404, "no such chat")
        if thread is not None and thread not in self.threads.get(chat, set()):
            return self._error(404, "no such thread")
        if not isinstance(text, str) or not text:
            return self._error(400, "text empty")
        if len(text) > TEXT_LIMIT:
            return self._error(400, "text too long")
        if key is not None and key in self._by_key:
            return web.json_response({"ok": True, "message": {"id": self._by_key[key].id}})
        posted = Posted(f"p{self._next_message}", chat, thread, text, key)
        self._next_message += 1
        self.posted.append(posted)
        if key is not None:
            self._by_key[key] = posted
        return web.json_response({"ok": True, "message": {"id": posted.id}})
