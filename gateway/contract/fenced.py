"""The one place where this life's sends are fenced (gateway/cluster/lives.py).

The runner holds every adapter through a ``FencedAdapter``, so everything that goes
out to a platform waits while this life's renewal is overdue, and is withheld once
the life is over: a reply, a notice, a file, an approval request or its outcome,
"typing", a status, a preview. Nothing at a call site asks again. (Starting work is
fenced where it starts: ``JobManager.start`` and ``DelegationManager.delegate``.)
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gateway.cluster.lives import Acting, withheld
from gateway.contract.adapter import Adapter, LiveReply
from gateway.words.events import Choice, MessageKind, NoticeInfo, SendResult
from gateway.words.route import Route

if TYPE_CHECKING:
    from gateway.contract.approval import ApprovalRecord
    from gateway.contract.host import AdapterHost
    from gateway.inbound.files import IncomingFile


class FencedAdapter(Adapter):
    """``inner`` as the core sends through it: every send first asks ``acting``."""

    def __init__(self, inner: Adapter, acting: Acting) -> None:
        self.inner = inner
        self.acting = acting
        self.platform = inner.platform
        self.message_limit = inner.message_limit
        self.authenticates_users = inner.authenticates_users
        self.supports_pairing = inner.supports_pairing
        self.listens = inner.listens

    def __getattr__(self, name: str) -> Any:
        """What only this platform has (its tabs, its bot) is the platform's own."""
        return getattr(self.inner, name)

    # what goes out: fenced ---------------------------------------------------

    async def send(self, route: Route, text: str, *, kind: MessageKind = "reply",
                   session_id: str | None = None, dedupe_key: str | None = None,
                   notice: NoticeInfo | None = None) -> SendResult:
        if (refused := await withheld(self.acting, route)) is not None:
            return refused  # a survivor answers for this life now
        return await self.inner.send(route, text, kind=kind, session_id=session_id,
                                     dedupe_key=dedupe_key, notice=notice)

    async def send_choices(self, route: Route, text: str, choices: Sequence[Choice], *,
                           kind: MessageKind = "system", session_id: str | None = None
                           ) -> SendResult:
        if (refused := await withheld(self.acting, route)) is not None:
            return refused
        return await self.inner.send_choices(route, text, choices, kind=kind,
                                             session_id=session_id)

    async def send_file(self, route: Route, path: Path, caption: str | None = None, *,
                        session_id: str | None = None) -> SendResult:
        if (refused := await withheld(self.acting, route)) is not None:
            return refused
        return await self.inner.send_file(route, path, caption, session_id=session_id)

    async def ask_approval(self, route: Route, record: ApprovalRecord) -> SendResult:
        if (refused := await withheld(self.acting, route)) is not None:
            return refused
        return await self.inner.ask_approval(route, record)

    async def settle_approval(self, route: Route, record: ApprovalRecord) -> None:
        if await self.acting():  # a stalled life shows nothing
            await self.inner.settle_approval(route, record)

    async def typing(self, route: Route, active: bool) -> None:
        if await self.acting():
            await self.inner.typing(route, active)

    async def status(self, route: Route, text: str) -> None:
        if await self.acting():
            await self.inner.status(route, text)

    def live_reply(self, route: Route, session_id: str | None) -> LiveReply | None:
        live = self.inner.live_reply(route, session_id)
        return HeldLive(live, self.acting, route) if live is not None else None

    # the rest: the platform's own --------------------------------------------

    async def connect(self, runner: AdapterHost) -> None:
        await self.inner.connect(runner)

    async def disconnect(self) -> None:
        await self.inner.disconnect()

    async def stop_receiving(self) -> None:
        await self.inner.stop_receiving()

    async def download(self, file: IncomingFile) -> AsyncIterator[bytes]:
        return await self.inner.download(file)

    async def delivered(self, route: Route, dedupe_key: str) -> bool | None:
        return await self.inner.delivered(route, dedupe_key)  # a look, not a send

    def send_room(self, route: Route) -> int | None:
        return self.inner.send_room(route)

    def message_count(self, text: str) -> int:
        return self.inner.message_count(text)

    @property
    def connected(self) -> bool:
        return self.inner.connected

    async def wait_connected(self, timeout: float | None = None) -> None:
        await self.inner.wait_connected(timeout)

    def open_tabs(self, chat_id: str) -> set[str]:
        return self.inner.open_tabs(chat_id)


class HeldLive:
    """A live reply whose preview waits like every send while this life's renewal is
    overdue, and is left as it stands once the life is over; its final message is
    withheld then, like any other send."""

    def __init__(self, live: LiveReply, acting: Acting, route: Route) -> None:
        self._live = live
        self._acting = acting
        self._route = route

    async def show(self, text: str) -> None:
        if await self._acting():
            await self._live.show(text)

    async def status(self, text: str) -> None:
        if await self._acting():
            await self._live.status(text)

    async def finish(self, text: str, *, kind: MessageKind, session_id: str | None,
                     dedupe_key: str | None = None) -> SendResult:
        if (refused := await withheld(self._acting, self._route)) is not None:
            return refused
        return await self._live.finish(text, kind=kind, session_id=session_id,
                                       dedupe_key=dedupe_key)

    async def close(self) -> None:
        if await self._acting():
            await self._live.close()
