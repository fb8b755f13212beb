"""Task-local session context: the only place per-message state lives.

The runner sets it around each turn with :func:`session_context`; tools read
it with :func:`current_session`. asyncio tasks inherit a copy, and
``asyncio.to_thread`` copies it into the worker thread, so a tool running
anywhere within a turn sees that turn's conversation and no other.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from gateway.errors import HomingError
from gateway.words.route import Route


@dataclass(frozen=True, slots=True)
class SessionContext:
    route: Route
    session_key: str
    session_id: str
    tab_id: str | None = None


class NoSessionContext(HomingError, RuntimeError):
    """A tool was called outside any turn, so it cannot know where to report."""


_current: contextvars.ContextVar[SessionContext | None] = contextvars.ContextVar(
    "homing_session", default=None
)


@contextmanager
def session_context(ctx: SessionContext) -> Iterator[SessionContext]:
    token = _current.set(ctx)
    try:
        yield ctx
    finally:
        _current.reset(token)


def current_session() -> SessionContext:
    ctx = _current.get()
    if ctx is None:
        raise NoSessionContext("no conversation is active in this task or thread")
    return ctx
