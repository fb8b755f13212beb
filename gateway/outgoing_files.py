"""Files the agent posts: ``send_file`` and ``/send``, and a notice's artifact.

Only files inside ``attachments.send_roots`` go out (symlinks resolved first);
each is recorded in the transcript as a line naming it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import structlog

from .attachments import FileRefused, conversation_dir, sendable
from .events import SendResult
from .lives import withheld
from .route import Route
from .session_entry import SessionEntry

if TYPE_CHECKING:
    from .runner import GatewayRunner
    from .turn import Turn

log = structlog.get_logger(__name__)


async def send_file(runner: GatewayRunner, session: SessionEntry, route: Route, path: str,
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
    if (refused := await withheld(runner.acting, route)) is not None:
        return refused  # a survivor answers for this life now
    result = await adapter.send_file(route, target, caption, session_id=session.id)
    if result.ok:
        runner.store.record_message(session.id, "reply",
                                    f"[file: {target.name}] {caption or ''}".strip())
    return result


async def post_artifact(runner: GatewayRunner, turn: Turn, path: str) -> None:
    """A notice's file, after its words; one that cannot go is said so, not retried."""
    try:
        result = await send_file(runner, turn.session, turn.route, path)
    except FileRefused as exc:
        result = SendResult.failed(str(exc))
    if not result.ok:
        log.warning("artifact_not_sent", path=path, error=result.error)
        await runner.send(turn.session, turn.route,
                          f"(The file {path} was not posted: {result.error})", kind="system")
