"""The Web API as the Slack adapter calls it: one place for how patiently a call is made.

Slack rates each method on its own (chat.postMessage per channel besides): a 429 says
how long to wait in ``Retry-After``, and every call of that method (to that channel)
waits that long before it is made again — in order, since the adapter holds each
conversation's sending slot meanwhile (``FlowControl.chat``). A 5xx, Slack's own
``internal_error`` family, and a broken connection are tried again after a pause; any
other error is Slack's verdict and comes back as :class:`SlackRefused` at once.

slack-sdk's own retry handlers are off (``retry_handlers=[]``): they would sleep out a
429 where no one can decide that a preview edit is better skipped than waited for.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import aiohttp
import structlog
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from gateway.errors import PlatformError
from gateway.retry import RetryPolicy

log = structlog.get_logger(__name__)

#: a call that fails for a passing reason (5xx, a dropped connection)
PATIENT = RetryPolicy((0.5, 1.0, 2.0, 4.0), attempts=5)
#: a 429 is waited out this many times in a row before the caller is told
RATE_LIMIT_WAITS = 6
#: the longest ``Retry-After`` a call waits out itself; a longer one goes to the caller
MAX_WAIT_SECONDS = 60.0
#: Slack's errors that say "try again" rather than "no"
_PASSING = frozenset({"internal_error", "fatal_error", "service_unavailable",
                      "request_timeout", "ratelimited"})
#: Slack's errors that say the conversation (or the message in it) is gone for the bot
ROUTE_GONE = frozenset({"channel_not_found", "is_archived", "not_in_channel",
                        "thread_not_found", "message_not_found", "cant_update_message",
                        "cant_delete_message", "restricted_action",
                        "restricted_action_read_only_channel",
                        "restricted_action_thread_only_channel",
                        "restricted_action_non_threadable_channel", "team_access_not_granted",
                        "user_is_restricted"})
#: the app may not do this at all: nothing about the conversation is wrong
NOT_ALLOWED = frozenset({"missing_scope", "not_allowed_token_type", "no_permission",
                         "invalid_auth", "not_authed", "account_inactive", "token_revoked",
                         "token_expired", "ekm_access_denied", "access_denied",
                         "feature_not_enabled", "not_enabled", "unknown_method"})


class SlackRefused(PlatformError):
    """Slack answered ``method`` with an error: ``error`` is its code (``not_in_channel``);
    ``retry_after`` is set when Slack asked for a wait longer than the call would make."""

    def __init__(self, method: str, error: str, *, status: int = 200,
                 retry_after: float | None = None, needed: str | None = None) -> None:
        detail = f" (needs {needed})" if needed else ""
        super().__init__(f"slack {method}: {error}{detail}")
        self.method = method
        self.error = error
        self.status = status
        self.retry_after = retry_after
        self.needed = needed

    @property
    def route_gone(self) -> bool:
        return self.error in ROUTE_GONE

    @property
    def permanent(self) -> bool:
        """Asking again cannot help (nor can waiting)."""
        return self.retry_after is None and self.error not in _PASSING and self.status < 500


class WebApi:
    """The bot's Web API client, each call made with this module's patience."""

    def __init__(self, client: AsyncWebClient, *,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
                 on_rate_limit: Callable[[str, float], object] | None = None) -> None:
        """``on_rate_limit(channel, seconds)``: told of each 429 on a channel's post."""
        self.client = client
        self._clock = clock
        self._sleep = sleep
        self._on_rate_limit = on_rate_limit
        #: (method, channel or None) -> when its calls may be made again
        self._paused: dict[tuple[str, str | None], float] = {}

    async def call(self, method: str, *, patience: RetryPolicy = PATIENT,
                   wait_limit: float = MAX_WAIT_SECONDS, **params: Any) -> dict[str, Any]:
        """``method`` (``"chat.postMessage"``) with ``params``; its answer's data.

        A rate limit is waited out when it is at most ``wait_limit`` seconds (0: never,
        for a preview edit that is better skipped); otherwise SlackRefused with
        ``retry_after``. A passing failure is tried again by ``patience``."""
        key = _rate_key(method, params)
        request = getattr(self.client, method.replace(".", "_"))
        waits = 0
        for attempt in patience.tries():
            while (wait := self._paused.get(key, 0.0) - self._clock()) > 0:
                if wait > wait_limit or waits >= RATE_LIMIT_WAITS:
                    raise SlackRefused(method, "ratelimited", status=429, retry_after=wait)
                waits += 1
                await self._sleep(wait)
            try:
                response = await request(**params)
                return dict(response.data) if isinstance(response.data, dict) else {}
            except SlackApiError as exc:
                refused = _refusal(method, exc)
                if refused.retry_after is not None:
                    self._pause(key, refused.retry_after)
                    continue  # waited out (or handed back) at the top, not counted
                if refused.permanent or patience.is_last(attempt):
                    raise refused from None
                log.info("slack_call_retry", method=method, error=refused.error,
                         status=refused.status)
            except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                if patience.is_last(attempt):
                    raise SlackRefused(method, f"connection failed: {exc}", status=599
                                       ) from exc
                log.info("slack_call_retry", method=method, error=str(exc))
            await patience.pause(attempt)
        raise SlackRefused(method, "no answer", status=599)

    async def pages(self, method: str, key: str, *, limit_items: int | None = None,
                    **params: Any) -> list[dict[str, Any]]:
        """Every item of a paged method's ``key`` (``messages``), following
        ``response_metadata.next_cursor`` (Slack may return fewer than ``limit``), up to
        ``limit_items``."""
        found: list[dict[str, Any]] = []
        cursor: str | None = None
        while limit_items is None or len(found) < limit_items:
            paging: dict[str, Any] = {"cursor": cursor} if cursor else {}
            data = await self.call(method, **params, **paging)
            found.extend(item for item in data.get(key) or [] if isinstance(item, dict))
            cursor = (data.get("response_metadata") or {}).get("next_cursor") or None
            if not cursor:
                break
        return found

    def paused_for(self, method: str, channel: str | None = None) -> float:
        """Seconds until ``method`` (to ``channel``) may be called again."""
        return max(0.0, self._paused.get(_rate_key(method, {"channel": channel}), 0.0)
                   - self._clock())

    def _pause(self, key: tuple[str, str | None], seconds: float) -> None:
        self._paused[key] = max(self._paused.get(key, 0.0), self._clock() + seconds)
        method, channel = key
        log.info("slack_rate_limited", method=method, channel=channel, retry_after=seconds)
        if channel is not None and self._on_rate_limit is not None:
            self._on_rate_limit(channel, seconds)


def _rate_key(method: str, params: Mapping[str, Any]) -> tuple[str, str | None]:
    """chat.postMessage is rated per channel; every other method per workspace."""
    channel = params.get("channel")
    return method, channel if method == "chat.postMessage" and isinstance(channel, str) else None


def _refusal(method: str, exc: SlackApiError) -> SlackRefused:
    response = exc.response
    status = int(getattr(response, "status_code", 0) or 0)
    data = getattr(response, "data", None)
    data = data if isinstance(data, dict) else {}
    error = str(data.get("error") or (f"http {status}" if status else "unknown error"))
    if status == 429 or error == "ratelimited":
        headers = getattr(response, "headers", None) or {}
        return SlackRefused(method, "ratelimited", status=429,
                            retry_after=_retry_after(headers))
    return SlackRefused(method, error, status=status, needed=data.get("needed"))


def _retry_after(headers: Mapping[str, Any]) -> float:
    for name, value in headers.items():
        if name.lower() == "retry-after":
            raw = value[0] if isinstance(value, list) and value else value
            try:
                return max(0.0, float(raw))
            except (TypeError, ValueError):
                break
    return 1.0  # Slack always sends one; an answer without it waits a second

