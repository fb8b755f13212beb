"""Files the agent posts: ``send_file`` and ``/send``, and a notice's artifact.

Only files inside ``attachments.send_roots`` go out (symlinks resolved first);
each is recorded in the transcript as a line naming it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol

import structlog

from gateway.inbound.files import FileRefused, conversation_dir, sendable
from gateway.words.events import SendResult
from gateway.words.route import Route
from gateway.words.session_entry import SessionEntry

if TYPE_CHECKING:
    from gateway.config.settings import Config
    from gateway.contract.adapter import Adapter
    from gateway.messages.turn import Turn
    from gateway.sessions.store import SessionStore
    from gateway.words.events import MessageKind

log = structlog.get_logger(__name__)


class FileHost(Protocol):
    """What posting a file asks of the message path (the runner)."""

    @property
    def config(self) -> Config: ...

    @property
    def store(self) -> SessionStore: ...

    @property
    def adapters(self) -> Mapping[str, Adapter]: ...

    async def send(self, session: SessionEntry, route: Route, text: str, *,
                   kind: MessageKind = "reply") -> SendResult: ...


async def send_file(runner: FileHost, session: SessionEntry, route: Route, path: str,
                    caption: str | None = None) -> SendResult:
    """Post the file at ``path`` to ``route``; raises FileRefused for a file that may not
    or cannot be sent."""
    config = runner.config
    # the conversation's own files, never another's, and the configured roots
    roots = [conversation_dir(config.files_dir, route).resolve(), *config.send_roots]
    target = sendable(path, roots, config.attachments.max_bytes)
    adapter = runner.adapters.get(route.platform)
    if adapter is None:
        return SendResult.failed(f"platform {route.platform!r} is not running")
    result = await adapter.send_file(route, target, caption, session_id=session.id)
    if result.ok:
        runner.store.record_message(session.id, "reply",
                                    f"[file: {target.name}] {caption or ''}".strip())
    return result


async def post_artifact(runner: FileHost, turn: Turn, path: str) -> None:
    """A notice's file, after its words; one that cannot go is said so, not retried."""
    try:
        result = await send_file(runner, turn.session, turn.route, path)
    except FileRefused as exc:
        result = SendResult.failed(str(exc))
    if not result.ok:
        log.warning("artifact_not_sent", path=path, error=result.error)
        await runner.send(turn.session, turn.route,
                          f"(The file {path} was not posted: {result.error})", kind="system")
