"""The interface every platform adapter implements."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from gateway.formatting.splitter import split_message
from gateway.inbound.files import FileRefused, IncomingFile
from gateway.words.events import Choice, MessageKind, NoticeInfo, SendResult
from gateway.words.route import Route

if TYPE_CHECKING:
    from gateway.contract.approval import ApprovalRecord
    from gateway.contract.host import AdapterHost


class LiveReply(Protocol):
    """One turn's reply as it is written: shown while the model writes, then final.

    Best effort until ``finish``: a preview that cannot be shown is skipped;
    ``finish`` delivers the final text exactly once, in place of the preview.
    """

    async def show(self, text: str) -> None:
        """The reply so far: the whole of it, not what was added."""

    async def status(self, text: str) -> None:
        """What the turn is doing ("running `make test`…")."""

    async def finish(self, text: str, *, kind: MessageKind, session_id: str | None,
                     dedupe_key: str | None = None) -> SendResult:
        """The final message, taking the preview's place; the next ``show`` starts anew."""

    async def close(self) -> None:
        """The turn is over: whatever preview did not become a message goes away."""


class Adapter(ABC):
    """Turns a platform's updates into MessageEvents and sends replies to routes.

    Lifecycle: ``connect(runner)`` starts receiving and hands every parsed
    message to ``runner.submit``; ``disconnect()`` stops. ``send`` must route
    only by the ``Route`` it is given, never by "the last message seen".
    """

    platform: str
    #: the most characters one platform message may carry
    message_limit: int = 4096
    #: True when the adapter authenticates users itself, so the runner skips
    #: the ``allowed_users`` check (the web chat: loopback or its token)
    authenticates_users: bool = False
    #: True when an unknown user in a direct message is offered a pairing code
    supports_pairing: bool = False
    #: True when clients connect to a server of the adapter's own (the web chat's tabs):
    #: a life that is over closes it at once, so they reconnect to another instance
    listens: bool = False

    @abstractmethod
    async def connect(self, runner: AdapterHost) -> None: ...

    @abstractmethod
    async def disconnect(self) -> None: ...

    async def stop_receiving(self) -> None:  # noqa: B027 - optional hook, no-op by default
        """The gateway is stopping: take nothing new from the platform where it keeps
        what is not taken (Telegram's updates, a new web tab); sending still works.
        What still arrives is journaled by the runner and left for the next life."""

    @abstractmethod
    async def send(self, route: Route, text: str, *, kind: MessageKind = "reply",
                   session_id: str | None = None, dedupe_key: str | None = None,
                   notice: NoticeInfo | None = None) -> SendResult:
        """Deliver ``text`` to ``route``, split to the platform's limit.

        ``session_id`` names the session the text belongs to, for platforms
        that show it (the web chat); routing never depends on it. ``dedupe_key``,
        the same for a send made again after a crash, lets a platform that can
        deduplicate (Discord's message nonce) post it once.
        """

    async def send_choices(self, route: Route, text: str, choices: Sequence[Choice], *,
                           kind: MessageKind = "system", session_id: str | None = None
                           ) -> SendResult:
        """``text`` with a button for each of ``choices`` where the platform has buttons
        (``Capabilities.buttons``); a press is the presser sending that choice's command
        here. Without buttons, the text alone: it says how to type them."""
        return await self.send(route, text, kind=kind, session_id=session_id)

    async def delivered(self, route: Route, dedupe_key: str) -> bool | None:
        """Whether the send made with ``dedupe_key`` into ``route`` (its first message)
        reached the platform, asked after a crash that lost its record: True or False
        where the platform can tell (``Capabilities.confirms_sends``), None where it
        cannot — then the gateway does not know, and says so."""
        return None

    async def typing(self, route: Route, active: bool) -> None:  # noqa: B027
        """A sign of life while a turn runs in ``route``: called with True when it starts
        and again every few seconds (platforms show "typing" for about five), then
        False when it ends. Best effort: a failure here is never the turn's."""

    async def status(self, route: Route, text: str) -> None:  # noqa: B027
        """What the turn is doing ("running `make test`…"), where a platform can show it."""

    async def send_file(self, route: Route, path: Path, caption: str | None = None, *,
                        session_id: str | None = None) -> SendResult:
        """Post the file at ``path`` to ``route`` (an image as a photo where that differs)."""
        return SendResult.failed(f"{self.platform} cannot post files", permanent=True,
                                 route_gone=False)

    async def download(self, file: IncomingFile) -> AsyncIterator[bytes]:
        """The bytes of a file someone sent (as the platform described it), in chunks."""
        raise FileRefused(f"{file.name} was not saved: {self.platform} files are not taken.")

    async def ask_approval(self, route: Route, record: ApprovalRecord) -> SendResult:
        """Post an approval request in ``route``, under the message that started the turn,
        with its three choices; where a platform has no buttons, as text answered with
        ``/approve`` and ``/deny``."""
        return await self.send(route, record.request_text(), kind="system")

    async def settle_approval(self, route: Route, record: ApprovalRecord) -> None:
        """Show what became of a request (in its place, where the platform can edit)."""
        await self.send(route, f"{record.id}: {record.outcome_text()}", kind="system")

    def send_room(self, route: Route) -> int | None:
        """How many messages ``route`` takes now before a rate limit makes them wait;
        None where the platform has none. Notices that do not fit go out together, in
        one message (gateway/delivery/merged_notices.py)."""
        return None

    def message_count(self, text: str) -> int:
        """How many platform messages ``send`` makes of ``text``: its own splitting, as
        the platform measures a message, so notices put together in one message
        (gateway/delivery/merged_notices.py) are known to go out as one."""
        return len(split_message(text, self.message_limit))

    def live_reply(self, route: Route, session_id: str | None) -> LiveReply | None:
        """A reply shown as it is written in ``route``, or None where the platform
        cannot show one (then replies are sent whole)."""
        return None

    @property
    def connected(self) -> bool:
        return True

    async def wait_connected(self, timeout: float | None = None) -> None:  # noqa: B027
        """Until the platform is connected (at once for platforms that connect in ``connect``)."""

    def open_tabs(self, chat_id: str) -> set[str]:
        """Ids of the client tabs open on a conversation; only the web chat has tabs."""
        return set()
