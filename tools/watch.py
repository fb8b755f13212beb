"""Watch patterns: which output lines become notices, and how often.

Per job a cooldown between notices (what it suppresses is counted into the
next notice) and a cap, past which the watch turns itself off with one
``watch_disabled`` notice. A breaker shared by all jobs stops a flood.
"""

from __future__ import annotations

import re
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

MAX_LINE_CHARS = 500


@dataclass(frozen=True, slots=True)
class WatchLimits:
    cooldown_seconds: float = 10.0
    max_notices: int = 10
    max_lines: int = 10
    global_max_per_minute: int = 30


class GlobalBreaker:
    """At most ``per_minute`` watch notices across all jobs in any 60 seconds."""

    def __init__(self, per_minute: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.per_minute = per_minute
        self._clock = clock
        self._recent: deque[float] = deque()

    def allow(self) -> bool:
        now = self._clock()
        while self._recent and now - self._recent[0] >= 60.0:
            self._recent.popleft()
        if len(self._recent) >= self.per_minute:
            return False
        self._recent.append(now)
        return True


@dataclass(frozen=True, slots=True)
class WatchNotice:
    kind: Literal["watch_match", "watch_disabled"]
    lines: tuple[str, ...]
    suppressed: int


@dataclass(slots=True)
class JobWatch:
    """The watch state of one job; feed it every output line."""

    patterns: list[re.Pattern[str]]
    limits: WatchLimits
    breaker: GlobalBreaker
    notices: int = 0
    disabled: bool = False
    clock: Callable[[], float] = time.monotonic
    _suppressed: int = 0
    _last_notice: float | None = None
    _held: deque[str] = field(default_factory=deque)

    def held(self) -> WatchNotice | None:
        """Matches still held back by the cooldown or the breaker, as one last notice."""
        if not self._held or self.disabled:
            return None
        notice = WatchNotice("watch_match", tuple(self._held), self._suppressed)
        self._held.clear()
        self._suppressed = 0
        return notice

    def feed(self, line: str) -> WatchNotice | None:
        """A notice to send for this line, or None."""
        if self.disabled or not any(p.search(line) for p in self.patterns):
            return None
        line = line[:MAX_LINE_CHARS]
        now = self.clock()
        if self.notices >= self.limits.max_notices:
            self.disabled = True
            held = (*self._held, line)[-self.limits.max_lines:]
            return WatchNotice("watch_disabled", held, self._suppressed)
        cooling = self._last_notice is not None and (
            now - self._last_notice < self.limits.cooldown_seconds)
        if cooling or not self.breaker.allow():
            self._suppressed += 1
            self._held.append(line)
            while len(self._held) > self.limits.max_lines - 1:
                self._held.popleft()
            return None
        lines = (*self._held, line)
        notice = WatchNotice("watch_match", lines, self._suppressed)
        self._held.clear()
        self._suppressed = 0
        self._last_notice = now
        self.notices += 1
        return notice


def compile_patterns(patterns: list[str]) -> list[re.Pattern[str]]:
    """Compile watch patterns; raise ValueError naming the bad one."""
    compiled = []
    for pattern in patterns:
        try:
            compiled.append(re.compile(pattern))
        except re.error as exc:
            raise ValueError(f"bad watch pattern {pattern!r}: {exc}") from None
    return compiled
