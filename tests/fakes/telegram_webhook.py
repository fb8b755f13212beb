"""The webhook in the fake Telegram server: setWebhook, deleteWebhook and getWebhookInfo
as the Bot API answers them, and updates posted to the webhook the way Telegram posts
them — one JSON update a request, with the ``X-Telegram-Bot-Api-Secret-Token`` header,
tried again with a growing delay until the bot answers 2xx.

Kept apart from the server because it is the other way updates leave Telegram (the
server holds the queue, ``_pending``, that getUpdates hands out too). Mixed into
:class:`~tests.fakes.telegram_server.FakeTelegram`::

    fake.reverse_proxy("https://bot.example.org", f"http://127.0.0.1:{port}")
    await bot.set_webhook("https://bot.example.org/tg", secret_token="s3cret")
    fake.user_message(chat_id=7, text="hi")   # POSTed to http://127.0.0.1:{port}/tg
    fake.webhook_attempts                      # every request: update id, answer or error
    fake.webhook_url = "https://example.org/hook"  # another tool's webhook: polling gets 409

As on Telegram: the URL must be HTTPS on port 443, 80, 88 or 8443 ("bad webhook: …");
the secret token holds 1-256 of ``A-Z a-z 0-9 _ -``; ``max_connections`` is kept within
1-100 (40 when not given); ``allowed_updates`` replaces the one getUpdates was given, and
is kept when not given; ``drop_pending_updates`` forgets what waits. setWebhook answers
"Webhook was set" (or "Webhook is already set" when nothing changed), deleteWebhook
"Webhook was deleted" (or "Webhook is already deleted"), and setWebhook with an empty URL
deletes. getWebhookInfo counts the waiting updates with or without a webhook, and names
the last failed delivery (``last_error_date``, ``last_error_message`` in Telegram's words:
"Wrong response from the webhook: 401 Unauthorized", "Connection refused", "Webhook
connection closed"). While a webhook is set, getUpdates is refused with 409.

The fake's own: the world it posts into is what a test declares with
:meth:`reverse_proxy` — the TLS-terminating proxy in front of the bot, forwarding a
host's requests to local addresses in turn, path and query kept; any other host "does
not resolve". Updates go out one at a time, in order, each retried until it is taken
before the next (Telegram keeps each chat's order, and posts several chats' at once up to
``max_connections``). The delays are a test's (``webhook_delays``), where Telegram's start
at a second and grow to a minute; a ``Retry-After`` in the answer is honoured as there.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import aiohttp

from tests.fakes.telegram_api import ApiError, as_bool, as_int, as_json

__all__ = ["SECRET_HEADER", "WEBHOOK_ACTIVE", "BotWebhook", "Described", "WebhookAttempt"]

JSON = dict[str, Any]

SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"
WEBHOOK_ACTIVE = ("Conflict: can't use getUpdates method while webhook is active; "
                  "use deleteWebhook to delete the webhook first")
_PORTS = frozenset({80, 88, 443, 8443})
_SECRET = re.compile(r"[A-Za-z0-9_-]{1,256}")
DEFAULT_MAX_CONNECTIONS = 40
#: how long a request to the webhook may take before it counts as failed
_REQUEST_TIMEOUT = 30.0


@dataclass(frozen=True)
class Described:
    """A method's result with the ``description`` the Bot API sends beside it."""

    result: Any
    description: str


@dataclass(frozen=True)
class WebhookAttempt:
    """One request to the webhook: which update, where, and its answer (the HTTP status)
    or the error Telegram would note."""

    update_id: int
    url: str
    status: int | None
    error: str | None

    @property
    def taken(self) -> bool:
        return self.status is not None and 200 <= self.status <= 299


class BotWebhook:
    """The webhook half of :class:`~tests.fakes.telegram_server.FakeTelegram`: reads and
    empties the queue of updates (``_pending``) the server fills."""

    _pending: list[tuple[int, JSON]]
    allowed_updates: list[str] | None
    _wanted: Callable[[JSON], bool]
    _wake: Callable[[str], None]
    _updates_changed: asyncio.Event

    def _init_webhook(self) -> None:
        self._webhook_url = ""
        #: the secret token the webhook was set with ("" for none)
        self.webhook_secret = ""
        self.webhook_max_connections = DEFAULT_MAX_CONNECTIONS
        self.last_webhook_error: tuple[int, str] | None = None  # (unix time, message)
        #: every request made to the webhook, in order
        self.webhook_attempts: list[WebhookAttempt] = []
        #: the wait after a failed delivery: the first, doubled after each failure up to
        #: the second
        self.webhook_delays: tuple[float, float] = (0.05, 0.5)
        self._proxies: dict[str, Iterator[str]] = {}  # public origin -> local origins
        self._delivery: asyncio.Task[None] | None = None
        self._attempted = asyncio.Event()

    # ------------------------------------------------------------------ tests drive

    @property
    def webhook_url(self) -> str:
        """The webhook set ("" = none, so polling works); a test may set one as another
        tool would have."""
        return self._webhook_url

    @webhook_url.setter
    def webhook_url(self, url: str) -> None:
        self._webhook_url = url
        self._wake("updates")

    def reverse_proxy(self, origin: str, *upstreams: str) -> None:
        """Requests to ``origin`` (``https://bot.example.org``) go to the ``upstreams``
        (``http://127.0.0.1:8443``), one after another: the proxy that terminates TLS in
        front of one instance, or balances several."""
        self._proxies[_origin(origin)] = itertools.cycle([u.rstrip("/") for u in upstreams])

    @property
    def webhook_taken(self) -> list[int]:
        """The update ids the webhook answered 2xx, in order."""
        return [a.update_id for a in self.webhook_attempts if a.taken]

    async def wait_for_attempts(self, count: int, timeout: float = 30) -> list[WebhookAttempt]:
        """Until at least ``count`` requests were made to the webhook; all of them."""
        async with asyncio.timeout(timeout):
            while len(self.webhook_attempts) < count:
                self._attempted.clear()
                await self._attempted.wait()
        return list(self.webhook_attempts)

    # ------------------------------------------------------------------ lifecycle

    def _start_webhook(self) -> None:
        self._delivery = asyncio.create_task(self._deliver(), name="fake-telegram-webhook")

    async def _stop_webhook(self) -> None:
        if self._delivery is not None:
            self._delivery.cancel()
            await asyncio.gather(self._delivery, return_exceptions=True)
            self._delivery = None

    # ------------------------------------------------------------------ methods

    async def _set_webhook(self, params: dict[str, Any]) -> Described:
        url = str(params.get("url") or "")
        drop = as_bool(params.get("drop_pending_updates"))
        if not url:
            return await self._delete_webhook(params)
        parts = urlsplit(url)
        if parts.scheme != "https":
            raise ApiError(400, "Bad Request: bad webhook: An HTTPS URL must be provided "
                                "for webhook")
        if (parts.port or 443) not in _PORTS:
            raise ApiError(400, "Bad Request: bad webhook: Webhook can be set up only on "
                                "ports 80, 88, 443 or 8443")
        secret = str(params.get("secret_token") or "")
        if secret and not _SECRET.fullmatch(secret):
            raise ApiError(400, "Bad Request: secret token contains unallowed characters")
        given = as_int(params.get("max_connections"))
        connections = DEFAULT_MAX_CONNECTIONS if given is None else min(max(given, 1), 100)
        allowed = as_json(params.get("allowed_updates"))
        before = (self._webhook_url, self.webhook_secret, self.webhook_max_connections,
                  self.allowed_updates)
        self.webhook_secret = secret
        self.webhook_max_connections = connections
        if isinstance(allowed, list):
            self.allowed_updates = [str(a) for a in allowed]
        if drop:
            self._pending.clear()
        changed = before != (url, secret, connections, self.allowed_updates)
        if url != self._webhook_url:
            self.last_webhook_error = None
        self.webhook_url = url
        return Described(True, "Webhook was set" if changed else "Webhook is already set")

    async def _delete_webhook(self, params: dict[str, Any]) -> Described:
        was_set = bool(self._webhook_url)
        self.webhook_url = ""
        self.webhook_secret = ""
        self.last_webhook_error = None
        if as_bool(params.get("drop_pending_updates")):
            self._pending.clear()
        return Described(True, "Webhook was deleted" if was_set else
                         "Webhook is already deleted")

    async def _get_webhook_info(self, params: dict[str, Any]) -> JSON:
        info: JSON = {"url": self._webhook_url, "has_custom_certificate": False,
                      "pending_update_count": len(self._pending)}
        if self._webhook_url:
            info["max_connections"] = self.webhook_max_connections
            if self.allowed_updates:
                info["allowed_updates"] = list(self.allowed_updates)
            if self.last_webhook_error is not None:
                info["last_error_date"], info["last_error_message"] = self.last_webhook_error
        return info

    def _refuse_polling_under_webhook(self) -> None:
        if self._webhook_url:
            raise ApiError(409, WEBHOOK_ACTIVE)

    # ------------------------------------------------------------------ delivery

    async def _deliver(self) -> None:
        """Post the waiting updates to the webhook while one is set: the first until it
        is taken, then the next."""
        async with aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=_REQUEST_TIMEOUT)) as http:
            delay = 0.0
            while True:
                if delay:
                    await self._sleep_unless_changed(delay)
                changed = self._updates_changed  # replaced by the next change
                if self._webhook_url:  # as getUpdates: what the bot did not ask for goes
                    self._pending = [(i, u) for i, u in self._pending if self._wanted(u)]
                if not self._webhook_url or not self._pending:
                    delay = 0.0
                    await changed.wait()
                    continue
                ack_id, update = self._pending[0]
                attempt = await self._post(http, self._webhook_url, update)
                self.webhook_attempts.append(attempt)
                self._attempted.set()
                if attempt.taken:
                    self._pending = [(i, u) for i, u in self._pending if i != ack_id]
                    delay = 0.0
                    continue
                assert attempt.error is not None
                self.last_webhook_error = (int(time.time()), attempt.error)
                first, most = self.webhook_delays
                delay = min(most, delay * 2 if delay else first)

    async def _post(self, http: aiohttp.ClientSession, url: str, update: JSON
                    ) -> WebhookAttempt:
        update_id = int(update.get("update_id", 0))
        target = self._through_proxy(url)
        if target is None:
            return WebhookAttempt(update_id, url, None,
                                  "Failed to resolve host: Name or service not known")
        headers = {"Content-Type": "application/json"}
        if self.webhook_secret:
            headers[SECRET_HEADER] = self.webhook_secret
        try:
            async with http.post(target, data=json.dumps(update), headers=headers) as resp:
                await resp.read()
                error = None if 200 <= resp.status <= 299 else (
                    f"Wrong response from the webhook: {resp.status} {resp.reason}")
                retry_after = as_int(resp.headers.get("Retry-After"))
                if retry_after:
                    await asyncio.sleep(min(retry_after, 5))
                return WebhookAttempt(update_id, url, resp.status, error)
        except aiohttp.ClientConnectorError:
            return WebhookAttempt(update_id, url, None, "Connection refused")
        except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError,
                aiohttp.ClientPayloadError):
            return WebhookAttempt(update_id, url, None, "Webhook connection closed")
        except TimeoutError:
            return WebhookAttempt(update_id, url, None, "Read timeout expired")

    def _through_proxy(self, url: str) -> str | None:
        parts = urlsplit(url)
        upstreams = self._proxies.get(_origin(url))
        if upstreams is None:
            return None
        return next(upstreams) + (parts.path or "/") + (f"?{parts.query}" if parts.query
                                                        else "")

    async def _sleep_unless_changed(self, delay: float) -> None:
        """The wait before the next try; a new webhook (set or deleted) ends it early."""
        url = self._webhook_url
        deadline = asyncio.get_running_loop().time() + delay
        while self._webhook_url == url:
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0:
                return
            try:
                async with asyncio.timeout(remaining):
                    await self._updates_changed.wait()
            except TimeoutError:
                return


def _origin(url: str) -> str:
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return f"{parts.scheme}://{(parts.hostname or '').lower()}:{port}"
