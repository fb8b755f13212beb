"""Flow control for bot platforms: order per chat, rate limits, and waiting out
the platform's "retry after". One place for these rules; every adapter uses it.

A chat's messages go out one at a time, in the order they were handed over.
A chat told to wait (HTTP 429 with ``retry_after``) waits — and so does every
chat when the limit hit was global — while other chats carry on.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class RateLimits:
    per_second: float = 30.0  # all chats together
    group_per_minute: float = 20.0  # one group chat


@dataclass(slots=True)
class _Chat:
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    paused_until: float = 0.0
    recent: deque[float] = field(default_factory=deque)  # send times in the last minute
    users: int = 0


class FlowControl:
    def __init__(self, limits: RateLimits, clock=time.monotonic) -> None:
        self.limits = limits
        self._clock = clock
        self._chats: dict[str, _Chat] = {}
        self._global_recent: deque[float] = deque()
        self._global_paused_until = 0.0
        self._turns = 0

    @asynccontextmanager
    async def turn(self, chat: str, *, group: bool) -> AsyncIterator[None]:
        """Hold ``chat``'s sending slot (in arrival order) once the limits allow a send."""
        state = self._chats.get(chat)
        if state is None:
            state = self._chats[chat] = _Chat()
        state.users += 1
        try:
            async with state.lock:
                await self._wait_for_room(state, group)
                yield
        finally:
            state.users -= 1
            self._turns += 1
            if self._turns % 1000 == 0:
                self._forget_idle_chats()

    def _forget_idle_chats(self) -> None:
        """Chats with nothing queued and no send in the last minute cost nothing."""
        now = self._clock()
        for key, state in list(self._chats.items()):
            if state.users == 0 and (not state.recent or now - state.recent[-1] > 60) \
                    and state.paused_until < now:
                del self._chats[key]

    def pause(self, chat: str, seconds: float, *, everywhere: bool = False) -> None:
        """The platform asked us to wait before sending to ``chat`` (or anywhere) again."""
        until = self._clock() + seconds
        state = self._chats.get(chat)
        if state is not None:
            state.paused_until = max(state.paused_until, until)
        if everywhere:
            self._global_paused_until = max(self._global_paused_until, until)

    async def _wait_for_room(self, state: _Chat, group: bool) -> None:
        while True:
            now = self._clock()
            wait = max(state.paused_until, self._global_paused_until) - now
            wait = max(wait, _room(self._global_recent, now, 1.0, self.limits.per_second))
            if group:
                wait = max(wait, _room(state.recent, now, 60.0, self.limits.group_per_minute))
            if wait <= 0:
                self._global_recent.append(now)
                state.recent.append(now)
                return
            await asyncio.sleep(wait)


def _room(recent: deque[float], now: float, window: float, allowed: float) -> float:
    """Seconds until one more send fits ``allowed`` per ``window``."""
    while recent and now - recent[0] >= window:
        recent.popleft()
    if len(recent) < allowed:
        return 0.0
    return window - (now - recent[0])
