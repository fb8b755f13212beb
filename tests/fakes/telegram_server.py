"""A small fake Telegram Bot API server for tests with the real python-telegram-bot.

It speaks just enough of the Bot API for PTB 22.x to long-poll (or post to a
webhook), send, edit and delete messages (see
``/work/shared/notes/platform-fakes.md``)::

    fake = FakeTelegram()
    await fake.start()
    app = (ApplicationBuilder().token(fake.token)
           .base_url(fake.base_url).base_file_url(fake.base_file_url).build())
    fake.user_message(chat_id=7, text="hi")          # next getUpdates returns it
    await app.bot.send_message(7, "hello")            # recorded in fake.sent
    await app.bot.edit_message_text("hello!", chat_id=7, message_id=1)  # fake.edits
    fake.visible(7)                                   # ["hello!"]: what the user sees
    photo = fake.user_photo(chat_id=7, data=png(), caption="look")["photo"]  # media.png
    file = await app.bot.get_file(photo[-1]["file_id"])  # then file.download_as_bytearray()
    await app.bot.send_document(7, b"...", filename="a.txt")  # recorded in fake.sent_files
    query_id = fake.press(7, 1, "approve")  # a tap on a button: a callback_query update
    fake.reverse_proxy("https://bot.example.org", "http://127.0.0.1:8443")
    await app.bot.set_webhook("https://bot.example.org/tg", secret_token="s3cret")
    fake.user_message(chat_id=7, text="hi")          # now POSTed to the webhook instead
    await fake.stop()

Protocol as on Telegram: ``POST /bot<TOKEN>/<method>`` with a form-encoded
(strings raw, everything else JSON text), multipart or JSON body, or none at
all; answers ``{"ok": true, "result": ...}`` with HTTP 200, errors carry the
real HTTP status, ``error_code``, ``description`` and ``parameters`` when
relevant (``retry_after``). A wrong token shaped like one is 401 Unauthorized, a
path without a token 404 Not Found.

Edits and deletes answer as the Bot API does: an unknown or deleted message is
"message to edit not found" / "message to delete not found", an edit to the same
content "message is not modified", an over-long edit ``MESSAGE_TOO_LONG`` (where
sendMessage says "message is too long"), and a user's message "can't be edited".

A text sent with ``parse_mode="HTML"`` is parsed as Telegram parses it: an unknown
tag, a bare ``<`` or an unclosed tag is "can't parse entities: ...", and the length
limit counts the text a user sees.

The bot's messages (sending, editing, deleting, what a user sees) live in
``telegram_messages``, HTML parsing in ``telegram_entities``, files (users' photos,
documents, voice, audio and video; getFile and downloads; sendPhoto and sendDocument)
in ``gateway/platforms/telegram/files.py``, inline keyboards, taps and answerCallbackQuery in
``telegram_buttons``, the bot's account (getMe's privacy mode, getChat and
getChatMember) in ``telegram_account``, the webhook (setWebhook, deleteWebhook,
getWebhookInfo, and updates posted to it as Telegram posts them) in ``telegram_webhook``,
the Bot API's parameters and errors in ``telegram_api``; this
module holds the server as tests drive it: updates in, long polling, commands,
scripted failures and the waits.
"""

from __future__ import annotations

import asyncio
import math
import re
import time
from typing import Any

from aiohttp import web

from tests.fakes.local_server import LocalServer
from tests.fakes.telegram_account import BotAccount
from tests.fakes.telegram_api import (
    ApiError,
    Failure,
    as_int,
    as_json,
    consume_failure,
    error_response,
    read_params,
    scripted_failure,
)
from tests.fakes.telegram_buttons import BotButtons, CallbackAnswer
from tests.fakes.telegram_entities import auto_entities
from tests.fakes.telegram_files import MAX_UPLOAD_SIZE, BotFiles, FileRecord, StoredFile
from tests.fakes.telegram_messages import (  # noqa: F401 (the constants: re-exported, as before the split)
    DELETE_NOT_FOUND,
    EDIT_NOT_FOUND,
    MAX_MESSAGE_LENGTH,
    NOT_MODIFIED,
    THREAD_NOT_FOUND,
    BotMessages,
    EditRecord,
    Posted,
    SentRecord,
    utf16_len,
)
from tests.fakes.telegram_webhook import BotWebhook, Described

__all__ = ["TOKEN", "CallbackAnswer", "EditRecord", "FakeTelegram", "FileRecord", "SentRecord",
           "StoredFile", "utf16_len"]

JSON = dict[str, Any]
#: a bot token's shape: a wrong one of this shape is 401 Unauthorized, anything else 404
_TOKEN_SHAPE = re.compile(r"\d+:[A-Za-z0-9_-]+")
#: shaped like a real bot token (``<bot id>:<35 characters>``): the config checks the shape
TOKEN = DEFAULT_TOKEN = "123456789:AAHfakeTelegramBotTokenForTests0123"
#: what Telegram answers a getUpdates that a newer one ended
CONFLICT = ("Conflict: terminated by other getUpdates request; make sure that only one bot "
            "instance is running")
#: what getUpdates hands out when allowed_updates is not given or empty: all but these
_NOT_BY_DEFAULT = frozenset({"chat_member", "message_reaction", "message_reaction_count"})


class FakeTelegram(BotMessages, BotButtons, BotFiles, BotAccount, BotWebhook, LocalServer):
    """An in-process Bot API server on ``127.0.0.1`` (a free port, picked on start)."""

    max_poll_hold: float = 5.0
    """Upper bound (seconds) for holding a getUpdates call, whatever ``timeout`` asks."""

    def __init__(self, token: str = TOKEN, bot_username: str = "homing_bot") -> None:
        self.token = token
        self.bot_username = bot_username
        self.bot_id = int(token.split(":", 1)[0])
        self.bot_user: JSON = {"id": self.bot_id, "is_bot": True, "first_name": "Homing",
                               "username": bot_username}
        self.sent: list[SentRecord] = []
        self.edits: list[EditRecord] = []
        self.deleted: set[tuple[int, int]] = set()  # (chat id, message id) deleted by the bot
        self.handed_out = 0  # updates getUpdates returned, counting each time one is returned
        self._sends_open = asyncio.Event()
        self._sends_open.set()
        self.commands: list[JSON] = []
        self.deleted_threads: set[tuple[int, int]] = set()
        self.calls: list[tuple[str, dict[str, Any]]] = []  # every API call: (method, params)
        self.port: int = 0
        self._pending: list[tuple[int, JSON]] = []  # (ack id, update) not yet acknowledged
        #: the last ``allowed_updates`` a getUpdates gave (Telegram keeps it until changed)
        self.allowed_updates: list[str] | None = None
        self._next_update_id = 10_000
        self._message_ids: dict[int, int] = {}  # chat id -> last message id in that chat
        self._chats: dict[int, JSON] = {}  # chats seen in inbound messages
        self._posted: dict[tuple[int, int], Posted] = {}  # (chat id, message id) of the bot's
        self._user_messages: set[tuple[int, int]] = set()  # inbound ones: the bot can't edit
        self._send_failures: list[Failure] = []
        #: a group's flood limit (messages, seconds) and its sends' times
        self._group_limits: dict[int, tuple[int, float, bool]] = {}
        self._group_sends: dict[int, list[float]] = {}
        self._group_window_start: dict[int, float] = {}
        self._edit_failures: list[Failure] = []
        self._delete_failures: list[Failure] = []
        self._poll_failures: list[Failure] = []
        self._updates_changed = asyncio.Event()
        #: getUpdates calls so far; the event is set when a new one starts (and ends a
        #: waiting one)
        self.polls = 0
        self._poll_started = asyncio.Event()
        #: waiting polls ended by a newer one (409 Conflict), as Telegram does
        self.conflicts = 0
        self._sent_changed = asyncio.Event()
        self._edits_changed = asyncio.Event()
        self._closing = asyncio.Event()
        self._init_files()
        self._init_buttons()
        self._init_account()
        self._init_webhook()

    # ------------------------------------------------------------------ lifecycle

    @property
    def base_url(self) -> str:
        """Value for ``ApplicationBuilder.base_url`` (PTB appends the token)."""
        return f"http://127.0.0.1:{self.port}/bot"

    @property
    def base_file_url(self) -> str:
        """Value for ``ApplicationBuilder.base_file_url``."""
        return f"http://127.0.0.1:{self.port}/file/bot"

    def _build_app(self) -> web.Application:
        app = web.Application(client_max_size=MAX_UPLOAD_SIZE)  # over it: 413, as Telegram
        app.router.add_route("*", "/bot{token}/{method}", self._handle)
        app.router.add_get("/file/bot{token}/{path:.+}", self._download)
        app.router.add_route("*", "/{tail:.*}", self._not_found)
        self._closing.clear()
        return app

    async def start(self) -> None:
        await super().start()
        self._start_webhook()

    async def _before_stop(self) -> None:
        """Release held long polls; stop posting to the webhook."""
        self._closing.set()
        self._wake("updates")
        await self._stop_webhook()

    # ------------------------------------------------------------------ inbound

    def user_message(self, *, chat_id: int, text: str, user_id: int = 1,
                     username: str | None = "alice", first_name: str = "Alice",
                     chat_type: str = "private", is_forum: bool = False,
                     thread_id: int | None = None, is_topic_message: bool = False,
                     reply_to_message_id: int | None = None, is_bot: bool = False,
                     chat_title: str | None = None, date: float | None = None) -> JSON:
        """Queue a text message from a user; the next getUpdates returns it.

        Returns the Message dict. ``update_id``, ``message_id`` (per chat) and
        ``date`` are assigned here. A text starting with ``/`` gets a
        ``bot_command`` entity, every ``@name`` a ``mention`` entity (offsets in
        UTF-16 units). As on Telegram, a topic message (``is_topic_message``)
        without an explicit reply is a reply to the topic's service message
        (message id == thread id, with ``forum_topic_created``). Files come in with
        :meth:`user_photo`, :meth:`user_document`, :meth:`user_voice`,
        :meth:`user_audio` and :meth:`user_video`, which take the same options.
        """
        content: JSON = {"text": text}
        entities = auto_entities(text)
        if entities:
            content["entities"] = entities
        return self._inbound(
            chat_id, content, user_id=user_id, username=username, first_name=first_name,
            chat_type=chat_type, is_forum=is_forum, thread_id=thread_id,
            is_topic_message=is_topic_message, reply_to_message_id=reply_to_message_id,
            is_bot=is_bot, chat_title=chat_title, date=date)

    def _inbound(self, chat_id: int, content: JSON, *, user_id: int = 1,
                 username: str | None = "alice", first_name: str = "Alice",
                 chat_type: str = "private", is_forum: bool = False,
                 thread_id: int | None = None, is_topic_message: bool = False,
                 reply_to_message_id: int | None = None, is_bot: bool = False,
                 chat_title: str | None = None, date: float | None = None) -> JSON:
        """Queue a user's message whose ``content`` (text, or a file and caption) is given."""
        chat: JSON = {"id": chat_id, "type": chat_type}
        if chat_type == "private":
            chat["first_name"] = first_name
            if username is not None:
                chat["username"] = username
        else:
            chat["title"] = chat_title or f"Group {chat_id}"
        if is_forum:
            chat["is_forum"] = True
        self._chats[chat_id] = chat

        sender: JSON = {"id": user_id, "is_bot": is_bot, "first_name": first_name}
        if username is not None:
            sender["username"] = username
        sent_at = int(time.time() if date is None else date)  # ``date``: sent earlier
        message: JSON = {"message_id": self._next_message_id(chat_id), "date": sent_at,
                         "chat": chat, "from": sender, **content}
        if thread_id is not None:
            message["message_thread_id"] = thread_id
        if is_topic_message:
            message["is_topic_message"] = True
        if reply_to_message_id is not None:
            message["reply_to_message"] = {"message_id": reply_to_message_id,
                                           "date": message["date"], "chat": chat}
        elif is_topic_message and thread_id is not None:
            message["reply_to_message"] = {
                "message_id": thread_id, "date": message["date"], "chat": chat,
                "from": sender, "message_thread_id": thread_id, "is_topic_message": True,
                "forum_topic_created": {"name": f"Topic {thread_id}", "icon_color": 7322096}}
        self._user_messages.add((chat_id, message["message_id"]))
        self.raw_update({"message": message})
        return message

    def raw_update(self, update: JSON) -> None:
        """Queue any update dict as-is (an ``update_id`` is added only when missing)."""
        if "update_id" not in update:
            update = {"update_id": self._next_update_id, **update}
        uid = update["update_id"]
        ack_id = uid if isinstance(uid, int) else self._next_update_id
        self._next_update_id = max(self._next_update_id, ack_id) + 1
        self._pending.append((ack_id, update))
        self._wake("updates")

    @property
    def pending_updates(self) -> list[JSON]:
        """Queued updates the bot has not acknowledged yet (via ``offset``)."""
        return [u for _, u in self._pending]

    # ------------------------------------------------------------------ outbound

    def fail_next_send(self, *, chat_id: int | None = None, status: int = 429,
                       retry_after: int | None = None,
                       description: str = "Too Many Requests: retry after 1",
                       count: int = 1, text: str | None = None) -> None:
        """Make the next ``count`` sendMessage calls (to ``chat_id``, or any chat; with
        ``text`` in their text, when given: one message refused again and again) fail.

        Failures are consumed in the order scripted. A 429 without
        ``retry_after`` gets ``retry_after=1`` like Telegram's own answer.
        Note PTB raises RetryAfter only for a non-zero ``retry_after``.
        """
        self._send_failures.append(
            scripted_failure(chat_id, status, retry_after, description, count, text))

    def limit_group(self, chat_id: int, *, messages: int = 20, per: float = 60.0,
                    fixed: bool = False) -> None:
        """Telegram's flood control for a group: at most ``messages`` sends in any
        ``per`` seconds (about 20 a minute, all its topics together); one more is
        "429 Too Many Requests: retry after N", N the whole seconds until the oldest
        send of the window leaves it, as Telegram says it. Telegram does not document
        its counting: ``fixed`` counts in windows that start anew every ``per`` seconds
        instead (a burst each time the window resets), which a sender counting a
        sliding minute disagrees with."""
        self._group_limits[chat_id] = (messages, per, fixed)

    def stop_failing_sends(self) -> None:
        """Drop the scripted send failures not used up yet: sends are taken again."""
        self._send_failures.clear()

    def fail_next_edit(self, *, chat_id: int | None = None, status: int = 429,
                       retry_after: int | None = None,
                       description: str = "Too Many Requests: retry after 1",
                       count: int = 1) -> None:
        """Make the next ``count`` editMessageText calls (in ``chat_id``, or any) fail.

        As :meth:`fail_next_send`, for edits only: the two never take each other's failures.
        """
        self._edit_failures.append(
            scripted_failure(chat_id, status, retry_after, description, count))

    def fail_next_delete(self, *, chat_id: int | None = None, status: int = 400,
                         description: str = "Bad Request: message can't be deleted",
                         count: int = 1) -> None:
        """Make the next ``count`` deleteMessage calls (in ``chat_id``, or any) fail; by
        default as Telegram refuses to delete a message that is there but may not be
        deleted any more (older than 48 hours, or no rights in the group)."""
        self._delete_failures.append(scripted_failure(chat_id, status, None, description, count))

    def fail_next_poll(self, *, status: int = 409, description: str = CONFLICT,
                       count: int = 1) -> None:
        """Make the next ``count`` getUpdates calls fail (default: 409 Conflict)."""
        self._poll_failures.append(Failure(None, status, description, None, count))

    async def wait_for_sent(self, count: int, timeout: float = 30) -> list[SentRecord]:
        """Wait until at least ``count`` messages were sent; return all of them."""
        await self._wait_for("sent", count, timeout)
        return list(self.sent)

    async def wait_for_edits(self, count: int, timeout: float = 30) -> list[EditRecord]:
        """Wait until at least ``count`` edits succeeded; return all of them."""
        await self._wait_for("edits", count, timeout)
        return list(self.edits)


    # ------------------------------------------------------------------ HTTP

    async def _not_found(self, request: web.Request) -> web.Response:
        return error_response(404, "Not Found")

    async def _handle(self, request: web.Request) -> web.Response:
        token, method = request.match_info["token"], request.match_info["method"]
        if token != self.token:
            # as Telegram: a well-formed token it does not know is refused, a path that
            # holds no token at all is not found
            if _TOKEN_SHAPE.fullmatch(token):
                return error_response(401, "Unauthorized")
            return error_response(404, "Not Found")
        try:
            params = await read_params(request)
        except web.HTTPRequestEntityTooLarge:
            return error_response(413, "Request Entity Too Large")
        except ConnectionResetError:  # the client went away mid-request (a killed daemon)
            return error_response(400, "Bad Request: the request was cut off")
        self.calls.append((method, params))
        handler = self._methods.get(method.lower())
        if handler is None:
            return error_response(404, "Not Found")
        if method.lower() == "sendmessage":
            await self._sends_open.wait()
            if request.transport is None or request.transport.is_closing():
                # its bot died while the send was held: it never reached "Telegram"
                return error_response(500, "Internal Server Error: the client is gone")
            if (wait := self._flood_wait(params.get("chat_id"))) is not None:
                return error_response(429, f"Too Many Requests: retry after {wait}", wait)
        try:
            result = await handler(self, params)
        except ApiError as exc:
            return error_response(exc.status, exc.description, exc.retry_after)
        except (TypeError, ValueError) as exc:
            return error_response(400, f"Bad Request: {exc}")
        if isinstance(result, Described):
            return web.json_response({"ok": True, "result": result.result,
                                      "description": result.description})
        return web.json_response({"ok": True, "result": result})

    # ------------------------------------------------------------------ methods

    def _flood_wait(self, chat: object) -> int | None:
        """The seconds a send to a limited group must wait (None: it goes, and counts)."""
        try:
            chat_id = int(str(chat))
        except ValueError:
            return None
        if chat_id not in self._group_limits:
            return None
        allowed, per, fixed = self._group_limits[chat_id]
        now = time.monotonic()
        if fixed:  # windows of ``per`` seconds from the group's first send
            start = self._group_window_start.setdefault(chat_id, now)
            began = start + per * ((now - start) // per)
            sends = [t for t in self._group_sends.get(chat_id, []) if t >= began]
            self._group_sends[chat_id] = sends
            if len(sends) >= allowed:
                return max(1, math.ceil(began + per - now))
            sends.append(now)
            return None
        sends = [t for t in self._group_sends.get(chat_id, []) if now - t < per]
        self._group_sends[chat_id] = sends
        if len(sends) >= allowed:
            return max(1, math.ceil(per - (now - sends[0])))
        sends.append(now)
        return None

    async def _true(self, params: dict[str, Any]) -> bool:
        return True

    async def _send_chat_action(self, params: dict[str, Any]) -> bool:
        """As the Bot API: a chat id, one of its actions, and a thread only in a forum."""
        try:
            int(params.get("chat_id", ""))
        except (TypeError, ValueError):
            raise ApiError(400, "Bad Request: chat not found") from None
        if params.get("action") not in _CHAT_ACTIONS:
            raise ApiError(400, "Bad Request: wrong parameter action in request")
        thread = as_int(params.get("message_thread_id"))
        if thread is not None and (int(params["chat_id"]), thread) in self.deleted_threads:
            raise ApiError(400, "Bad Request: message thread not found")
        return True

    async def _get_updates(self, params: dict[str, Any]) -> list[JSON]:
        consume_failure(self._poll_failures, None)
        self._refuse_polling_under_webhook()
        allowed = as_json(params.get("allowed_updates"))
        if isinstance(allowed, list):
            self.allowed_updates = [str(a) for a in allowed]
        offset = as_int(params.get("offset"))
        limit = as_int(params.get("limit")) or 100
        timeout = float(params.get("timeout") or 0)
        if offset is not None and offset < 0:
            self._pending = self._pending[offset:]
        elif offset is not None:
            self._pending = [(i, u) for i, u in self._pending if i >= offset]
        loop = asyncio.get_running_loop()
        deadline = loop.time() + min(timeout, self.max_poll_hold)
        # as on Telegram, a newer getUpdates ends one still waiting with 409 Conflict
        self.polls += 1
        mine = self.polls
        self._poll_started.set()
        self._poll_started = asyncio.Event()
        while not self._pending and not self._closing.is_set():
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            newer = asyncio.ensure_future(self._poll_started.wait())
            changed = asyncio.ensure_future(self._updates_changed.wait())
            await asyncio.wait({newer, changed}, timeout=remaining,
                               return_when=asyncio.FIRST_COMPLETED)
            newer.cancel()
            changed.cancel()
            if self.polls != mine:
                self.conflicts += 1
                raise ApiError(409, CONFLICT)
            if not changed.done() or changed.cancelled():
                break  # the hold ran out
        # as Telegram does, updates of a type the bot did not ask for are not handed out
        self._pending = [(i, u) for i, u in self._pending if self._wanted(u)]
        batch = [u for _, u in self._pending[:limit]]
        if batch:
            self.handed_out += len(batch)
        return batch

    def _wanted(self, update: JSON) -> bool:
        kind = next((k for k in update if k != "update_id"), None)
        if kind is None:
            return True  # a bare or malformed update: the bot's parser decides
        if not self.allowed_updates:  # not given, or []: all but these
            return kind not in _NOT_BY_DEFAULT
        return kind in self.allowed_updates

    def hold_sends(self) -> None:
        """From now on sendMessage waits (the bot's replies hang) until :meth:`release_sends`.

        A held send is one that has not reached Telegram yet: if its bot is gone by the
        release, nothing is posted. (The other case — Telegram posted it, the bot died
        before hearing so — is the duplicate window the README documents.)"""
        self._sends_open.clear()

    def release_sends(self) -> None:
        self._sends_open.set()

    async def wait_handed_out(self, count: int, timeout: float = 30) -> None:
        """Until getUpdates has handed out at least ``count`` updates in all."""
        deadline = asyncio.get_running_loop().time() + timeout
        while self.handed_out < count:
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0:
                raise TimeoutError(f"only {self.handed_out} updates handed out")
            await asyncio.sleep(0.01)

    async def _set_my_commands(self, params: dict[str, Any]) -> bool:
        commands = as_json(params.get("commands"))
        if not isinstance(commands, list):
            raise ApiError(400, "Bad Request: can't parse commands JSON object")
        self.commands = commands
        return True

    async def _get_my_commands(self, params: dict[str, Any]) -> list[JSON]:
        return list(self.commands)

    async def _delete_my_commands(self, params: dict[str, Any]) -> bool:
        self.commands = []
        return True

    _methods = {
        "getme": BotAccount._get_me,
        "getwebhookinfo": BotWebhook._get_webhook_info,
        "setwebhook": BotWebhook._set_webhook,
        "deletewebhook": BotWebhook._delete_webhook,
        "getchat": BotAccount._get_chat,
        "getchatmember": BotAccount._get_chat_member,
        "getupdates": _get_updates,
        "sendmessage": BotMessages._send_message,
        "editmessagetext": BotMessages._edit_message_text,
        "editmessagereplymarkup": BotMessages._edit_message_reply_markup,
        "answercallbackquery": BotButtons._answer_callback_query,
        "deletemessage": BotMessages._delete_message,
        "setmycommands": _set_my_commands,
        "getmycommands": _get_my_commands,
        "deletemycommands": _delete_my_commands,
        "sendchataction": _send_chat_action,
        "getfile": BotFiles._get_file,
        "sendphoto": BotFiles._send_photo,
        "senddocument": BotFiles._send_document,
        "logout": _true,
        "close": _true,
    }

    # ------------------------------------------------------------------ helpers

    def _next_message_id(self, chat_id: int) -> int:
        self._message_ids[chat_id] = self._message_ids.get(chat_id, 0) + 1
        return self._message_ids[chat_id]

    def _wake(self, what: str) -> None:
        """Wake everyone waiting on ``what`` ("updates", "sent", "edits" or "sent_files")."""
        attr = f"_{what}_changed"
        event: asyncio.Event = getattr(self, attr)
        setattr(self, attr, asyncio.Event())
        event.set()

    async def _wait_for(self, what: str, count: int, timeout: float) -> None:
        """Until the list ``what`` ("sent", "edits" or "sent_files") holds ``count`` records."""
        records: list[Any] = getattr(self, what)
        deadline = asyncio.get_running_loop().time() + timeout
        while len(records) < count:
            remaining = deadline - asyncio.get_running_loop().time()
            event: asyncio.Event = getattr(self, f"_{what}_changed")
            try:
                await asyncio.wait_for(event.wait(), max(remaining, 0))
            except TimeoutError:
                raise TimeoutError(f"expected {count} {what} within {timeout}s, "
                                   f"got {len(records)}: {records!r}") from None


# ---------------------------------------------------------------------- module helpers

#: the actions sendChatAction accepts
_CHAT_ACTIONS = frozenset({"typing", "upload_photo", "record_video", "upload_video",
                           "record_voice", "upload_voice", "upload_document",
                           "choose_sticker", "find_location", "record_video_note",
                           "upload_video_note"})
