"""Flow control for bot platforms: order per chat, rate limits, and waiting out
the platform's "retry after". One place for these rules; every adapter uses it.

A chat's messages go out one at a time, in the order they were handed over
(:meth:`FlowControl.chat`); every single request — each part of a long
message, each retry — is admitted against the limits (:meth:`FlowControl.admit`).
A chat told to wait (HTTP 429 with ``retry_after``) waits; when several chats
are told to wait at once the limit hit was the global one, and every chat waits.
How much a chat may still take now (:meth:`FlowControl.room`) is what the router
asks before it sends a conversation's waiting notices one by one: when they do not
fit, they go together in one message (gateway/delivery/merged_notices.py).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

#: two chats told to wait within this many seconds means a global limit
_GLOBAL_HINT_WINDOW = 1.0


@dataclass(frozen=True, slots=True)
class RateLimits:
    per_second: float = 30.0  # all chats together, in any one-second window
    group_per_minute: float = 20.0  # one group chat, in any one-minute window


@dataclass(slots=True)
class _Chat:
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    paused_until: float = 0.0
    recent: deque[float] = field(default_factory=deque)  # send times in the last minute
    users: int = 0
    #: what the platform said the chat takes (its rate limit headers): so many more
    #: requests until then
    reported_room: int = 0
    reported_until: float = 0.0


class FlowControl:
    def __init__(self, limits: RateLimits, *, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        self.limits = limits
        self._clock = clock
        self._sleep = sleep
        self._chats: dict[str, _Chat] = {}
        self._global_recent: deque[float] = deque()
        self._global_paused_until = 0.0
        self._last_pause: tuple[str, float] | None = None
        self._uses = 0

    @asynccontextmanager
    async def chat(self, chat: str) -> AsyncIterator[None]:
        """Hold ``chat``'s sending slot, in arrival order, for one whole message."""
        state = self._state(chat)
        state.users += 1
        try:
            async with state.lock:
                yield
        finally:
            state.users -= 1
            self._uses += 1
            if self._uses % 1000 == 0:
                self._forget_idle_chats()

    async def admit(self, chat: str, *, group: bool) -> None:
        """Wait until one more request to ``chat`` fits every limit, and count it."""
        while (wait := self._wait(chat, group)) > 0:
            await self._sleep(wait)

    def try_admit(self, chat: str, *, group: bool) -> bool:
        """Count one more request to ``chat`` if it fits every limit now; a request that
        can be skipped (a preview edit) is, rather than delay the ones that count."""
        # a group's last few slots of the minute are kept for messages that count
        allowed = self.limits.group_per_minute
        if group and _room(self._state(chat).recent, self._clock(), 60.0,
                           allowed - min(3.0, allowed // 2)) > 0:
            return False
        return self._wait(chat, group) <= 0

    def _wait(self, chat: str, group: bool) -> float:
        """Seconds until the next request to ``chat`` fits; 0 (and counted) when it does."""
        state = self._state(chat)
        now = self._clock()
        wait = max(state.paused_until, self._global_paused_until) - now
        wait = max(wait, _room(self._global_recent, now, 1.0, self.limits.per_second))
        if group:
            wait = max(wait, _room(state.recent, now, 60.0, self.limits.group_per_minute))
        if wait <= 0:
            self._global_recent.append(now)
            state.recent.append(now)
        return wait

    def room(self, chat: str, *, group: bool) -> int:
        """How many more requests to ``chat`` fit every limit now, none of them counted:
        0 while the chat (or every chat) is told to wait."""
        state = self._state(chat)
        now = self._clock()
        if max(state.paused_until, self._global_paused_until) > now:
            return 0
        room = _spare(self._global_recent, now, 1.0, self.limits.per_second)
        if group:
            room = min(room, _spare(state.recent, now, 60.0, self.limits.group_per_minute))
        if state.reported_until > now:
            room = min(room, state.reported_room)
        return room

    def report(self, chat: str, remaining: int, reset_in: float) -> None:
        """The platform said ``chat`` takes ``remaining`` more requests in the next
        ``reset_in`` seconds (Discord's ``X-RateLimit-*`` headers; 0 with a 429). Its
        library waits that out itself: this only tells :meth:`room`."""
        state = self._state(chat)
        state.reported_room = max(0, remaining)
        state.reported_until = self._clock() + max(0.0, reset_in)

    def pause(self, chat: str, seconds: float) -> bool:
        """The platform asked us to wait before sending to ``chat`` again.

        Returns True when the pause was applied to every chat (a second chat
        was told to wait within a second of the first: the global limit).
        """
        now = self._clock()
        until = now + seconds
        state = self._state(chat)
        state.paused_until = max(state.paused_until, until)
        everywhere = (self._last_pause is not None and self._last_pause[0] != chat
                      and now - self._last_pause[1] <= _GLOBAL_HINT_WINDOW)
        if everywhere:
            self._global_paused_until = max(self._global_paused_until, until)
        self._last_pause = (chat, now)
        return everywhere

    def _state(self, chat: str) -> _Chat:
        state = self._chats.get(chat)
        if state is None:
            state = self._chats[chat] = _Chat()
        return state

    def _forget_idle_chats(self) -> None:
        """Chats with nothing queued and no send in the last minute cost nothing."""
        now = self._clock()
        for key, state in list(self._chats.items()):
            idle = not state.recent or now - state.recent[-1] > 60
            if (state.users == 0 and idle and state.paused_until < now
                    and state.reported_until < now):
                del self._chats[key]


def _spare(recent: deque[float], now: float, window: float, allowed: float) -> int:
    """How many more sends fit ``allowed`` per ``window`` now."""
    while recent and now - recent[0] >= window:
        recent.popleft()
    return max(0, int(allowed) - len(recent))


def _room(recent: deque[float], now: float, window: float, allowed: float) -> float:
    """Seconds until one more send fits ``allowed`` per ``window``."""
    while recent and now - recent[0] >= window:
        recent.popleft()
    if len(recent) < allowed:
        return 0.0
    return window - (now - recent[0])
