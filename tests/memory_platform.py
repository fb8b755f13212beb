"""An in-memory platform for tests and benchmarks: messages in, sends recorded."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gateway.contract.adapter import Adapter
from gateway.formatting.splitter import split_message
from gateway.words.events import MessageEvent, MessageKind, MessageOutcome, NoticeInfo, SendResult
from gateway.words.route import Route

if TYPE_CHECKING:
    from gateway.contract.host import AdapterHost


@dataclass(frozen=True, slots=True)
class SentMessage:
    route: Route
    text: str
    kind: MessageKind
    sent_at: float = field(default_factory=time.monotonic)
    #: what a platform that deduplicates would know it by (Discord's nonce)
    dedupe_key: str | None = None


class MemoryAdapter(Adapter):
    """Records every send; ``receive`` plays a platform update into the gateway.

    ``send_delay`` makes each send yield to the loop for a while, as a network
    round trip would, so concurrency tests really interleave.
    """

    def __init__(self, platform: str = "memory", *, message_limit: int = 4096,
                 send_delay: float = 0.0, authenticates_users: bool = True) -> None:
        self.platform = platform
        #: answers chosen by a test for the next sends to a chat, in order:
        #: chat_id → list of SendResults (a failure is returned instead of sending)
        self.scripted_failures: dict[str, list[SendResult]] = {}
        self.authenticates_users = authenticates_users
        self.message_limit = message_limit
        self.send_delay = send_delay
        self.sent: list[SentMessage] = []
        #: what :meth:`send_room` says: the messages the chats take now (None: no limit)
        self.room: int | None = None
        self._runner: AdapterHost | None = None

    async def connect(self, runner: AdapterHost) -> None:
        self._runner = runner

    async def disconnect(self) -> None:
        self._runner = None

    def receive(self, text: str, route: Route, message_id: str | None = None,
                **metadata: object) -> asyncio.Future[MessageOutcome]:
        if self._runner is None:
            raise RuntimeError("adapter is not connected")
        return self._runner.submit(MessageEvent(text=text, route=route, message_id=message_id,
                                                metadata=dict(metadata)))

    async def send(self, route: Route, text: str, *, kind: MessageKind = "reply",
                   session_id: str | None = None, dedupe_key: str | None = None,
                   notice: NoticeInfo | None = None) -> SendResult:
        if self.send_delay:
            await asyncio.sleep(self.send_delay)
        scripted = self.scripted_failures.get(route.chat_id)
        if scripted:
            return scripted.pop(0)
        for part in split_message(text, self.message_limit):
            self.sent.append(SentMessage(route=route, text=part, kind=kind,
                                         dedupe_key=dedupe_key))
        return SendResult.sent(str(len(self.sent)))

    def send_room(self, route: Route) -> int | None:
        return self.room

    def sent_to(self, route: Route) -> list[SentMessage]:
        return [m for m in self.sent
                if (m.route.chat_id, m.route.thread_id) == (route.chat_id, route.thread_id)]
