"""What the pieces around the runner may ask of it, as small Protocols (after
Starlette's ``types.py``): a turn and the code that answers it, and a platform
adapter. Each names only the calls its side makes, so a piece cannot grow a
dependency on the runner's insides unseen; the runner satisfies both (mypy
checks it where it is passed).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

from .database import Op
from .events import MessageEvent, MessageKind, NoticeInfo, SendResult
from .route import Route
from .session_entry import SessionEntry

if TYPE_CHECKING:
    from agent.base import Agent
    from tools.scheduler import Scheduler

    from .approvals import Approvals
    from .config import Config
    from .inbound import Inbound, JournalEntry
    from .metrics import Metrics
    from .platforms.base import Adapter, LiveReply
    from .runner import Outcome, Received
    from .store import SessionStore
    from .turn import Turn


class TurnHost(Protocol):
    """What a turn — its replies, the gateway's commands, the agents — uses."""

    store: SessionStore
    agent: Agent
    approvals: Approvals | None

    async def send(self, session: SessionEntry, route: Route, text: str, *,
                   kind: MessageKind = "reply",
                   recorded_with: Callable[[SendResult], Sequence[Op]] | None = None,
                   dedupe_key: str | None = None, live: LiveReply | None = None,
                   notice: NoticeInfo | None = None) -> SendResult: ...

    async def send_file(self, session: SessionEntry, route: Route, path: str,
                        caption: str | None = None) -> SendResult: ...

    async def tool_status(self, route: Route, text: str) -> None: ...

    async def rotate_session(self, session: SessionEntry, reason: str, *,
                             route: Route | None = None,
                             seed: Callable[[str], Sequence[Op]] | None = None
                             ) -> SessionEntry: ...

    async def take_steered(self, session_key: str) -> list[JournalEntry]: ...

    def stop_turn(self, session_key: str) -> bool: ...

    def status_lines(self, turn: Turn) -> list[str]: ...


class AdapterHost(Protocol):
    """What a platform adapter uses: messages in, the store and the approvals for the
    web chat's API and buttons, and the word that it is (back) online."""

    config: Config
    store: SessionStore
    agent: Agent
    inbound: Inbound
    approvals: Approvals | None
    scheduler: Scheduler | None
    metrics: Metrics
    adapters: dict[str, Adapter]
    jobs_running: Callable[[], int]

    def session_key_for(self, route: Route) -> str: ...

    async def conversation_idle(self, session_key: str) -> None: ...

    def receive(self, event: MessageEvent, *, platform_id: str | None = None,
                sent_at: float | None = None) -> Received: ...

    def submit(self, event: MessageEvent, *, platform_id: str | None = None,
               sent_at: float | None = None) -> asyncio.Future[Outcome]: ...

    def platform_connected(self, platform: str) -> None: ...
