"""Watch patterns: which output lines become notices, and how often.

Patterns are RE2 expressions (``google-re2``): matching takes time linear in
the line and the pattern's size, never exponential the way a backtracking
engine can be on ``(a+)+$``; patterns are bounded in size, and the job
manager matches in a worker thread (RE2 releases the GIL), so no pattern can
stall the event loop. Per job a cooldown between notices (what it
holds back is counted into the next notice) and a cap, past which the watch
turns itself off with one ``watch_disabled`` notice. A breaker shared by all
jobs counts every watch notice, end-of-job flushes included; matching lines
it keeps from the chat are counted as dropped, for the job's completion to say.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Literal, Protocol

MAX_LINE_CHARS = 500
MAX_PROGRAM_SIZE = 2000  # RE2 instructions; ``ERROR|FATAL`` is about 20


@lru_cache(maxsize=1)
def _re2() -> tuple[Any, Any]:
    """RE2 and its options, loaded with the first pattern: a daemon nobody asks to
    watch for one never holds it (about 2 MB resident; bench/idle_rss.py)."""
    import re2

    options = re2.Options()
    options.log_errors = False  # RE2 would write its own lines to stderr, past our logs
    return re2, options


class Pattern(Protocol):
    def search(self, text: str) -> object: ...


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
    """The watch state of one job; feed it every output line, then ``finish`` it."""

    patterns: list[Pattern]
    limits: WatchLimits
    breaker: GlobalBreaker
    notices: int = 0
    disabled: bool = False
    clock: Callable[[], float] = time.monotonic
    #: matching lines that never reached the chat because the breaker was open
    dropped: int = 0
    _suppressed: int = 0
    _last_notice: float | None = None
    _held: deque[str] = field(default_factory=deque)

    def matches(self, line: str) -> bool:
        """Whether ``line`` matches (pure: safe to call from a worker thread)."""
        return any(p.search(line) for p in self.patterns)

    def feed(self, line: str) -> WatchNotice | None:
        """A notice to send for this line, or None."""
        return self.matched(line) if self.matches(line) else None

    def matched(self, line: str) -> WatchNotice | None:
        """A notice to send for a line known to match, or None."""
        if self.disabled:
            return None
        line = line[:MAX_LINE_CHARS]
        if self.notices >= self.limits.max_notices:
            self.disabled = True
            lines = (*self._held, line)[-self.limits.max_lines:]
            if not self.breaker.allow():
                self.dropped += self._suppressed + 1
                self._clear()
                return None
            notice = WatchNotice("watch_disabled", lines, self._suppressed)
            self._clear()
            return notice
        now = self.clock()
        cooling = self._last_notice is not None and (
            now - self._last_notice < self.limits.cooldown_seconds)
        if cooling or not self.breaker.allow():
            self._hold(line)
            return None
        notice = WatchNotice("watch_match", (*self._held, line), self._suppressed)
        self._clear()
        self._last_notice = now
        self.notices += 1
        return notice

    def finish(self) -> WatchNotice | None:
        """At the job's end: the lines still held back, as one last notice — if the
        breaker lets one more through; otherwise they count as dropped."""
        if not self._held or self.disabled:
            return None
        if not self.breaker.allow():
            self.dropped += self._suppressed
            self._clear()
            return None
        notice = WatchNotice("watch_match", tuple(self._held), self._suppressed)
        self._clear()
        self.notices += 1
        return notice

    def _hold(self, line: str) -> None:
        self._suppressed += 1
        self._held.append(line)
        while len(self._held) > self.limits.max_lines - 1:
            self._held.popleft()

    def _clear(self) -> None:
        self._held.clear()
        self._suppressed = 0


def compile_patterns(patterns: list[str]) -> list[Pattern]:
    """Compile watch patterns; raise ValueError naming the bad one."""
    compiled: list[Pattern] = []
    for pattern in patterns:
        re2, options = _re2()
        try:
            program = re2.compile(pattern, options=options)
        except re2.error as exc:
            reason = exc.args[0].decode() if exc.args and isinstance(exc.args[0], bytes) \
                else str(exc)
            raise ValueError(f"bad watch pattern {pattern!r}: {reason} (watch patterns are "
                             f"RE2 expressions: no backreferences or lookaround)") from None
        if program.programsize > MAX_PROGRAM_SIZE:
            # linear in the line, but also in the pattern's size: keep each line's match cheap
            raise ValueError(f"bad watch pattern {pattern!r}: it is too large "
                             f"({program.programsize} RE2 instructions, at most "
                             f"{MAX_PROGRAM_SIZE}); use a simpler pattern")
        compiled.append(program)
    return compiled
