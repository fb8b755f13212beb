"""One rule for starting and stopping the daemon's parts, as python-telegram-bot's
Application does it (initialize, start, stop, shutdown), composed in one place.

Parts start in order. On the way out — a signal, an error, the end of a test —
every started part is first *stopped* (takes no new work; what is under way
may finish), newest first, and only then *shut down* (lets go of connections,
files and tasks), newest first. So nothing is let go of while another part
may still need it, and a part that failed to start is neither stopped nor
shut down.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import structlog

log = structlog.get_logger(__name__)

T = TypeVar("T")
Step = Callable[[], Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class _Part:
    name: str
    stop: Step | None
    shutdown: Step | None


class Lifecycle:
    def __init__(self) -> None:
        self._parts: list[_Part] = []

    async def start(self, name: str, starting: Awaitable[T], *, stop: Step | None = None,
                    shutdown: Step | None = None) -> T:
        """Await ``starting``; once it has succeeded, ``stop`` and ``shutdown`` are owed."""
        result = await starting
        self._parts.append(_Part(name, stop, shutdown))
        return result

    def add(self, name: str, *, stop: Step | None = None, shutdown: Step | None = None) -> None:
        """A part that needed no starting, with what it is owed on the way out."""
        self._parts.append(_Part(name, stop, shutdown))

    async def __aenter__(self) -> Lifecycle:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        parts, self._parts = list(reversed(self._parts)), []
        for phase in ("stop", "shutdown"):
            for part in parts:
                step: Step | None = getattr(part, phase)
                if step is None:
                    continue
                try:
                    await step()
                except Exception:  # the rest must still stop and let go
                    log.exception("lifecycle_step_failed", part=part.name, phase=phase)
