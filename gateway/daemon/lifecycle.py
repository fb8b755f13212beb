"""One rule for starting and stopping the daemon's parts, as python-telegram-bot's
Application does it (initialize, start, stop, shutdown), composed in one place.

Parts start in order. On the way out — a signal, an error, the end of a test —
every started part is first *stopped*: it takes nothing new, at once (no new
tab, no schedule run, no notice claimed, no message's turn begun). Only then is
what is under way *drained* (turns in flight may finish, for a while), and
last every part is *shut down* (lets go of connections, files and tasks). Each
phase goes newest first, over every part, before the next begins: so nothing is
taken in while another part drains, nothing is let go of while another part may
still need it, and a part that failed to start is neither stopped nor shut down.

The daemon stops the parts as soon as it is told to stop (:meth:`Lifecycle.stop`),
before it tells conversations it is restarting, which may take a while.
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
    drain: Step | None
    shutdown: Step | None


class Lifecycle:
    def __init__(self) -> None:
        self._parts: list[_Part] = []
        self._stopped: list[_Part] = []  # stopped already, still to drain and shut down

    async def start(self, name: str, starting: Awaitable[T], *, stop: Step | None = None,
                    drain: Step | None = None, shutdown: Step | None = None) -> T:
        """Await ``starting``; once it has succeeded, its steps are owed."""
        result = await starting
        self._parts.append(_Part(name, stop, drain, shutdown))
        return result

    def add(self, name: str, *, stop: Step | None = None, drain: Step | None = None,
            shutdown: Step | None = None) -> None:
        """A part that needed no starting, with what it is owed on the way out."""
        self._parts.append(_Part(name, stop, drain, shutdown))

    async def __aenter__(self) -> Lifecycle:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def stop(self) -> None:
        """Every part takes nothing new, newest first (once; :meth:`close` drains them
        and shuts them down)."""
        parts, self._parts = list(reversed(self._parts)), []
        await self._run("stop", parts)
        self._stopped = parts + self._stopped  # still newest first

    async def close(self) -> None:
        await self.stop()
        parts, self._stopped = self._stopped, []
        for phase in ("drain", "shutdown"):
            await self._run(phase, parts)

    @staticmethod
    async def _run(phase: str, parts: list[_Part]) -> None:
        for part in parts:
            step: Step | None = getattr(part, phase)
            if step is None:
                continue
            try:
                await step()
            except Exception:  # the rest must still stop and let go
                log.exception("lifecycle_step_failed", part=part.name, phase=phase)
