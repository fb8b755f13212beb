"""Live questions to the Telegram Bot API, asked with python-telegram-bot as the daemon
asks them: who the bot is and whether privacy mode is on, the webhook (set or not, what
waits for it and its last error),
whether another process polls the token, what the bot may do in a group, and the
first private message someone sends it (``homing setup`` learns its owner's id so).

Every call answers within ``TIMEOUT_SECONDS`` or fails; a failure is a
:class:`~gateway.platforms.probe.ProbeError` naming the host and the fix. None of these
acknowledges an update another program would want, except the one message setup
reads (that one was sent to setup).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Self, TypeVar

from telegram import Bot, ChatFullInfo, ChatMember, Update
from telegram.error import (
    BadRequest,
    Conflict,
    Forbidden,
    InvalidToken,
    NetworkError,
    TelegramError,
    TimedOut,
)
from telegram.request import HTTPXRequest

from gateway.platforms.probe import TIMEOUT_SECONDS, ProbeError, TokenRefused, host_of

T = TypeVar("T")

#: how long the poll of :meth:`TelegramProbe.polled_elsewhere` is held: Telegram ends
#: the *older* of two polls, so another poller shows up only when it comes back while
#: ours is held (a polling loop is back within a second or two)
POLL_HOLD_SECONDS = 2
#: each poll of :meth:`TelegramProbe.first_private_message` is held at most this long
_LEARN_POLL_SECONDS = 10
#: in the 409 getUpdates answers while a webhook is set (the other 409 is a poller)
_WEBHOOK_ACTIVE = "webhook is active"
_TOKEN_FIX = "copy the bot's token again from @BotFather (/mybots → API Token)"


@dataclass(frozen=True, slots=True)
class BotProfile:
    id: int
    username: str
    #: privacy mode off: the bot sees every message in a group, not only commands
    reads_all_group_messages: bool
    can_join_groups: bool


@dataclass(frozen=True, slots=True)
class WebhookState:
    """getWebhookInfo: the webhook set ("" for none), the updates waiting (for it, or for
    a poll), and Telegram's word on its last failed delivery."""

    url: str
    pending_updates: int
    last_error: str | None = None
    #: when the last delivery failed (unix time)
    last_error_at: float | None = None
    max_connections: int | None = None


@dataclass(frozen=True, slots=True)
class Sender:
    """Who wrote to the bot in a private chat."""

    user_id: int
    username: str | None
    chat_id: int

    def describe(self) -> str:
        return f"{self.user_id} (@{self.username})" if self.username else str(self.user_id)


class TelegramProbe:
    """One bot, asked live; ``async with`` logs in (getMe) and closes the connections."""

    def __init__(self, token: str, base_url: str = "https://api.telegram.org/bot",
                 base_file_url: str = "https://api.telegram.org/file/bot",
                 timeout: float = TIMEOUT_SECONDS) -> None:
        self.host = host_of(base_url)
        self.timeout = timeout
        # getUpdates gets a connection of its own, as in the library's own set-up
        self._requests = [HTTPXRequest(connect_timeout=timeout, read_timeout=timeout,
                                       write_timeout=timeout, pool_timeout=timeout)
                          for _ in range(2)]
        self._bot = Bot(token, base_url=base_url, base_file_url=base_file_url,
                        request=self._requests[0], get_updates_request=self._requests[1])
        self._profile: BotProfile | None = None

    async def __aenter__(self) -> Self:
        try:
            await self._call(self._bot.initialize())  # getMe: a refused token fails here
        except BaseException:
            # the bot counts as initialized only once getMe answered: close its
            # connections here
            for request in self._requests:
                await request.shutdown()
            raise
        me = self._bot.bot
        self._profile = BotProfile(me.id, me.username or str(me.id),
                                   bool(me.can_read_all_group_messages),
                                   bool(me.can_join_groups))
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._bot.shutdown()

    @property
    def profile(self) -> BotProfile:
        assert self._profile is not None, "use the probe in `async with`"
        return self._profile

    async def webhook(self) -> WebhookState:
        """The webhook set for this bot (polling is refused while there is one)."""
        info = await self._call(self._bot.get_webhook_info())
        failed = info.last_error_date
        return WebhookState(info.url, info.pending_update_count, info.last_error_message,
                            failed.timestamp() if failed is not None else None,
                            info.max_connections)

    async def polled_elsewhere(self) -> str | None:
        """Whether another process polls this token: Telegram's 409 text when it does.

        Held ``POLL_HOLD_SECONDS`` without an offset, so it acknowledges nothing."""
        try:
            await self._call(self._bot.get_updates(timeout=POLL_HOLD_SECONDS, limit=1),
                             expected=(Conflict,), held=POLL_HOLD_SECONDS)
        except Conflict as exc:
            if _WEBHOOK_ACTIVE in exc.message:
                return None  # the webhook check says this one
            return exc.message
        return None

    async def chat(self, chat_id: int) -> ChatFullInfo:
        """A group as the bot sees it; the bot not in it is a ProbeError."""
        try:
            return await self._call(self._bot.get_chat(chat_id),
                                    expected=(BadRequest, Forbidden))
        except BadRequest as exc:
            raise ProbeError(f"Telegram does not show chat {chat_id} to the bot "
                             f"({exc.message})",
                             "add the bot to the group, and check the id in "
                             "platforms.telegram.allowed_chats") from None
        except Forbidden as exc:
            raise ProbeError(f"the bot may not see chat {chat_id} ({exc.message})",
                             "add the bot to the group again") from None

    async def own_membership(self, chat_id: int) -> ChatMember:
        """The bot's own standing in a group: its status and, restricted, its rights."""
        return await self._call(self._bot.get_chat_member(chat_id, self.profile.id))

    async def first_private_message(self, wait: float) -> Sender | None:
        """The first private message a person sends the bot within ``wait`` seconds
        (None when none came). It and what came before it are acknowledged: they were
        for setup, not for the daemon."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait
        offset: int | None = None
        while (remaining := deadline - loop.time()) > 0:
            updates = await self._poll(offset, int(min(remaining, _LEARN_POLL_SECONDS)) or 1)
            for update in updates:
                offset = update.update_id + 1
                sender = _private_sender(update)
                if sender is not None:
                    await self._poll(offset, 0)  # acknowledge it
                    return sender
        return None

    async def say(self, chat_id: int, text: str) -> None:
        await self._call(self._bot.send_message(chat_id, text))

    async def _poll(self, offset: int | None, timeout: int) -> tuple[Update, ...]:
        try:
            return await self._call(self._bot.get_updates(
                offset=offset, timeout=timeout, allowed_updates=["message"]),
                expected=(Conflict,), held=timeout)
        except Conflict as exc:
            raise ProbeError(f"Telegram refused to hand out messages: {exc.message}",
                             "stop the other program polling this bot, or delete its "
                             "webhook (deleteWebhook)") from None

    async def _call(self, call: Awaitable[T], expected: tuple[type[TelegramError], ...] = (),
                    held: float = 0) -> T:
        """One call, bounded in time (a long poll: ``held`` more); its failures said once,
        here, but for the ``expected`` ones, which the caller turns into words of its own."""
        try:
            async with asyncio.timeout(self.timeout * 2 + held):  # a hang guard
                return await call
        except InvalidToken:
            raise TokenRefused(f"{self.host} refused the token (401 Unauthorized)",
                               _TOKEN_FIX) from None
        except (TimedOut, TimeoutError):
            raise ProbeError(f"{self.host} did not answer within {self.timeout:g} s",
                             _NETWORK_FIX) from None
        except expected:
            raise
        except NetworkError as exc:
            raise ProbeError(f"cannot reach {self.host}: {exc.message}",
                             _NETWORK_FIX) from None
        except TelegramError as exc:
            raise ProbeError(f"{self.host} answered: {exc.message}",
                             "see the Bot API's answer; check the bot's settings with "
                             "@BotFather") from None


_NETWORK_FIX = ("check the network and any proxy (HTTPS_PROXY), or "
                "platforms.telegram.base_url")


def _private_sender(update: Update) -> Sender | None:
    message = update.message
    if message is None or message.chat.type != "private" or message.from_user is None:
        return None
    if message.from_user.is_bot:
        return None
    return Sender(message.from_user.id, message.from_user.username, message.chat.id)
