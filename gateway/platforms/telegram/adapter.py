"""Telegram, through python-telegram-bot: long polling or a webhook in, ordered and
rate-limited sends out.

The adapter never owns the event loop (no ``run_polling``): it initializes the
Application for its bot and polls ``getUpdates`` itself, moving the offset past
an update only once the update is journaled, so an update Telegram handed out
is never lost to a crash. In ``mode: webhook`` Telegram posts each update to the
adapter's own server instead (gateway/platforms/telegram/webhook.py), which answers
200 only once the update is journaled. A Telegram outage or a 409 Conflict leaves the
adapter retrying with backoff while the rest of the gateway carries on.
"""

from __future__ import annotations

import asyncio
import functools
import hmac
import re
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog
from telegram import (
    Bot,
    BotCommand,
    BotCommandScopeAllGroupChats,
    BotCommandScopeAllPrivateChats,
    InlineKeyboardMarkup,
    Update,
)
from telegram.constants import ChatAction
from telegram.error import (
    BadRequest,
    ChatMigrated,
    Conflict,
    Forbidden,
    InvalidToken,
    NetworkError,
    RetryAfter,
    TelegramError,
)
from telegram.ext import ApplicationBuilder

from gateway.config.platform import account_platform
from gateway.config.settings import secret
from gateway.contract.adapter import Adapter, LiveReply
from gateway.errors import StoreError
from gateway.formatting.telegram_html import HtmlOrPlain, message_parts, plain_fallback
from gateway.formatting.telegram_html import render as render_html
from gateway.inbound.files import FILES, FileRefused, IncomingFile
from gateway.platforms.flow import FlowControl, RateLimits
from gateway.platforms.telegram.approvals import ApprovalButtons
from gateway.platforms.telegram.bot import AnyApplication
from gateway.platforms.telegram.choices import choice_keyboard, is_choice, take_choice
from gateway.platforms.telegram.files import download as download_file
from gateway.platforms.telegram.files import files_in, post_file
from gateway.platforms.telegram.preview import TelegramPreview
from gateway.platforms.telegram.requests import SkippingMalformedUpdates
from gateway.platforms.telegram.routes import route_of, send_arguments
from gateway.platforms.telegram.settings import TelegramConfig
from gateway.platforms.telegram.spec import PLATFORM
from gateway.platforms.telegram.webhook import WebhookListener, webhook_mark
from gateway.retry import RetryPolicy
from gateway.words.events import (
    Choice,
    MessageEvent,
    MessageKind,
    NoticeInfo,
    Received,
    SendResult,
)
from gateway.words.route import Route

if TYPE_CHECKING:
    from gateway.cluster.instances import Lease
    from gateway.contract.approval import ApprovalRecord
    from gateway.contract.host import AdapterHost
    from gateway.platforms.context import PlatformContext

log = structlog.get_logger(__name__)

MESSAGE_LIMIT = PLATFORM.capabilities.message_limit
#: a part of a message; a patient send (a reply, a later part) gets three times the tries
SEND = RetryPolicy((0.5, 1.0, 2.0, 4.0, 8.0), attempts=5)
#: a first part facing a longer flood wait goes back to the caller
_MAX_INLINE_WAIT = 30.0
#: the updates asked for: messages, and taps on buttons (approvals and choices)
_WANTED = ["message", "callback_query"]
#: connecting and polling, until it works
CONNECT = RetryPolicy((1.0, 2.0, 5.0, 10.0, 30.0, 60.0))
#: at a stop, how long a batch of updates being journaled may take to finish
BATCH_WAIT_SECONDS = 5.0
#: where Homing records the webhook it set last (``AdapterHost.cursors``), to know it again
_WEBHOOK_CURSOR = "webhook"


class TelegramAdapter(Adapter):
    platform = "telegram"
    message_limit = MESSAGE_LIMIT
    supports_pairing = True

    def __init__(self, config: TelegramConfig, *,
                 leases: Callable[[str], Lease] | None = None) -> None:
        """``leases``: on a shared store, the lease of a name, among the instances."""
        if not config.token:
            raise ValueError("platforms.telegram.token is required when Telegram is enabled")
        self.config = config
        #: the bot's routes' platform: ``telegram``, or ``telegram/<account>`` for one of
        #: several bots (gateway/config/platform.py)
        self.platform = account_platform(PLATFORM.name, config.name)
        self.flow = FlowControl(RateLimits(config.messages_per_second,
                                           config.group_messages_per_minute))
        self.bot_username: str | None = None
        self._runner: AdapterHost | None = None
        self._app: AnyApplication | None = None
        self._connected = False
        self._starter: asyncio.Task[None] | None = None
        self._poller: asyncio.Task[None] | None = None
        self._asking = False  # the poller waits on getUpdates (not journaling a batch)
        self._poll_stop = False
        #: the next update id wanted: everything before it is journaled
        self._offset: int | None = None
        #: on a shared store: the lease that makes this instance the token's one poller
        #: (none in webhook mode: every instance takes the requests it is sent)
        self.poll_lease = (leases(self.poll_lease_name)
                           if leases is not None and config.mode == "polling" else None)
        self._listener: WebhookListener | None = None
        self._approval_buttons = ApprovalButtons(self)

    # lifecycle ---------------------------------------------------------------

    async def connect(self, runner: AdapterHost) -> None:
        """Start in the background: a Telegram outage must not hold up the daemon."""
        self._runner = runner
        self._app = (ApplicationBuilder().token(secret(self.config.token) or "")
                     .base_url(self.config.base_url).base_file_url(self.config.base_file_url)
                     .get_updates_request(SkippingMalformedUpdates(read_timeout=15.0))
                     .build())
        self._starter = asyncio.create_task(self._start_with_retries(), name="telegram-start")

    async def wait_connected(self, timeout: float | None = None) -> None:
        if self._starter is not None:
            async with asyncio.timeout(timeout):
                await asyncio.shield(self._starter)

    async def _start_with_retries(self) -> None:
        assert self._app is not None
        for attempt in CONNECT.tries():
            try:
                await self._app.initialize()
                break
            except InvalidToken:
                log.error("telegram_invalid_token",
                          hint="check platforms.telegram.token; Telegram stays offline")
                return
            except TelegramError as exc:
                delay = CONNECT.delay(attempt)
                log.warning("telegram_connect_failed", error=str(exc), retry_in=delay)
                await asyncio.sleep(delay)
        self.bot_username = self._app.bot.username
        await self._register_commands()
        if self.config.mode == "webhook":
            if not await self._start_webhook():
                return
        else:
            await self._leave_own_webhook()
            if self.poll_lease is None:
                self._start_polling()
            else:  # sending works here at once; polling once the lease is this instance's
                self.poll_lease.watch(self._on_poll_lease, self._stop_polling)
        self._connected = True
        log.info("telegram_connected", bot=self.bot_username)
        if self._runner is not None:
            self._runner.platform_connected(self.platform)

    async def _start_webhook(self) -> bool:
        """Listen, then have Telegram post here (setWebhook, with the secret token, the
        updates wanted and ``max_connections``); until both work, try again with backoff.
        The webhook is recorded as Homing's own first, so a crash in between cannot leave
        one set that a later start in polling mode would not know. False: the token
        was refused."""
        assert self._app is not None and self._runner is not None
        settings = self.config.webhook
        app = self._app
        listener = WebhookListener(settings, self._take, lambda: app.bot,
                                   stop_wait=BATCH_WAIT_SECONDS)
        for attempt in CONNECT.tries():
            try:
                await listener.start()
                break
            except OSError as exc:
                delay = CONNECT.delay(attempt)
                log.error("telegram_webhook_listen_failed", host=settings.listen.host,
                          port=settings.listen.port, error=str(exc), retry_in=delay,
                          hint="another process holds platforms.telegram.webhook.listen")
                await asyncio.sleep(delay)
        self._listener = listener
        url = settings.url or ""
        for attempt in CONNECT.tries():
            delay = CONNECT.delay(attempt)
            try:
                await self._runner.cursors.put(self.platform, _WEBHOOK_CURSOR,
                                               webhook_mark(url))
                await app.bot.set_webhook(
                    url, secret_token=secret(settings.secret_token),
                    allowed_updates=_WANTED, max_connections=settings.max_connections)
                break
            except InvalidToken:
                log.error("telegram_invalid_token",
                          hint="check platforms.telegram.token; Telegram stays offline")
                return False
            except TelegramError as exc:
                log.error("telegram_webhook_not_set", error=str(exc), retry_in=delay,
                          hint="check platforms.telegram.webhook.url: Telegram needs HTTPS "
                               "on port 443, 80, 88 or 8443, on a public address")
            except (sqlite3.Error, StoreError) as exc:
                log.error("telegram_webhook_not_set", error=str(exc), retry_in=delay,
                          reason="it could not be recorded as Homing's own")
            await asyncio.sleep(delay)
        log.info("telegram_webhook_set", listen_port=listener.port,
                 max_connections=settings.max_connections)
        return True

    async def _leave_own_webhook(self) -> None:
        """Polling is refused while a webhook is set. One Homing set (webhook mode, left
        since) is deleted — what Telegram holds stays for the poll; another tool's is
        left alone, and polling says so (:meth:`_on_polling_error`)."""
        assert self._app is not None and self._runner is not None
        try:
            info = await self._app.bot.get_webhook_info()
            if not info.url:
                return
            own = await self._runner.cursors.get(self.platform, _WEBHOOK_CURSOR)
            if own is None or not hmac.compare_digest(own, webhook_mark(info.url)):
                return
            await self._app.bot.delete_webhook(drop_pending_updates=False)
        except (TelegramError, sqlite3.Error, StoreError) as exc:
            log.warning("telegram_webhook_not_checked", error=str(exc),
                        hint="should it be the one Homing set, polling says so (409)")
            return
        log.info("telegram_webhook_deleted", pending_updates=info.pending_update_count,
                 reason="polling mode: the webhook Homing set in webhook mode is deleted; "
                        "what Telegram holds is polled")

    @property
    def poll_lease_name(self) -> str:
        """One poller per bot token: Telegram answers a second one with 409."""
        return f"telegram:{(secret(self.config.token) or '').split(':', 1)[0]}"

    def _start_polling(self) -> None:
        self._poll_stop = False
        self._poller = asyncio.create_task(self._poll(), name="telegram-poll")

    async def _on_poll_lease(self, epoch: int) -> None:
        # Telegram hands out again what no poller confirmed; the journal knows what it has
        self._offset = None
        log.info("telegram_polling_here", lease=self.poll_lease_name, lease_epoch=epoch)
        self._start_polling()

    async def _stop_polling(self) -> None:
        """Stop asking for updates. A batch being journaled is let finish (for a while),
        so its offset can be confirmed: a restart, or the next poller, is not handed
        those updates again."""
        poller, self._poller = self._poller, None
        if poller is None:
            return
        self._poll_stop = True
        if self._asking:
            poller.cancel()
        _, journaling = await asyncio.wait({poller}, timeout=BATCH_WAIT_SECONDS)
        if journaling:  # the store is stuck: what is not journaled is handed out again
            poller.cancel()
        await asyncio.gather(poller, return_exceptions=True)

    async def _poll(self) -> None:
        """Long-poll getUpdates. The offset — which tells Telegram to forget what came
        before it — moves past an update only once that update is journaled, so a
        crash at any moment loses nothing: Telegram hands the rest out again, and the
        journal knows the ones it already has. Pending updates are never dropped."""
        assert self._app is not None
        failures = 0  # in a row
        while not self._poll_stop:
            self._asking = True
            try:
                updates = await self._app.bot.get_updates(
                    offset=self._offset, timeout=10, allowed_updates=_WANTED, read_timeout=15)
            except InvalidToken as exc:
                self._connected = False
                log.error("telegram_polling_stopped", error=str(exc),
                          hint="the token was refused; check platforms.telegram.token "
                               "and restart")
                return
            except TelegramError as exc:
                self._on_polling_error(exc)
                await CONNECT.pause(failures)
                failures += 1
                continue
            finally:
                self._asking = False
            failures = 0
            for update in updates:
                if self._poll_stop:
                    break
                if not await self._take(update):  # not journaled (the store failed)
                    await asyncio.sleep(1.0)
                    break  # asked for again
                self._offset = update.update_id + 1

    async def _take(self, update: Update) -> bool:
        """Hand an update to the runner; True once it is journaled (or is not for us).
        A tap on a button is decided or journaled here, before Telegram is told the
        update was taken (the offset, or the webhook's answer)."""
        query = update.callback_query
        if query is not None:
            if is_choice(query):
                return await take_choice(query, self._runner, self._bot(), self.platform)
            approvals = self._runner.approvals if self._runner is not None else None
            return await self._approval_buttons.on_press(query, approvals)
        received = self._on_update(update)
        return received is None or await received.journaled != "failed"

    async def stop_receiving(self) -> None:
        """Stop polling: what is not fetched stays with Telegram for the next poller (the
        next life, or another instance at once, the lease released); tell Telegram what
        was journaled, so that poller is not handed it again. In webhook mode, stop
        listening (the webhook stays set): Telegram posts what is not taken again."""
        if self._starter is not None and not self._starter.done():
            self._starter.cancel()
            await asyncio.gather(self._starter, return_exceptions=True)
        if self._listener is not None:
            await self._listener.stop()
        if self._poller is not None:
            await self._stop_polling()
            if self._app is not None and self._offset is not None:
                try:
                    await self._app.bot.get_updates(offset=self._offset, timeout=0,
                                                    read_timeout=5)
                except TelegramError as exc:
                    log.info("telegram_offset_not_confirmed", error=str(exc))
        if self.poll_lease is not None:  # confirmed: another instance may poll from here
            await self.poll_lease.stop()

    async def disconnect(self) -> None:
        await self.stop_receiving()
        app = self._app
        if app is None:
            return
        self._connected = False
        if app.running:
            await _quietly("stop", app.stop())
        await _quietly("shut down", app.shutdown())
        self._app = None

    @property
    def connected(self) -> bool:
        return self._connected

    async def _register_commands(self) -> None:
        """The command menu, per scope: private chats get all, groups all but /start."""
        assert self._app is not None and self._runner is not None
        from gateway.messages.commands import GATEWAY_COMMANDS, PRIVATE_ONLY

        commands = {**GATEWAY_COMMANDS, **self._runner.agent.commands}
        menus = ((BotCommandScopeAllPrivateChats(), commands),
                 (BotCommandScopeAllGroupChats(),
                  {n: w for n, w in commands.items() if n not in PRIVATE_ONLY}))
        for scope, menu in menus:
            try:
                await self._app.bot.set_my_commands(
                    [BotCommand(name, what[:256]) for name, what in menu.items()], scope=scope)
            except TelegramError as exc:
                log.warning("telegram_commands_not_registered", scope=scope.type,
                            error=str(exc))

    def _on_polling_error(self, exc: TelegramError) -> None:
        # PTB keeps polling with its own backoff; say what is happening
        if isinstance(exc, InvalidToken):
            self._connected = False  # the library gives up polling on this one
            log.error("telegram_polling_stopped", error=str(exc),
                      hint="the token was refused; check platforms.telegram.token and restart")
        elif isinstance(exc, Conflict) and "webhook" in str(exc).lower():
            # not removed here: the tool that set it may still rely on it
            log.error("telegram_conflict", error=str(exc),
                      hint="a webhook is set for this bot token, so polling is refused; "
                           "`homing doctor` shows how to delete it")
        elif isinstance(exc, Conflict):
            log.error("telegram_conflict", error=str(exc),
                      hint="another process polls with this bot token")
        else:
            log.warning("telegram_polling_error", error=str(exc))

    # inbound -------------------------------------------------------------------

    def _on_update(self, update: Update) -> Received | None:
        message = update.message
        if message is None:
            return None
        files = files_in(message)
        if message.text is None and not files:
            return None
        if message.from_user is None or message.from_user.is_bot:
            return None  # bots (ourselves included) are never served
        route = route_of(message, self.platform)
        if route is None:
            return None
        if route.chat_type == "group" and not self._wanted_in_group(message):
            return None
        text = self._without_mention(message.text or message.caption or "")
        if text is None:
            return None
        assert self._runner is not None
        metadata = {FILES: [f.to_dict() for f in files]} if files else {}
        return self._runner.receive(
            MessageEvent(text=text, route=route, message_id=str(message.message_id),
                         metadata=metadata),
            platform_id=str(update.update_id), sent_at=message.date.timestamp())

    def _wanted_in_group(self, message: Any) -> bool:
        """Addressed to the bot at all (whether the chat is served is
        gateway/messages/auth.py's)."""
        if not self.config.require_mention:
            return True
        text: str = message.text or message.caption or ""
        mentioned = bool(self.bot_username) and re.search(
            rf"@{re.escape(self.bot_username or '')}\b", text, re.IGNORECASE) is not None
        replied = (message.reply_to_message is not None
                   and message.reply_to_message.from_user is not None
                   and message.reply_to_message.from_user.username == self.bot_username)
        return mentioned or replied or text.startswith("/")

    def _without_mention(self, text: str) -> str | None:
        """Commands addressed to another bot (``/new@otherbot``) are not ours."""
        head = text.split(maxsplit=1)[0] if text.strip() else ""
        if head.startswith("/") and "@" in head:
            target = head.split("@", 1)[1]
            if self.bot_username and target.lower() != self.bot_username.lower():
                return None
        return text

    # outbound ------------------------------------------------------------------

    async def typing(self, route: Route, active: bool) -> None:
        if not active or self._app is None or not self._connected:
            return  # Telegram ends "typing" by itself, or with the next message
        await self._app.bot.send_chat_action(
            int(route.chat_id), ChatAction.TYPING,
            message_thread_id=int(route.thread_id) if route.thread_id else None)

    async def send(self, route: Route, text: str, *, kind: MessageKind = "reply",
                   session_id: str | None = None, dedupe_key: str | None = None,
                   notice: NoticeInfo | None = None) -> SendResult:
        """Send every part, in order, or say why not (permanent when the route is gone).

        Replies are pushed through patiently (nothing would send them again);
        so is every part after the first, since a failure then would make the
        whole message be sent again. A notice's first part facing a long flood
        wait goes back to the outbox, which retries it later.
        """
        if self._app is None or not self._connected:
            return SendResult.failed("telegram is not connected")
        return await self.send_parts(route, message_parts(text),
                                     first_patient=kind != "notification")

    async def send_parts(self, route: Route, parts: list[str], *, first_patient: bool = True,
                         keyboard: InlineKeyboardMarkup | None = None) -> SendResult:
        """``parts`` in order, as one message (a streamed reply's rest, after its preview);
        ``keyboard`` goes under the last part."""
        if self._app is None or not self._connected:
            return SendResult.failed("telegram is not connected")
        last: str | None = None
        async with self.flow.chat(route.chat_id):
            for index, part in enumerate(parts):
                result = await self._send_part(
                    route, part, patient=index > 0 or first_patient,
                    keyboard=keyboard if index == len(parts) - 1 else None)
                if not result.ok:
                    return result
                last = result.message_id
        return SendResult.sent(last)

    async def send_choices(self, route: Route, text: str, choices: Sequence[Choice], *,
                           kind: MessageKind = "system", session_id: str | None = None
                           ) -> SendResult:
        """``text`` sent as :meth:`send` sends it, a button a choice under its last part;
        a tap is taken in :meth:`_take`."""
        if self._app is None or not self._connected:
            return SendResult.failed("telegram is not connected")
        return await self.send_parts(route, message_parts(text),
                                     first_patient=kind != "notification",
                                     keyboard=choice_keyboard(choices))

    def send_room(self, route: Route) -> int:
        """What the flood limits leave for the chat now (a 429's wait leaves nothing)."""
        return self.flow.room(route.chat_id, group=route.chat_type == "group")

    def message_count(self, text: str) -> int:
        return len(message_parts(text))  # rendered, in UTF-16 units, as :meth:`send` cuts

    def live_reply(self, route: Route, session_id: str | None) -> LiveReply:
        return TelegramPreview(self, route)

    async def ask_approval(self, route: Route, record: ApprovalRecord) -> SendResult:
        return await self._approval_buttons.ask(route, record)

    async def settle_approval(self, route: Route, record: ApprovalRecord) -> None:
        await self._approval_buttons.settle(route, record)

    async def send_file(self, route: Route, path: Path, caption: str | None = None, *,
                        session_id: str | None = None) -> SendResult:
        if self._app is None or not self._connected:
            return SendResult.failed("telegram is not connected")
        async with self.flow.chat(route.chat_id):
            await self.flow.admit(route.chat_id, group=route.chat_type == "group")
            try:
                sent = await post_file(self._app.bot, send_arguments(route), path, caption)
            except RetryAfter as exc:
                self.flow.pause(route.chat_id, _seconds(exc.retry_after))
                return SendResult.failed(f"flood control: {exc}",
                                         retry_after=_seconds(exc.retry_after))
            except TelegramError as exc:
                return SendResult.failed(f"rejected by Telegram: {exc}")
        return SendResult.sent(sent)

    async def download(self, file: IncomingFile) -> AsyncIterator[bytes]:
        if self._app is None or self._runner is None:
            raise FileRefused(f"{file.name} was not saved: Telegram is not connected.")
        return await download_file(self._app.bot, file,
                                   self._runner.config.attachments.max_bytes)

    @property
    def app(self) -> AnyApplication | None:
        return self._app

    @property
    def webhook_port(self) -> int | None:
        """The port Telegram's requests are taken on (webhook mode, once listening)."""
        return self._listener.port if self._listener is not None else None

    def _bot(self) -> Bot | None:
        """The bot, to answer a tap with: in webhook mode a tap may come in before the
        webhook is confirmed set (one set by the last life)."""
        return self._app.bot if self._app is not None else None

    async def _send_part(self, route: Route, source: str, *, patient: bool,
                         keyboard: InlineKeyboardMarkup | None = None) -> SendResult:
        """One part, given as Markdown: sent as HTML, or as plain text when Telegram
        cannot parse that HTML (a message is never lost to its formatting)."""
        assert self._app is not None
        with_thread = True
        chat_id = route.chat_id
        group = route.chat_type == "group"
        policy = SEND.times(3) if patient else SEND
        formatted = HtmlOrPlain(render_html(source), plain_fallback(source))
        bot = self._app.bot

        async def admit() -> None:
            await self.flow.admit(chat_id, group=group)  # every request counts

        for attempt in policy.tries():
            await admit()
            try:
                message = await formatted.send(functools.partial(
                    bot.send_message, reply_markup=keyboard,
                    **send_arguments(route, with_thread=with_thread, chat_id=chat_id)), admit)
                return SendResult.sent(str(message.message_id))
            except RetryAfter as exc:
                wait = _seconds(exc.retry_after)
                everywhere = self.flow.pause(chat_id, wait)
                log.warning("telegram_flood_control", chat_id=chat_id, retry_after=wait,
                            all_chats=everywhere)
                if wait > _MAX_INLINE_WAIT and not patient:
                    return SendResult.failed(f"flood control: retry after {wait:.0f} s",
                                             retry_after=wait)
            except ChatMigrated as exc:
                # a group became a supergroup (topics turned on): same chat, new id
                log.warning("telegram_chat_migrated", chat_id=chat_id,
                            new_chat_id=exc.new_chat_id)
                chat_id = str(exc.new_chat_id)
            except BadRequest as exc:
                if "thread not found" in exc.message.lower():
                    if self.config.thread_fallback_to_chat and with_thread:
                        log.warning("telegram_thread_gone_fallback", chat_id=chat_id,
                                    thread_id=route.thread_id)
                        with_thread = False
                        continue
                    return SendResult.failed(f"route gone: {exc.message}", permanent=True)
                return SendResult.failed(f"rejected by Telegram: {exc.message}", permanent=True,
                                         route_gone=False)
            except Forbidden as exc:
                return SendResult.failed(f"route gone: {exc.message}", permanent=True)
            except NetworkError as exc:  # timeouts, connection errors, 5xx
                if policy.is_last(attempt):
                    break
                delay = policy.delay(attempt)
                log.warning("telegram_send_retry", chat_id=chat_id, error=str(exc),
                            retry_in=delay)
                await asyncio.sleep(delay)
        return SendResult.failed(f"telegram did not accept the message after "
                                 f"{policy.attempts} attempts")


async def _quietly(what: str, step: Awaitable[Any]) -> None:
    """A shutdown step that fails is logged; the rest of the shutdown goes on."""
    try:
        await step
    except TelegramError as exc:
        log.warning("telegram_shutdown_step_failed", step=what, error=str(exc))


def _seconds(value: Any) -> float:
    return float(value.total_seconds()) if hasattr(value, "total_seconds") else float(value)


def make_adapter(settings: TelegramConfig, context: PlatformContext) -> TelegramAdapter:
    """The registry's way in (gateway/platforms/telegram/spec.py)."""
    return TelegramAdapter(settings, leases=context.leases)
