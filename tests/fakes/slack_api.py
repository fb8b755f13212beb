"""The fake Slack's Web API: how a call is read, authorised and answered, and the chat,
conversations, users and assistant methods.

As on Slack (docs.slack.dev, "Web API basics"): ``POST``/``GET /api/<method>`` with a
form body (objects such as ``blocks`` as JSON text), a JSON body (then the token must
be in the ``Authorization`` header) or a query string; every answer is HTTP 200 with
``ok`` true or false, plus the ``x-oauth-scopes`` and ``x-accepted-oauth-scopes``
headers. Only a scripted failure (``fail_next``) answers 429 or 5xx. A method is
``_api_<name with _ for .>`` on the mixins (``_api_chat_postMessage``); what is not
one is ``unknown_method``. Files' methods live in ``slack_files``,
``apps.connections.open`` in ``slack_socket``.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, cast

from aiohttp import web

from tests.fakes.slack_blocks import BlocksError, parse_blocks
from tests.fakes.slack_world import Call, Channel, SlackMessage, SlackState, rich_text

__all__ = ["ApiError", "Failure", "SlackApi", "as_bool"]

JSON = dict[str, Any]
Handler = Callable[[JSON], Awaitable[JSON]]

#: chat.postMessage refuses longer text (docs.slack.dev: "msg_too_long")
MAX_TEXT = 40_000
#: the methods an app-level token (xapp-) may call; every other one wants the bot token
APP_TOKEN_METHODS = frozenset({"apps.connections.open"})


class ApiError(Exception):
    """An ``{"ok": false, "error": ...}`` answer, with the extra fields Slack adds."""

    def __init__(self, error: str, **fields: Any) -> None:
        super().__init__(error)
        self.error = error
        self.fields = fields


@dataclass
class Failure:
    """A scripted answer for the next ``count`` calls of ``method`` (to ``channel``, with
    ``text`` in their text)."""

    method: str
    status: int
    error: str
    retry_after: float
    count: int
    channel: str | None
    text: str | None = None


class SlackApi(SlackState):
    """The Web API half of :class:`~tests.fakes.slack_server.FakeSlack`."""

    posts: list[Call]
    updates: list[Call]
    deletes: list[Call]
    statuses: list[Call]
    calls: list[Call]
    users: dict[str, JSON]
    max_page: int
    _failures: list[Failure]

    # ------------------------------------------------------------------ the call

    async def _handle_api(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        handler = cast(Handler | None, getattr(self, "_api_" + method.replace(".", "_"), None))
        params: JSON = {}
        try:
            params, body_token = await _read_params(request)
            if handler is None:
                raise ApiError("unknown_method")
            self._authorise(method, _bearer(request) or body_token)
            failure = self._scripted_failure(method, params)
            if failure is not None:
                self.calls.append(Call(method, params))
                return self._failure_response(failure)
            result = await handler(params)
        except ApiError as error:
            self.calls.append(Call(method, params))
            return self._json({"ok": False, "error": error.error, **error.fields}, method)
        self.calls.append(Call(method, params))
        self._wake()
        return self._json({"ok": True, **result}, method)

    def _authorise(self, method: str, token: str | None) -> None:
        """``not_authed`` without a token, ``invalid_auth`` with an unknown one,
        ``not_allowed_token_type`` with the other kind of this app's tokens."""
        if not token:
            raise ApiError("not_authed")
        if token not in (self.bot_token, self.app_token):
            raise ApiError("invalid_auth")
        wants_app = method in APP_TOKEN_METHODS
        if (token == self.app_token) != wants_app:
            raise ApiError("not_allowed_token_type")

    def _need(self, scope: str) -> None:
        """``missing_scope`` (with ``needed`` and ``provided``) unless the app has it."""
        if scope not in self.scopes:
            raise ApiError("missing_scope", needed=scope, provided=",".join(self.scopes))

    def _scripted_failure(self, method: str, params: JSON) -> Failure | None:
        channel = params.get("channel") or params.get("channel_id")
        for failure in self._failures:
            if (failure.method == method and failure.channel in (None, channel)
                    and (failure.text is None or failure.text in str(params.get("text")))):
                failure.count -= 1
                if failure.count <= 0:
                    self._failures.remove(failure)
                return failure
        return None

    def _failure_response(self, failure: Failure) -> web.Response:
        headers = self._headers(failure.method)
        if failure.status == 429:
            headers["Retry-After"] = str(math.ceil(failure.retry_after))
            body: JSON = {"ok": False, "error": "ratelimited"}
        else:
            body = {"ok": False, "error": failure.error}
        return web.json_response(body, status=failure.status, headers=headers)

    def _json(self, body: JSON, method: str) -> web.Response:
        return web.json_response(body, headers=self._headers(method))

    def _headers(self, method: str) -> dict[str, str]:
        return {"x-oauth-scopes": ",".join(self.scopes),
                "x-accepted-oauth-scopes": _accepted_scopes(method)}

    # ------------------------------------------------------------------ helpers

    def _conversation(self, params: JSON, key: str = "channel") -> Channel:
        """The conversation a call names: an id, a name (``general`` / ``#general``),
        or a user id (their DM with the bot), as chat.postMessage accepts."""
        wanted = params.get(key)
        if not isinstance(wanted, str) or not wanted:
            raise ApiError("channel_not_found")
        room = self.channels.get(wanted)
        if room is None:
            name = wanted.removeprefix("#")
            room = next((c for c in self.channels.values()
                         if c.name == name and c.kind != "im"), None)
        if room is None and wanted.startswith(("U", "W")):
            room = next((c for c in self.channels.values()
                         if c.kind == "im" and c.user == wanted), None)
        if room is None:
            raise ApiError("channel_not_found")
        return room

    def _readable(self, params: JSON) -> Channel:
        """A conversation whose history the bot may read (its kind's history scope, and
        membership, as for a bot on Slack)."""
        room = self._conversation(params)
        self._need(f"{room.scope_prefix}:history")
        if not room.member:
            raise ApiError("not_in_channel")
        return room

    def _content(self, params: JSON, *, required: bool) -> tuple[str | None, list[JSON] | None]:
        """``text`` and ``blocks`` as Slack checks them."""
        text = params.get("text")
        if text is not None and not isinstance(text, str):
            text = str(text)
        try:
            blocks = parse_blocks(params.get("blocks"))
        except BlocksError as error:
            raise ApiError(error.error, errors=error.errors,
                           response_metadata={"messages": [f"[ERROR] {e}"
                                                           for e in error.errors]}) from None
        if required and not text and not blocks and not params.get("attachments"):
            raise ApiError("no_text")
        if text is not None and len(text) > MAX_TEXT:
            raise ApiError("msg_too_long")
        return text, blocks

    # ------------------------------------------------------------------ auth, users

    async def _api_auth_test(self, params: JSON) -> JSON:
        return {"url": f"https://{self.team_domain}.slack.com/", "team": "Homing Test",
                "user": "homing", "team_id": self.team_id, "user_id": self.bot_user_id,
                "bot_id": self.bot_id, "is_enterprise_install": False}

    async def _api_users_info(self, params: JSON) -> JSON:
        self._need("users:read")
        user = self.users.get(str(params.get("user", "")))
        if user is None:
            raise ApiError("user_not_found")
        return {"user": user}

    async def _api_conversations_info(self, params: JSON) -> JSON:
        room = self._conversation(params)
        self._need(f"{room.scope_prefix}:read")
        return {"channel": room.info()}

    # ------------------------------------------------------------------ chat

    async def _api_chat_postMessage(self, params: JSON) -> JSON:
        self._need("chat:write")
        room = self._conversation(params)
        if not room.member:
            raise ApiError("not_in_channel")
        text, blocks = self._content(params, required=True)
        metadata = _metadata(params)
        thread_ts = params.get("thread_ts") or None
        if thread_ts is not None:
            parent = room.find(str(thread_ts))
            if parent is None:
                raise ApiError("invalid_thread_ts")
            # a reply's ts stands for its thread, as on Slack ("use its parent instead")
            thread_ts = parent.get("thread_ts") or parent["ts"]
        ts = self._next_ts()
        message = self._bot_message(ts, text or "", blocks=blocks, thread_ts=thread_ts)
        if thread_ts is not None and as_bool(params.get("reply_broadcast")):
            message["subtype"] = "thread_broadcast"
        self._append(room, message)
        self._bot_messages[(room.id, ts)] = SlackMessage(ts, room.id, thread_ts, text or "",
                                                         blocks, self.bot_user_id,
                                                         metadata=metadata)
        self.posts.append(Call("chat.postMessage", params))
        if self._subscribed_to_messages(room):
            self._push_event({**message, "channel": room.id, "event_ts": ts,
                              "channel_type": room.kind})
        return {"channel": room.id, "ts": ts, "message": message}

    async def _api_chat_update(self, params: JSON) -> JSON:
        self._need("chat:write")
        room = self._conversation(params)
        ts = str(params.get("ts") or "")
        message = room.find(ts)
        if message is None or message.get("subtype") == "tombstone":
            raise ApiError("message_not_found")
        if message.get("bot_id") != self.bot_id:
            raise ApiError("cant_update_message")
        text, blocks = self._content(params, required=False)
        if text is None and blocks is None:
            raise ApiError("no_text")
        metadata = _metadata(params, update=True)
        previous = dict(message)
        record = self._bot_messages[(room.id, ts)]
        if metadata is not None:  # left out, the message keeps its metadata; {} removes it
            record.metadata = metadata or None
        record.edits.append(record.text)
        if text is not None:
            message["text"] = record.text = text
        if blocks is not None:
            message["blocks"] = record.blocks = blocks
        elif text is not None and record.blocks is None:
            message["blocks"] = [rich_text(text)]
        message["edited"] = {"user": self.bot_user_id, "ts": self._next_ts()}
        self.updates.append(Call("chat.update", params))
        if self._subscribed_to_messages(room):
            event_ts = self._next_ts()
            self._push_event({"type": "message", "subtype": "message_changed", "hidden": True,
                              "message": dict(message), "channel": room.id,
                              "previous_message": previous, "event_ts": event_ts,
                              "ts": event_ts, "channel_type": room.kind})
        return {"channel": room.id, "ts": ts, "text": message["text"],
                "message": {k: v for k, v in message.items() if k != "edited"}}

    async def _api_chat_delete(self, params: JSON) -> JSON:
        self._need("chat:write")
        room = self._conversation(params)
        ts = str(params.get("ts") or "")
        message = room.find(ts)
        if message is None or message.get("subtype") == "tombstone":
            raise ApiError("message_not_found")
        if message.get("bot_id") != self.bot_id:
            raise ApiError("cant_delete_message")
        previous = dict(message)
        if message.get("reply_count"):
            # a parent with replies stays as a tombstone, as on Slack
            message.clear()
            message.update(previous, subtype="tombstone", text="This message was deleted.",
                           blocks=[])
        else:
            room.history.remove(message)
        self._bot_messages[(room.id, ts)].deleted = True
        self.deletes.append(Call("chat.delete", params))
        if self._subscribed_to_messages(room):
            event_ts = self._next_ts()
            self._push_event({"type": "message", "subtype": "message_deleted", "hidden": True,
                              "deleted_ts": ts, "channel": room.id,
                              "previous_message": previous, "event_ts": event_ts,
                              "ts": event_ts, "channel_type": room.kind})
        return {"channel": room.id, "ts": ts}

    # ------------------------------------------------------------------ conversations

    async def _api_conversations_history(self, params: JSON) -> JSON:
        room = self._readable(params)
        top = [m for m in room.history
               if m.get("thread_ts") in (None, m["ts"]) or m.get("subtype") == "thread_broadcast"]
        newest_first = sorted(_within(top, params), key=lambda m: _ts_key(m["ts"]), reverse=True)
        start = _cursor_ts(params.get("cursor"))
        if start is not None:
            newest_first = [m for m in newest_first if _ts_key(m["ts"]) <= start]
        page, rest = self._page(newest_first, params, default=100)
        page = self._with_metadata(room, page, params)
        answer: JSON = {"messages": page, "has_more": bool(rest), "pin_count": 0,
                        "channel_actions_ts": None, "channel_actions_count": 0}
        if rest:
            answer["response_metadata"] = {"next_cursor": _cursor(rest[0]["ts"])}
        return answer

    async def _api_conversations_replies(self, params: JSON) -> JSON:
        room = self._readable(params)
        parent = room.find(str(params.get("ts") or ""))
        if parent is None:
            raise ApiError("thread_not_found")
        if parent.get("thread_ts") not in (None, parent["ts"]):
            return {"messages": [parent], "has_more": False}
        replies = [m for m in room.history
                   if m.get("thread_ts") == parent["ts"] and m is not parent]
        replies = sorted(_within(replies, params), key=lambda m: _ts_key(m["ts"]))
        start = _cursor_ts(params.get("cursor"))
        if start is not None:
            replies = [m for m in replies if _ts_key(m["ts"]) >= start]
        # the parent leads every page, as on Slack, and counts against the limit
        page, rest = self._page(replies, params, default=1000, reserved=1)
        page = self._with_metadata(room, [parent, *page], params)
        answer: JSON = {"messages": page, "has_more": bool(rest)}
        if rest:
            answer["response_metadata"] = {"next_cursor": _cursor(rest[0]["ts"])}
        return answer

    def _with_metadata(self, room: Channel, page: list[JSON], params: JSON) -> list[JSON]:
        """``page`` as read, with each message's metadata only when the read asks for it
        (``include_all_metadata``): only the app's own posts have any."""
        if not as_bool(params.get("include_all_metadata")):
            return page
        shown = []
        for message in page:
            record = self._bot_messages.get((room.id, message["ts"]))
            shown.append({**message, "metadata": record.metadata}
                         if record is not None and record.metadata is not None else message)
        return shown

    def _page(self, messages: list[JSON], params: JSON, *, default: int,
              reserved: int = 0) -> tuple[list[JSON], list[JSON]]:
        """At most ``limit`` (and :attr:`max_page`) messages, and what is left."""
        try:
            limit = int(params.get("limit") or default)
        except (TypeError, ValueError):
            raise ApiError("invalid_limit") from None
        size = max(1, min(limit, self.max_page) - reserved)
        return messages[:size], messages[size:]

    # ------------------------------------------------------------------ assistant

    async def _api_assistant_threads_setStatus(self, params: JSON) -> JSON:
        self._need("chat:write")
        if not self.assistant:
            raise ApiError("no_permission")
        room = self._conversation(params, "channel_id")
        thread_ts = str(params.get("thread_ts") or "")
        if room.find(thread_ts) is None:
            raise ApiError("invalid_thread_ts")
        if "status" not in params:
            raise ApiError("invalid_arguments")
        self.statuses.append(Call("assistant.threads.setStatus", params))
        return {}


# ---------------------------------------------------------------------- module helpers


async def _read_params(request: web.Request) -> tuple[JSON, str | None]:
    """The call's parameters (query string and body) and a token given in them; a JSON
    body's token does not count, as on Slack (it must be in the header)."""
    params: JSON = dict(request.query)
    token = params.pop("token", None)
    if not request.body_exists:
        return params, token
    content_type = request.content_type
    if content_type == "application/json":
        try:
            body = await request.json()
        except ValueError:
            raise ApiError("invalid_json") from None
        if not isinstance(body, dict):
            raise ApiError("invalid_json")
        body.pop("token", None)
        params.update(body)
    elif content_type in ("application/x-www-form-urlencoded", "multipart/form-data"):
        form = await request.post()
        for key, value in form.items():
            if isinstance(value, str):
                params[key] = value
            elif isinstance(value, (bytes, bytearray)):
                params[key] = bytes(value)
            else:
                params[key] = value.file.read()
        token = params.pop("token", None) or token
    else:
        raise ApiError("invalid_post_type")
    return params, token


def _metadata(params: JSON, *, update: bool = False) -> JSON | None:
    """A post's or an edit's ``metadata`` as Slack checks it (docs.slack.dev, "Using
    message metadata"): JSON text (form bodies) or an object, else
    ``invalid_metadata_format``; a non-empty string ``event_type`` and an object
    ``event_payload``, else ``invalid_metadata_schema``. That ``event_type`` be an
    alphanumeric, human-readable name is Slack's advice, "not enforced programmatically"
    ("Designing metadata event schema"), nor here. None when there is none; ``{}`` from
    an edit (``update``) removes what the message had."""
    raw = params.get("metadata")
    if raw is None:
        return None
    metadata = json_text(raw)
    if not isinstance(metadata, dict):
        raise ApiError("invalid_metadata_format")
    if update and not metadata:
        return {}
    event_type, payload = metadata.get("event_type"), metadata.get("event_payload")
    if not isinstance(event_type, str) or not event_type.strip():
        raise ApiError("invalid_metadata_schema")
    if not isinstance(payload, dict):
        raise ApiError("invalid_metadata_schema")
    return {"event_type": event_type, "event_payload": payload}


def _bearer(request: web.Request) -> str | None:
    header = request.headers.get("Authorization", "")
    return header[7:].strip() or None if header.startswith("Bearer ") else None


def as_bool(value: Any) -> bool:
    """A boolean parameter: JSON true, or form text "true"/"1"."""
    if isinstance(value, str):
        return value.lower() in ("true", "1")
    return bool(value)


def _ts_key(ts: str) -> tuple[int, int]:
    seconds, _, micros = ts.partition(".")
    return int(seconds), int(micros.ljust(6, "0")[:6])


def _within(messages: list[JSON], params: JSON) -> list[JSON]:
    """Those between ``oldest`` and ``latest`` (ends included only when ``inclusive``)."""
    inclusive = as_bool(params.get("inclusive"))
    oldest, latest = params.get("oldest"), params.get("latest")
    kept = []
    for message in messages:
        key = _ts_key(message["ts"])
        if oldest and (key < _ts_key(str(oldest)) or (key == _ts_key(str(oldest))
                                                       and not inclusive)):
            continue
        if latest and (key > _ts_key(str(latest)) or (key == _ts_key(str(latest))
                                                       and not inclusive)):
            continue
        kept.append(message)
    return kept


def _cursor(ts: str) -> str:
    """An opaque cursor shaped like Slack's (base64 of ``next_ts:<ts digits>``)."""
    return base64.b64encode(f"next_ts:{ts.replace('.', '')}".encode()).decode()


def _cursor_ts(cursor: Any) -> tuple[int, int] | None:
    if not cursor:
        return None
    try:
        kind, _, digits = base64.b64decode(str(cursor), validate=True).decode().partition(":")
    except (binascii.Error, UnicodeDecodeError):
        raise ApiError("invalid_cursor") from None
    if kind != "next_ts" or not digits.isdigit() or len(digits) <= 6:
        raise ApiError("invalid_cursor")
    return int(digits[:-6]), int(digits[-6:])


def _accepted_scopes(method: str) -> str:
    """What ``x-accepted-oauth-scopes`` says the method takes."""
    return {"chat.postMessage": "chat:write", "chat.update": "chat:write",
            "chat.delete": "chat:write", "assistant.threads.setStatus": "chat:write",
            "conversations.history": "channels:history,groups:history,mpim:history,im:history",
            "conversations.replies": "channels:history,groups:history,mpim:history,im:history",
            "conversations.info": "channels:read,groups:read,mpim:read,im:read",
            "users.info": "users:read", "files.getUploadURLExternal": "files:write",
            "files.completeUploadExternal": "files:write", "files.info": "files:read",
            "apps.connections.open": "connections:write"}.get(method, "")


def json_text(value: Any) -> Any:
    """A parameter that may come as JSON text (form bodies) or as JSON (JSON bodies)."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value
