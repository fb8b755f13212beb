"""The harness protocol: what the conformance cases ask of a platform, in neutral words.

Every case in ``test_contract.py`` runs once per platform. It never names a platform:
it asks its harness to start the platform's fake server and the whole gateway, to have
a person write somewhere, and to tell what the person sees there now. The harness
answers in the platform's own words (a Telegram forum topic, a Discord thread, a web
conversation), hidden behind :class:`Place` values the cases only pass back.

Adding a platform
=================

1. Write ``tests/conformance/<name>.py`` with a class that implements :class:`Harness`
   (most of it comes from :class:`GatewayHarness`: subclass it and fill in the platform's
   part) and a module attribute ``HARNESS = <the class>``.
2. Add ``"<name>"`` to ``PLATFORMS`` in ``tests/conformance/conftest.py``.

A promise the platform cannot keep in the way the case checks it (the web chat's sends
cannot be refused with a 429: no server stands between the gateway and the page) goes
into the class's ``does_not_apply``, with the reason. That (harness, case) pair is then
not generated; ``test_what_does_not_apply`` lists it instead, the reason in its test id.

The person
==========

Everything a harness says "a person" does is done by the one user the harness's
config allows (on the web chat, whoever has the page: the chat authenticates itself),
through the platform's real client library against its fake, never through the
gateway's insides — except where a case says so (the journal, in the cursor case).
"""

from __future__ import annotations

import enum
import re
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Protocol

from gateway.config.settings import Config, parse_config
from gateway.daemon.assembly import Gateway, running_gateway
from tests.fakes.openai_server import FakeOpenAI
from tests.helpers import eventually, settled

__all__ = ["Choice", "GatewayHarness", "Harness", "Place", "Places", "Promise", "Shown",
           "merged"]


class Promise(enum.Enum):
    """The adapter contract's promises (docs/adapters.md), one case each."""

    ROUTES = "routes"
    NOTICES = "notices"
    SEND_FAILURES = "send_failures"
    STREAMING = "streaming"
    APPROVALS = "approvals"
    FILES = "files"
    WHILE_DOWN = "while_down"
    CURSOR = "cursor"


#: an approval's choices, as the core names them (gateway/contract/approval.py)
Choice = str  # "once", "session" or "deny"


@dataclass(frozen=True)
class Place:
    """Where a person writes: a thread or topic of a chat, or a direct message.

    Opaque to the cases: ``label`` is for messages and markers, ``where`` holds the
    platform's own coordinates (a chat id and a topic, a channel id), read only by the
    harness that made it."""

    label: str
    where: tuple[Any, ...]


@dataclass(frozen=True)
class Places:
    """Two distinct threads (topics) of one chat, and a direct message."""

    thread_a: Place
    thread_b: Place
    dm: Place

    def __iter__(self) -> Iterator[Place]:
        return iter((self.thread_a, self.thread_b, self.dm))


@dataclass(frozen=True)
class Shown:
    """An approval request as a person sees it now: its id, and the outcome shown in its
    place (None while it still waits for a choice)."""

    approval_id: str
    outcome: str | None


class Harness(Protocol):
    """One platform and its fake server, driven as a person uses the platform.

    A fresh harness is made for every case. Each method's docstring names the promise
    it serves; every reading method (``bot_texts``, ``previews``, ``files_posted``,
    ``approvals_shown``, ``confirmed``) is a snapshot, cheap to poll with
    ``tests.helpers.eventually``.
    """

    #: the platform's name, as in ``platforms.<name>``; the test ids show it
    name: ClassVar[str]
    #: the promises this platform cannot be checked on as the case does, and why
    #: (shown in the test id of ``test_what_does_not_apply``)
    does_not_apply: ClassVar[Mapping[Promise, str]]

    def running(self, home: Path, *, model: FakeOpenAI | None = None,
                settings: Mapping[str, Any] | None = None
                ) -> AbstractAsyncContextManager[Gateway]:
        """Start the fake server and the whole gateway on ``home`` (every promise).

        The config is built from a dict with ``parse_config``: the platform's section
        (``platforms.<name>``) pointing at the fake, the web chat on a free port,
        ``settings`` merged in (nested, as in config.yaml); with ``model``, the model
        agent on that fake endpoint (else the built-in command agent: ``/bg``, ``/run``,
        ``/send``, and "Received: ..." for anything else). Yields once the platform is
        connected; stops both on the way out."""
        ...

    @property
    def gateway(self) -> Gateway:
        """The gateway running now (a new one after :meth:`start_daemon`)."""
        ...

    def places(self) -> Places:
        """Two threads of one chat and a DM, all three distinct routes (every promise)."""
        ...

    async def say(self, place: Place, text: str) -> None:
        """A person writes ``text`` in ``place``. Returns once the platform has it; the
        gateway may not have it yet. Said while the daemon is down (between
        :meth:`stop_daemon` and :meth:`start_daemon`), the platform keeps it as it would
        (Telegram's pending updates, a Discord channel's history, the page's unsent
        queue) — the while-down promise."""
        ...

    def bot_texts(self, place: Place) -> list[str]:
        """What the person sees of the bot in ``place`` now: the text of each of its
        messages (requests for approval and posted files included), oldest first, as it
        stands after its edits — a preview being written included, so a case waits
        until what is there is final. Routes, notices, send failures, streaming,
        while down: most promises are read here."""
        ...

    def previews(self, place: Place) -> list[str]:
        """Every state a streamed reply was shown in while written there, oldest first,
        as plain text without the "writing" mark (streaming)."""
        ...

    def fail_sends(self, place: Place, status: int, *, count: int = 1,
                   retry_after: float | None = None, containing: str | None = None) -> None:
        """The platform's server answers the next ``count`` sends to ``place`` (those
        whose text holds ``containing``, when given) with HTTP ``status``; a 429 says
        ``retry_after`` seconds (send failures)."""
        ...

    async def send_file(self, place: Place, name: str, data: bytes,
                        caption: str | None = None) -> None:
        """A person sends a file called ``name`` in ``place`` (a file in)."""
        ...

    def files_posted(self, place: Place) -> list[tuple[str, bytes]]:
        """The files the bot posted in ``place``: name and bytes, oldest first (a file
        out)."""
        ...

    def approvals_shown(self, place: Place) -> list[Shown]:
        """The approval requests the bot shows in ``place``, oldest first (approvals)."""
        ...

    async def press(self, place: Place, approval_id: str, choice: Choice) -> None:
        """A person decides the request ``approval_id`` in ``place``: presses its button
        for ``choice`` where the platform has buttons, else sends ``/approve`` or
        ``/deny``. Returns once the platform has the press answered (Telegram's
        callback answer, Discord's interaction response, the page's frame back), so a
        second press can be told from the first (approvals)."""
        ...

    async def stop_daemon(self) -> None:
        """Stop the gateway as an operator does (the fake server stays up): what the
        person says now waits at the platform (while down)."""
        ...

    async def start_daemon(self) -> Gateway:
        """Start the gateway again on the same home and config; returns once the
        platform is connected (while down)."""
        ...

    def confirmed(self, place: Place, text: str) -> bool:
        """Whether the platform has been told that the message ``text`` said in
        ``place`` was taken, so it will not hand it out again: Telegram's offset moved
        past its update, the page had its ack (cursor)."""
        ...

    async def settled(self) -> None:
        """Until the platform has handed over all it holds for the gateway and the
        gateway has nothing left to do: what was sent by then is all that will be. A
        case counting "exactly once" waits for this after the first arrival."""
        ...


class GatewayHarness:
    """What the harnesses share: the config from a dict, the gateway's lifecycle (a stop
    and a start in the middle of a case), and settling. A platform's harness fills in:

    - ``name``, ``does_not_apply`` (class attributes);
    - :meth:`platform_section` (``platforms.<name>``, pointing at the fake);
    - :meth:`serving` (the fake server, for the whole case) and :meth:`connected`
      (waits until the adapter is up, after each start);
    - optionally :meth:`stopping` (before each stop) and :meth:`quiet` (the platform
      handed over all it holds);
    - the reading and writing methods of :class:`Harness`.
    """

    name: ClassVar[str]
    does_not_apply: ClassVar[Mapping[Promise, str]] = {}

    def __init__(self) -> None:
        self._config: Config | None = None
        self._gateway: Gateway | None = None
        self._life: AsyncExitStack | None = None

    # -------------------------------------------------------------- to fill in

    def platform_section(self) -> dict[str, Any]:
        raise NotImplementedError

    def serving(self) -> AbstractAsyncContextManager[object]:
        raise NotImplementedError

    async def connected(self, gw: Gateway) -> None:
        raise NotImplementedError

    async def say(self, place: Place, text: str) -> None:
        raise NotImplementedError

    async def stopping(self) -> None:
        """Before the gateway stops (the web harness closes its page's sockets)."""

    def quiet(self) -> bool:
        """Whether the platform has handed over everything it holds for the gateway."""
        return True

    # -------------------------------------------------------------- lifecycle

    @asynccontextmanager
    async def _running(self, home: Path, model: FakeOpenAI | None,
                       settings: Mapping[str, Any] | None) -> AsyncIterator[Gateway]:
        async with self.serving():
            self._config = self.config(home, model, settings or {})
            try:
                yield await self.start_daemon()
            finally:
                await self.stop_daemon()

    def running(self, home: Path, *, model: FakeOpenAI | None = None,
                settings: Mapping[str, Any] | None = None
                ) -> AbstractAsyncContextManager[Gateway]:
        return self._running(home, model, settings)

    def config(self, home: Path, model: FakeOpenAI | None,
               settings: Mapping[str, Any]) -> Config:
        raw: dict[str, Any] = {"home": str(home),
                               "platforms": {"web": {"port": 0}}}
        if self.name != "web":
            raw["platforms"][self.name] = {"enabled": True, **self.platform_section()}
        else:
            raw["platforms"]["web"].update(self.platform_section())
        if model is not None:
            raw = merged(raw, {"agent": {
                "backend": "openai", "base_url": model.base_url, "model": "fake-model",
                "api_key": "sk-test", "retry_backoff_seconds": 0.01,
                "timeout_seconds": 5}})
        return parse_config(merged(raw, settings), {})

    @property
    def gateway(self) -> Gateway:
        if self._gateway is None:
            raise RuntimeError(f"the {self.name} harness has no gateway running")
        return self._gateway

    async def start_daemon(self) -> Gateway:
        assert self._config is not None, "start_daemon inside running()"
        assert self._life is None, "the gateway is running already"
        life = AsyncExitStack()
        try:
            self._gateway = gw = await life.enter_async_context(running_gateway(self._config))
            await self.connected(gw)
        except BaseException:
            self._gateway = None
            await life.aclose()
            raise
        self._life = life
        return gw

    async def stop_daemon(self) -> None:
        life, self._life = self._life, None
        if life is None:
            return
        try:
            await self.stopping()
        finally:
            self._gateway = None
            await life.aclose()

    async def settled(self) -> None:
        await eventually(self.quiet, what=f"{self.name} to have handed over all it holds")
        await settled(self.gateway)

    async def press_by_command(self, place: Place, approval_id: str, choice: Choice) -> None:
        """:meth:`Harness.press` where the platform has no buttons: the person types the
        buttons' words (``/approve <id>``, ``/approve <id> session``, ``/deny <id>``),
        and the press is answered once the gateway has nothing left to do."""
        words = {"once": f"/approve {approval_id}", "session": f"/approve {approval_id} session",
                 "deny": f"/deny {approval_id}"}[choice]
        await self.say(place, words)
        await self.settled()


def merged(base: Mapping[str, Any], more: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with ``more`` merged in, nested mappings merged key by key."""
    out = dict(base)
    for key, value in more.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merged(out[key], value)
        else:
            out[key] = value
    return out


_APPROVAL_ID = re.compile(r"\((a[0-9a-f]{7})\)")


def approval_id_in(text: str) -> str | None:
    """The approval id a request's text names ("... (a1b2c3d4)")."""
    found = _APPROVAL_ID.search(text)
    return found.group(1) if found else None
