"""What a platform adapter may ask of the core, as a Protocol (after Starlette's
``types.py``): it names only the calls a platform makes, so an adapter cannot grow
a dependency on the runner's insides unseen; the runner satisfies it (mypy checks
it where it is passed).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from gateway.words.events import MessageEvent
from gateway.words.route import Route

if TYPE_CHECKING:
    from gateway.config.settings import Config
    from gateway.contract.approval import ApprovalDesk
    from gateway.inbound.cursors import Cursors
    from gateway.inbound.journal import Inbound
    from gateway.sessions.store import SessionStore
    from gateway.store.state import StateDatabase
    from gateway.words.events import MessageOutcome, Received


class Commands(Protocol):
    """What a platform reads of the agent: the slash commands to offer."""

    @property
    def commands(self) -> Mapping[str, str]: ...


class Connected(Protocol):
    """What a platform reads of the others: whether each is connected."""

    @property
    def connected(self) -> bool: ...


class MetricsPage(Protocol):
    """The Prometheus page, for the web server's ``/metrics``."""

    async def render(self, db: StateDatabase, adapters: Mapping[str, Any],
                     jobs_running: int) -> bytes: ...


class AdapterHost(Protocol):
    """What a platform adapter uses: messages in, the store and the approvals for the
    web chat's API and buttons, and the word that it is (back) online."""

    config: Config
    store: SessionStore
    inbound: Inbound
    #: where a platform whose client holds its cursor (Matrix's sync token) saves it,
    #: once every message before it is journaled
    cursors: Cursors
    jobs_running: Callable[[], int]

    @property
    def metrics(self) -> MetricsPage: ...

    @property
    def agent(self) -> Commands: ...

    @property
    def approvals(self) -> ApprovalDesk | None: ...

    @property
    def adapters(self) -> Mapping[str, Connected]: ...

    def session_key_for(self, route: Route) -> str: ...

    async def conversation_idle(self, session_key: str) -> None: ...

    def receive(self, event: MessageEvent, *, platform_id: str | None = None,
                sent_at: float | None = None) -> Received: ...

    def submit(self, event: MessageEvent, *, platform_id: str | None = None,
               sent_at: float | None = None) -> asyncio.Future[MessageOutcome]: ...

    def platform_connected(self, platform: str) -> None: ...
