"""Relay's adapter: the adapter contract (gateway/contract/adapter.py) kept with the
least a platform offers — long-polled updates, plain sends — and nothing of Homing but
the contract, its words and its settings.

The way in: updates are long-polled, each handed to the host; the offset that tells the
server to forget an update moves past it only once the host says it is journaled. A
crash at any moment loses nothing: the server hands the rest out again, and the journal
knows (by ``platform_id``) the ones it already has.

The way out: a send goes to exactly its route's chat and thread, split to the server's
limit, each part with a key made from the gateway's ``dedupe_key``, so a send made
again after a crash (or a retry after a part was refused) posts each part once. A 429
is the gateway's to wait out (``retry_after``); sends to one route keep their order.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import aiohttp
import structlog

from gateway.config.settings import secret
from gateway.contract.adapter import Adapter
from gateway.formatting.splitter import split_message
from gateway.words.events import MessageEvent, MessageKind, NoticeInfo, SendResult
from gateway.words.route import Route
from homing_relay.settings import RelaySettings
from homing_relay.spec import PLATFORM

if TYPE_CHECKING:
    from gateway.contract.host import AdapterHost
    from gateway.platforms.context import PlatformContext

log = structlog.get_logger(__name__)

POLL_SECONDS = 10
#: after a failed poll, wait this long before the next
POLL_PAUSE = 1.0


class RelayAdapter(Adapter):
    platform = PLATFORM.name
    message_limit = PLATFORM.capabilities.message_limit

    def __init__(self, settings: RelaySettings) -> None:
        self.settings = settings
        self._host: AdapterHost | None = None
        self._http: aiohttp.ClientSession | None = None
        self._poller: asyncio.Task[None] | None = None
        self._offset = 0
        self._connected = asyncio.Event()
        self._route_locks: dict[tuple[str, str | None], asyncio.Lock] = {}

    @property
    def _headers(self) -> Mapping[str, str]:
        return {"Authorization": f"Bearer {secret(self.settings.token)}"}

    async def connect(self, runner: AdapterHost) -> None:
        self._host = runner
        self._http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(
            total=POLL_SECONDS + 10))
        self._poller = asyncio.create_task(self._poll(), name="relay-poll")

    async def stop_receiving(self) -> None:
        """No more polling; confirm what was journaled, so the next life is not handed
        it again (it would know it, but need not ask)."""
        if self._poller is None:
            return
        self._poller.cancel()
        await asyncio.gather(self._poller, return_exceptions=True)
        self._poller = None
        try:
            await self._get_updates(timeout=0)
        except (aiohttp.ClientError, TimeoutError) as exc:
            log.info("relay_offset_not_confirmed", error=str(exc))

    async def disconnect(self) -> None:
        await self.stop_receiving()
        if self._http is not None:
            await self._http.close()
            self._http = None
        self._connected.clear()

    @property
    def connected(self) -> bool:
        return self._connected.is_set()

    async def wait_connected(self, timeout: float | None = None) -> None:
        await asyncio.wait_for(self._connected.wait(), timeout)

    # -- the way in -------------------------------------------------------------------

    async def _get_updates(self, timeout: float) -> list[dict[str, Any]]:
        assert self._http is not None
        async with self._http.get(f"{self.settings.base_url}/updates", headers=self._headers,
                                  params={"offset": self._offset,
                                          "timeout": timeout}) as response:
            body = await response.json()
            if response.status != 200:
                raise aiohttp.ClientResponseError(response.request_info, (),
                                                  status=response.status,
                                                  message=str(body.get("error")))
        updates: list[dict[str, Any]] = body["updates"]
        return updates

    async def _log_in(self) -> None:
        """Until the server takes the token (``/me``): then the adapter is connected."""
        assert self._http is not None
        while True:
            try:
                async with self._http.get(f"{self.settings.base_url}/me",
                                          headers=self._headers) as response:
                    if response.status == 200:
                        break
                    log.error("relay_login_refused", status=response.status,
                              hint="check platforms.relay.token")
            except (aiohttp.ClientError, TimeoutError) as exc:
                log.warning("relay_login_failed", error=str(exc))
            await asyncio.sleep(POLL_PAUSE)
        self._connected.set()
        if self._host is not None:
            self._host.platform_connected(self.platform)

    async def _poll(self) -> None:
        await self._log_in()
        while True:
            try:
                updates = await self._get_updates(POLL_SECONDS)
            except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
                log.warning("relay_poll_failed", error=str(exc))
                await asyncio.sleep(POLL_PAUSE)
                continue
            for update in updates:
                if not await self._take(update):
                    await asyncio.sleep(POLL_PAUSE)
                    break  # not journaled (the store failed): asked for again
                self._offset = int(update["id"]) + 1

    async def _take(self, update: dict[str, Any]) -> bool:
        """Hand one update to the host; True once it is journaled (or not for us)."""
        message = update.get("message")
        if not isinstance(message, dict) or not isinstance(message.get("text"), str):
            log.warning("relay_update_skipped", update_id=update.get("id"),
                        reason="not a text message")
            return True
        assert self._host is not None
        dm = message.get("chat_type") == "dm"
        route = Route(platform=self.platform, chat_type="dm" if dm else "group",
                      chat_id=str(message["chat"]),
                      thread_id=None if dm or not message.get("thread")
                      else str(message["thread"]),
                      user_id=str(message["user"]), message_id=str(message.get("id")))
        received = self._host.receive(MessageEvent(text=message["text"], route=route,
                                                   message_id=route.message_id),
                                      platform_id=str(update["id"]),
                                      sent_at=float(message.get("at") or 0) or None)
        return await received.journaled != "failed"

    # -- the way out ------------------------------------------------------------------

    async def send(self, route: Route, text: str, *, kind: MessageKind = "reply",
                   session_id: str | None = None, dedupe_key: str | None = None,
                   notice: NoticeInfo | None = None) -> SendResult:
        lock = self._route_locks.setdefault((route.chat_id, route.thread_id), asyncio.Lock())
        async with lock:
            last: str | None = None
            for number, part in enumerate(split_message(text, self.message_limit)):
                key = f"{dedupe_key}:{number}" if dedupe_key is not None else None
                result = await self._post(route, part, key)
                if not result.ok:
                    return result
                last = result.message_id
            return SendResult.sent(last)

    async def _post(self, route: Route, text: str, key: str | None) -> SendResult:
        if self._http is None:
            return SendResult.failed("relay is not connected")
        payload = {"chat": route.chat_id, "thread": route.thread_id, "text": text, "key": key}
        try:
            async with self._http.post(f"{self.settings.base_url}/messages", json=payload,
                                       headers=self._headers) as response:
                body = await response.json(content_type=None)
                status = response.status
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            return SendResult.failed(f"relay did not answer: {exc}")
        if status == 200 and body.get("ok"):
            return SendResult.sent(str(body["message"]["id"]))
        error = str(body.get("error") if isinstance(body, dict) else body)
        if status == 429:
            return SendResult.failed(error, retry_after=float(body.get("retry_after", 1)))
        if status == 404:
            return SendResult.failed(error, permanent=True, route_gone=True)
        if status in (400, 401, 403):
            return SendResult.failed(error, permanent=True, route_gone=False)
        return SendResult.failed(f"{status}: {error}")


def make_adapter(settings: RelaySettings, context: PlatformContext) -> RelayAdapter:
    """The registry's way in (homing_relay/spec.py)."""
    return RelayAdapter(settings)
