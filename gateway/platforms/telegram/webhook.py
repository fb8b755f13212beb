"""Telegram's updates posted to Homing (``mode: webhook``): the server that takes them,
and the mark by which Homing knows a webhook it set itself.

Each request carries one update and the secret token the webhook was set with
(``X-Telegram-Bot-Api-Secret-Token``), compared in constant time; without it, or with
another, the request is answered 401 and nothing is taken. An update is answered 200
only once it is journaled; one that could not be is answered 503, and Telegram posts
it again (with a growing delay) — a crash before the answer is the same to Telegram,
and the journal knows an update it already has by its ``update_id``. A body that is no
update at all is logged and answered 200: Telegram would post it again for a day,
holding up the chat's updates behind it, and a second time would be no better.

Every instance listens (the journal is shared), so a load balancer may send a request
to any of them; none holds a lease for it.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Awaitable, Callable

import structlog
from aiohttp import web
from telegram import Bot, Update

from gateway.platforms.telegram.settings import TelegramWebhook

__all__ = ["SECRET_HEADER", "WebhookListener", "webhook_mark"]

log = structlog.get_logger(__name__)

SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"
#: what an update may weigh (Telegram's are a few kilobytes; files come by reference)
_MAX_BODY = 1024 * 1024


class WebhookListener:
    """One path on one address, for Telegram's requests; ``start`` and ``stop``.

    ``take`` hands an update in and says whether it is journaled; ``bot`` is the bot
    updates are parsed for (their ``get_bot()``)."""

    def __init__(self, settings: TelegramWebhook, take: Callable[[Update], Awaitable[bool]],
                 bot: Callable[[], Bot], *, stop_wait: float) -> None:
        secret = settings.secret_token.get_secret_value() if settings.secret_token else ""
        if not secret:
            raise ValueError("platforms.telegram.webhook.secret_token is required in "
                             "webhook mode")
        self.settings = settings
        self.path = settings.listen_path
        #: the port listened on (the one given, or the one picked for 0)
        self.port: int | None = None
        self._secret = secret.encode()
        self._take = take
        self._bot = bot
        self._stop_wait = stop_wait
        self._runner: web.AppRunner | None = None
        self._stopping = False

    async def start(self) -> None:
        """Listen; an address that cannot be bound raises OSError."""
        app = web.Application(client_max_size=_MAX_BODY)
        app.router.add_post(self.path, self._on_request)
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=self._stop_wait)
        await runner.setup()
        listen = self.settings.listen
        site = web.TCPSite(runner, listen.host, listen.port)
        try:
            await site.start()
        except OSError:
            await runner.cleanup()
            raise
        self._runner, self._stopping = runner, False
        self.port = runner.addresses[0][1] if runner.addresses else listen.port
        log.info("telegram_webhook_listening", host=listen.host, port=self.port)

    async def stop(self) -> None:
        """Take nothing more: a request under way is let finish (for a while), a new one
        is answered 503, then the port closes. Telegram keeps what is not taken and
        posts it again: to the next life, or to another instance."""
        self._stopping = True
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    @property
    def listening(self) -> bool:
        return self._runner is not None

    async def _on_request(self, request: web.Request) -> web.Response:
        given = request.headers.get(SECRET_HEADER)
        if given is None or not hmac.compare_digest(
                given.encode("utf-8", "surrogateescape"), self._secret):
            # the value is never logged: a wrong one may be a typo of the right one
            log.warning("telegram_webhook_refused", remote=request.remote,
                        reason="no secret token" if given is None else "wrong secret token",
                        hint="only Telegram, with platforms.telegram.webhook.secret_token, "
                             "may post here")
            return web.Response(status=401, text="Unauthorized")
        if self._stopping:
            return web.Response(status=503, text="stopping; post it again")
        update = self._parse(await request.read())
        if update is None:
            return web.Response(status=200)
        if await self._take(update):
            return web.Response(status=200)
        return web.Response(status=503, text="not journaled; post it again")

    def _parse(self, body: bytes) -> Update | None:
        """The update in a request, or None (logged) for a body that is none."""
        try:
            data = json.loads(body)
        except ValueError as exc:
            log.warning("telegram_webhook_malformed", error=f"not JSON: {exc}",
                        bytes=len(body), hint="answered 200: posted again it would be no "
                                              "better")
            return None
        try:
            return Update.de_json(data, self._bot())
        except Exception as exc:  # anything the library cannot read
            update_id = data.get("update_id") if isinstance(data, dict) else None
            log.warning("telegram_malformed_update_skipped", update_id=update_id,
                        error=repr(exc), hint="answered 200: posted again it would be no "
                                              "better")
            return None


def webhook_mark(url: str) -> str:
    """What Homing records of a webhook it sets (not the address, which may hold a
    secret path): enough to know it again."""
    return hashlib.sha256(url.encode()).hexdigest()
