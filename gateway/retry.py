"""How patiently a failing call is tried again: one policy type for every retry loop.

Each loop keeps its own judgement of an error (a flood wait, a parse error,
a route that is gone); what it shares is the arithmetic — how many tries, how
long to wait after each failure — so the numbers live in one place per caller
and the rule is tested once (tests/test_retry.py).

    for attempt in SEND.tries():
        try:
            return await send()
        except TransientError:
            if SEND.is_last(attempt):
                raise
            await SEND.pause(attempt)
"""

from __future__ import annotations

import asyncio
import itertools
import random
from collections.abc import Iterator
from dataclasses import dataclass, replace


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    #: the wait after the first, second, … failure; the last one repeats
    delays: tuple[float, ...]
    #: tries in all, the first included; None: until it works (a connection)
    attempts: int | None = None
    #: each wait is scaled by a random factor in [1 - jitter, 1 + jitter]
    jitter: float = 0.0

    @classmethod
    def exponential(cls, first: float, attempts: int, *, factor: float = 2.0,
                    jitter: float = 0.0) -> RetryPolicy:
        """``first``, ``first * factor``, … for ``attempts`` tries."""
        return cls(tuple(first * factor ** n for n in range(max(1, attempts - 1))),
                   attempts=attempts, jitter=jitter)

    def tries(self) -> Iterator[int]:
        """0, 1, 2, … one per try."""
        return iter(range(self.attempts)) if self.attempts is not None else itertools.count()

    def is_last(self, attempt: int) -> bool:
        """Whether try ``attempt`` (0-based) is the last one."""
        return self.attempts is not None and attempt >= self.attempts - 1

    def delay(self, attempt: int) -> float:
        """The wait after try ``attempt`` (0-based) failed."""
        base = self.delays[min(attempt, len(self.delays) - 1)]
        if not self.jitter:
            return base
        return base * random.uniform(1 - self.jitter, 1 + self.jitter)

    async def pause(self, attempt: int) -> None:
        await asyncio.sleep(self.delay(attempt))

    def times(self, factor: int) -> RetryPolicy:
        """The same waits, ``factor`` times the tries (for a send that must go through)."""
        return self if self.attempts is None else replace(self, attempts=self.attempts * factor)
