"""The client-server API as the Matrix adapter calls it through matrix-nio: one place
for how patiently a request is made.

nio's own waiting is off (``max_limit_exceeded=0``, ``max_timeouts=0``): a 429
``M_LIMIT_EXCEEDED`` comes back here with its ``retry_after_ms``, and every request to
that room waits that long before it is made again — in order, since the adapter holds
the room's sending slot meanwhile (``FlowControl.chat``) — unless the caller would
rather skip it (a preview edit). A send made again carries the same transaction id, so
the homeserver posts it once however often it is tried (a 429 is not remembered by
Synapse, so the retry is the first that lands). A 5xx and a broken connection are tried
again after a pause; any other error is the homeserver's verdict, at once.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import aiohttp
import structlog
from nio import ErrorResponse, Response  # type: ignore[import-untyped]

from gateway.errors import PlatformError
from gateway.retry import RetryPolicy

log = structlog.get_logger(__name__)

#: a request that fails for a passing reason (5xx, a dropped connection)
PATIENT = RetryPolicy((0.5, 1.0, 2.0, 4.0), attempts=5)
#: a 429 is waited out this many times in a row before the caller is told
RATE_LIMIT_WAITS = 8
#: the longest wait a request makes itself; a longer one goes to the caller
MAX_WAIT_SECONDS = 60.0
#: the homeserver says the room (or the event in it) is not the bot's to write to
ROUTE_GONE = frozenset({"M_FORBIDDEN", "M_NOT_FOUND", "M_UNKNOWN_ROOM"})
#: the token is not good: nothing about a room is wrong
NOT_ALLOWED = frozenset({"M_UNKNOWN_TOKEN", "M_MISSING_TOKEN", "M_USER_DEACTIVATED"})

_R = TypeVar("_R", bound=Response)


class MatrixRefused(PlatformError):
    """The homeserver answered ``what`` with an error: ``errcode`` is Matrix's
    (``M_FORBIDDEN``); ``retry_after`` is set when it asked for a longer wait than the
    request would make."""

    def __init__(self, what: str, errcode: str, message: str = "", *, status: int = 0,
                 retry_after: float | None = None) -> None:
        super().__init__(f"matrix {what}: {errcode} {message}".rstrip())
        self.what = what
        self.errcode = errcode
        self.status = status
        self.retry_after = retry_after

    @property
    def route_gone(self) -> bool:
        return self.errcode in ROUTE_GONE

    @property
    def permanent(self) -> bool:
        """Asking again cannot help (nor can waiting)."""
        return self.retry_after is None and 0 < self.status < 500 and self.status != 429


class MatrixApi:
    """Requests through the nio client, each made with this module's patience; a room's
    rate limit is remembered per room."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic,
                 on_rate_limit: Callable[[str, float], object] | None = None) -> None:
        """``on_rate_limit(room, seconds)``: told of each 429 on a room's request."""
        self._clock = clock
        self._on_rate_limit = on_rate_limit
        #: room (or None: the account) -> when its requests may be made again
        self._paused: dict[str | None, float] = {}

    async def call(self, what: str, request: Callable[[], Awaitable[Any]],
                   expected: type[_R], *, room: str | None = None,
                   patience: RetryPolicy = PATIENT,
                   wait_limit: float = MAX_WAIT_SECONDS) -> _R:
        """``request()`` until it answers ``expected``; MatrixRefused otherwise."""
        waits = 0
        for attempt in patience.tries():
            while (wait := self._paused.get(room, 0.0) - self._clock()) > 0:
                if wait > wait_limit or waits >= RATE_LIMIT_WAITS:
                    raise MatrixRefused(what, "M_LIMIT_EXCEEDED", status=429, retry_after=wait)
                waits += 1
                await asyncio.sleep(wait)
            try:
                answer = await request()
            except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                if patience.is_last(attempt):
                    raise MatrixRefused(what, "connection failed", str(exc), status=599
                                        ) from exc
                log.info("matrix_call_retry", what=what, error=str(exc) or type(exc).__name__)
                await patience.pause(attempt)
                continue
            if isinstance(answer, tuple):  # upload answers (response, decryption keys)
                answer = answer[0]
            if isinstance(answer, expected):
                return answer
            refused = _refusal(what, answer)
            if refused.status == 429 or refused.errcode == "M_LIMIT_EXCEEDED":
                self._pause(room, refused.retry_after or 1.0)
                continue  # waited out (or handed back) at the top, not counted
            if refused.permanent or patience.is_last(attempt):
                raise refused
            log.info("matrix_call_retry", what=what, errcode=refused.errcode,
                     status=refused.status)
            await patience.pause(attempt)
        raise MatrixRefused(what, "no answer", status=599)

    def paused_for(self, room: str | None) -> float:
        return max(0.0, self._paused.get(room, 0.0) - self._clock())

    def _pause(self, room: str | None, seconds: float) -> None:
        self._paused[room] = max(self._paused.get(room, 0.0), self._clock() + seconds)
        log.info("matrix_rate_limited", room_id=room, retry_after=seconds)
        if room is not None and self._on_rate_limit is not None:
            self._on_rate_limit(room, seconds)


def _refusal(what: str, answer: object) -> MatrixRefused:
    transport = getattr(answer, "transport_response", None)
    status = int(getattr(transport, "status", 0) or 0)
    if isinstance(answer, ErrorResponse):
        retry = answer.retry_after_ms
        errcode = str(answer.status_code or f"HTTP {status}")
        retry_after = retry / 1000 if retry is not None else None
        if errcode == "M_LIMIT_EXCEEDED" and status == 0:
            status = 429
        return MatrixRefused(what, errcode, answer.message, status=status,
                             retry_after=retry_after if status == 429 else None)
    return MatrixRefused(what, f"unexpected answer {type(answer).__name__}", status=status)
