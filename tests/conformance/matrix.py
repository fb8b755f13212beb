"""Matrix's harness: the real matrix-nio against a real Synapse (tests/matrix_homeserver.py),
through a proxy that refuses a send on cue (tests/fakes/faulty_proxy.py) — Synapse's
own 429s cannot be scripted per message, nor its 5xx at all.

Places: two threads of one room, each under a root a colleague (not an allowed user)
wrote before the gateway started, and the person's DM with the bot. What the person
sees is read from the person's own ``/sync``, mirrored in the background: the bot's
messages with their latest edits, their earlier versions (the previews), its files,
its approval requests. There are no buttons: an approval is a ✅ or ❌ reaction.
"The platform was told" is the sync token the adapter saved (``platform_cursors``):
an event is confirmed once a ``/sync`` from that token no longer brings it.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import urllib.parse
import urllib.request
import uuid
from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager, closing, suppress
from typing import Any, ClassVar

import aiohttp

from gateway.daemon.assembly import Gateway
from gateway.platforms.preview import WRITING
from tests.conformance.harness import (
    GatewayHarness,
    Place,
    Places,
    Promise,
    Shown,
    approval_id_in,
)
from tests.fakes.faulty_proxy import FaultyProxy
from tests.helpers import eventually
from tests.matrix_homeserver import Account, Homeserver, HumanClient

#: the reactions that decide an approval
_REACTIONS = {"once": "\u2705", "deny": "\u274c"}


class MatrixHarness(GatewayHarness):
    name = "matrix"
    does_not_apply: ClassVar[dict[Promise, str]] = {}
    #: the fixtures it is made with (tests/conformance/conftest.py)
    needs: ClassVar[tuple[str, ...]] = ("homeserver",)

    def __init__(self, homeserver: Homeserver) -> None:
        super().__init__()
        self.homeserver = homeserver
        self._proxy: FaultyProxy | None = None
        self._bot: Account | None = None
        self._person: HumanClient | None = None
        self._room = self._dm = ""
        self._roots: tuple[str, str] = ("", "")
        #: every event the person's sync brought, by room, oldest first
        self._events: dict[str, list[Mapping[str, Any]]] = {}
        self._files: dict[str, bytes] = {}  # the bot's files, by event id
        self._mirror: asyncio.Task[None] | None = None

    @property
    def bot(self) -> Account:
        assert self._bot is not None, "the harness is not serving"
        return self._bot

    @property
    def person(self) -> HumanClient:
        assert self._person is not None, "the harness is not serving"
        return self._person

    # -------------------------------------------------------------- lifecycle

    def serving(self) -> AbstractAsyncContextManager[object]:
        return self._serving()

    @asynccontextmanager
    async def _serving(self) -> AsyncIterator[FaultyProxy]:
        tag = uuid.uuid4().hex[:8]  # id(self) is reused by a later test's harness
        async with FaultyProxy(self.homeserver.url) as proxy, aiohttp.ClientSession() as http:
            self._proxy = proxy
            self._bot = await self.homeserver.register(f"homing-{tag}")
            person = HumanClient(http, self.homeserver.url,
                                 await self.homeserver.register(f"person-{tag}"))
            colleague = HumanClient(http, self.homeserver.url,
                                    await self.homeserver.register(f"colleague-{tag}"))
            self._person = person
            self._room = await person.create_room(invite=[self.bot.user_id,
                                                          colleague.user_id], name="team")
            await colleague.join(self._room)
            self._roots = (await colleague.send_text(self._room, "thread A starts here"),
                           await colleague.send_text(self._room, "thread B starts here"))
            self._dm = await person.create_room(invite=[self.bot.user_id], is_direct=True)
            self._mirror = asyncio.create_task(self._keep_mirror(), name="matrix-mirror")
            try:
                yield proxy
            finally:
                self._mirror.cancel()
                with suppress(asyncio.CancelledError):
                    await self._mirror

    def platform_section(self) -> dict[str, Any]:
        assert self._proxy is not None
        return {"homeserver": self._proxy.url, "user_id": self.bot.user_id,
                "access_token": self.bot.access_token, "device_id": self.bot.device_id,
                "allowed_users": [self.person.user_id], "stream_edit_interval_seconds": 0.2}

    async def connected(self, gw: Gateway) -> None:
        await gw.runner.adapters["matrix"].wait_connected()
        for room in (self._room, self._dm):  # the invites taken
            await eventually(lambda room=room: self._joined(room),  # type: ignore[misc]
                             what=f"the bot in {room}")

    def _joined(self, room: str) -> bool:
        return any(e.get("type") == "m.room.member" and e.get("state_key") == self.bot.user_id
                   and (e.get("content") or {}).get("membership") == "join"
                   for e in self._events.get(room, []))

    async def _keep_mirror(self) -> None:
        """The person's view: every event of their rooms, as their sync brings it."""
        since: str | None = None
        while True:
            sync = await self.person.sync(since, timeout_ms=1000 if since else 0)
            since = sync.next_batch
            for room, events in sync.timeline.items():
                seen = self._events.setdefault(room, [])
                known = {e.get("event_id") for e in seen}
                for event in events:
                    if event.get("event_id") in known:
                        continue
                    seen.append(event)
                    content = event.get("content") or {}
                    if (event.get("sender") == self.bot.user_id
                            and content.get("msgtype") in ("m.file", "m.image")
                            and content.get("url")):
                        self._files[str(event["event_id"])] = await self.person.download(
                            str(content["url"]))

    # -------------------------------------------------------------- places

    def places(self) -> Places:
        return Places(Place("thread-a", (self._room, self._roots[0])),
                      Place("thread-b", (self._room, self._roots[1])),
                      Place("dm", (self._dm, None)))

    # -------------------------------------------------------------- the person

    async def say(self, place: Place, text: str) -> None:
        room, root = place.where
        if root is None:
            await self.person.send_text(room, text)
        else:
            await self.person.reply_in_thread(room, root, text)

    async def send_file(self, place: Place, name: str, data: bytes,
                        caption: str | None = None) -> None:
        room, root = place.where
        mxc = await self.person.upload(data, filename=name, content_type="text/plain")
        content: dict[str, Any] = {"msgtype": "m.file", "body": caption or name,
                                   "filename": name, "url": mxc,
                                   "info": {"size": len(data), "mimetype": "text/plain"}}
        if root is not None:
            content["m.relates_to"] = {"rel_type": "m.thread", "event_id": root,
                                       "is_falling_back": True,
                                       "m.in_reply_to": {"event_id": root}}
        await self.person.send_event(room, "m.room.message", content)

    async def press(self, place: Place, approval_id: str, choice: str) -> None:
        if choice not in _REACTIONS:
            await self.press_by_command(place, approval_id, choice)
            return
        room, _ = place.where
        (request,) = [m for m in self._bot_messages(place)
                      if approval_id_in(self._versions(room, m)[0]) == approval_id]
        await self.person.react(room, str(request["event_id"]), _REACTIONS[choice])
        await self.settled()

    # -------------------------------------------------------------- what is seen

    def _in_place(self, event: Mapping[str, Any], root: str | None) -> bool:
        relates = (event.get("content") or {}).get("m.relates_to") or {}
        thread = relates.get("event_id") if relates.get("rel_type") == "m.thread" else None
        return thread == root

    def _bot_messages(self, place: Place) -> list[Mapping[str, Any]]:
        """The bot's messages in ``place`` (not its edits), oldest first."""
        room, root = place.where
        found = []
        for event in self._events.get(room, []):
            relates = (event.get("content") or {}).get("m.relates_to") or {}
            if (event.get("type") == "m.room.message" and event.get("sender") == self.bot.user_id
                    and relates.get("rel_type") != "m.replace" and self._in_place(event, root)):
                found.append(event)
        return found

    def _versions(self, room: str, message: Mapping[str, Any]) -> list[str]:
        """A message's text as first sent, then after each of its edits."""
        versions = [str((message.get("content") or {}).get("body", ""))]
        for event in self._events.get(room, []):
            content = event.get("content") or {}
            relates = content.get("m.relates_to") or {}
            if (relates.get("rel_type") == "m.replace"
                    and relates.get("event_id") == message.get("event_id")
                    and event.get("sender") == message.get("sender")):
                versions.append(str((content.get("m.new_content") or {}).get("body", "")))
        return versions

    def bot_texts(self, place: Place) -> list[str]:
        room, _ = place.where
        return [self._versions(room, m)[-1] for m in self._bot_messages(place)]

    def previews(self, place: Place) -> list[str]:
        room, _ = place.where
        return [v.removesuffix(WRITING.strip()).rstrip() for m in self._bot_messages(place)
                for v in self._versions(room, m) if v.endswith(WRITING.strip())]

    def files_posted(self, place: Place) -> list[tuple[str, bytes]]:
        found = []
        for message in self._bot_messages(place):
            content = message.get("content") or {}
            if str(message["event_id"]) in self._files:
                name = str(content.get("filename") or content.get("body", ""))
                found.append((name, self._files[str(message["event_id"])]))
        return found

    def approvals_shown(self, place: Place) -> list[Shown]:
        room, _ = place.where
        texts = self.bot_texts(place)
        shown = []
        for message in self._bot_messages(place):
            versions = self._versions(room, message)
            approval_id = approval_id_in(versions[0])
            if approval_id is None or versions[0].startswith(f"{approval_id}:"):
                continue
            after = next((t for t in texts if t.startswith(f"{approval_id}: ")), None)
            shown.append(Shown(approval_id, versions[-1] if len(versions) > 1 else after))
        return shown

    def fail_sends(self, place: Place, status: int, *, count: int = 1,
                   retry_after: float | None = None, containing: str | None = None) -> None:
        assert self._proxy is not None
        room, _ = place.where
        self._proxy.fail_next("PUT", f"/rooms/{room}/send/", status=status, count=count,
                              containing=containing, retry_after=retry_after)

    # -------------------------------------------------------------- the sync token

    def _saved_since(self) -> str | None:
        db = self.gateway.config.state_db if self._gateway is not None else None
        if db is None or not db.exists():
            return None
        with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)) as conn:
            row = conn.execute("SELECT value FROM platform_cursors WHERE platform = 'matrix' "
                               "AND name = ?", (f"since:{self.bot.user_id}",)).fetchone()
        return str(row[0]) if row is not None else None

    def _unconfirmed(self) -> list[Mapping[str, Any]]:
        """What a sync from the saved token still brings the bot: the people's messages and
        reactions not yet journaled (all of them before a token is saved)."""
        since = self._saved_since()
        if since is None:
            return [{"pending": "no sync token saved yet"}]
        query = urllib.parse.urlencode({"since": since, "timeout": "0"})
        request = urllib.request.Request(
            f"{self.homeserver.url}/_matrix/client/v3/sync?{query}",
            headers={"Authorization": f"Bearer {self.bot.access_token}"})
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(request, timeout=10) as answer:  # Synapse itself, not the proxy
            raw = json.loads(answer.read())
        return [event for room in raw.get("rooms", {}).get("join", {}).values()
                for event in room.get("timeline", {}).get("events", [])
                if event.get("sender") != self.bot.user_id
                and event.get("type") in ("m.room.message", "m.reaction")]

    def confirmed(self, place: Place, text: str) -> bool:
        return not [e for e in self._unconfirmed()
                    if (e.get("content") or {}).get("body") == text]

    def quiet(self) -> bool:
        return not self._unconfirmed()


HARNESS = MatrixHarness
