"""The fake Discord's REST API: the handlers under ``/api/v10``, the checks Discord makes
on a message post, edit or delete, and the errors it answers with.

Kept apart from the gateway and from the world the tests build because it holds the
rules of the HTTP side — authorization, content limits, locked and archived threads,
replies, nonces, history paging, scripted failures — that a test of the adapter's
sending relies on. Mixed into :class:`~tests.fakes.discord_server.FakeDiscord`, which
holds the channels, messages and records the handlers read and write.
"""

from __future__ import annotations

import json
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from aiohttp import web

from tests.fakes.discord_components import component_errors
from tests.fakes.discord_files import PayloadTooLarge, SentFile, read_message_payload

__all__ = ["MAX_MESSAGE_LENGTH", "ApiError", "DiscordRest", "EditRecord", "Failure",
           "SentRecord", "check_components", "check_content", "json_response", "now_iso",
           "public_message"]

JSON = dict[str, Any]

MAX_MESSAGE_LENGTH = 2000
SEND_MESSAGES = 1 << 11
SEND_MESSAGES_IN_THREADS = 1 << 38
NONCE_WINDOW_SECONDS = 300


@dataclass
class SentRecord:
    """One successful ``POST /channels/{id}/messages``, as the fake received it."""

    channel_id: int
    content: str | None
    message_reference: int | None  # the referenced message id, if any
    nonce: str | int | None
    message_id: int  # the id the fake assigned
    raw: JSON = field(repr=False)  # the JSON payload (``payload_json`` for multipart)
    files: list[str] = field(default_factory=list)  # uploaded file names (multipart)
    attachments: list[SentFile] = field(default_factory=list)  # the uploads, bytes and all


@dataclass
class EditRecord:
    """One successful ``PATCH /channels/{id}/messages/{message_id}``."""

    channel_id: int
    message_id: int
    content: str  # the message's content after the edit
    payload: JSON = field(repr=False)  # the JSON payload as sent


@dataclass
class Failure:
    """A scripted error answer for the next matching message post or edit."""

    channel_id: int | None
    status: int
    retry_after: float
    code: int
    message: str
    remaining: int
    #: matching calls let through before the failures start (part two of a message)
    skip: int = 0
    #: only a call whose content holds this fails (None: any call)
    content: str | None = None


class ApiError(Exception):
    """Raised inside a REST handler to answer with a Discord error body."""

    def __init__(self, status: int, code: int, message: str, *,
                 extra: JSON | None = None, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message
        self.extra = extra or {}
        self.headers = headers or {}


class DiscordRest:
    """The REST half of :class:`~tests.fakes.discord_server.FakeDiscord`.

    Builds messages with FakeDiscord's ``_snowflake``, ``_message`` and ``_reference``,
    and wakes its waiters with ``_wake``.
    """

    # the state FakeDiscord keeps for it
    port: int
    token: str
    bot_id: int
    bot_user: JSON
    gateway_url: str
    sent: list[SentRecord]
    edits: list[EditRecord]
    deleted: set[tuple[int, int]]
    requests: list[tuple[str, str, int]]
    typing: list[int]
    nonce_hits: int
    history_requests: int
    _channels: dict[int, JSON]
    _messages: dict[int, JSON]
    _post_failures: list[Failure]
    _edit_failures: list[Failure]
    _post_limits: dict[int, tuple[int, float]]
    _post_times: dict[int, deque[float]]
    upload_limit: int
    #: the bot's standing in the channel (discord_guild): 403 when it may not view or do
    _check_access: Callable[..., None]

    # ------------------------------------------------------------------ handlers

    @web.middleware
    async def _rest_middleware(self, request: web.Request, handler: Any) -> web.StreamResponse:
        try:
            # interaction callbacks are authorised by the interaction's token, as on Discord
            if request.path.startswith("/api/") and "/interactions/" not in request.path \
                    and request.headers.get("Authorization") != f"Bot {self.token}":
                raise ApiError(401, 0, "401: Unauthorized")
            response = await handler(request)
        except ApiError as exc:
            response = json_response({"code": exc.code, "message": exc.message,
                                      **exc.extra}, exc.status, exc.headers)
        if request.path.startswith("/api/"):
            self.requests.append((request.method, request.path, response.status))
        return response

    async def _not_found(self, request: web.Request) -> web.Response:
        raise ApiError(404, 0, "404: Not Found")

    async def _get_me(self, request: web.Request) -> web.Response:
        return json_response(self.bot_user)

    async def _get_gateway(self, request: web.Request) -> web.Response:
        return json_response({"url": self.gateway_url})

    async def _get_gateway_bot(self, request: web.Request) -> web.Response:
        return json_response({"url": self.gateway_url, "shards": 1,
                              "session_start_limit": {"total": 1000, "remaining": 1000,
                                                      "reset_after": 0, "max_concurrency": 1}})

    async def _typing(self, request: web.Request) -> web.Response:
        """POST /channels/{id}/typing: 204, as Discord answers (404 for an unknown one)."""
        channel_id = int(request.match_info["channel_id"])
        self._existing_channel(channel_id)
        self.typing.append(channel_id)
        return web.Response(status=204)

    async def _get_channel(self, request: web.Request) -> web.Response:
        channel = self._existing_channel(int(request.match_info["channel_id"]))
        self._check_access(channel)
        return json_response(channel)

    async def _create_dm(self, request: web.Request) -> web.Response:
        recipient = int((await request.json())["recipient_id"])
        for channel in self._channels.values():
            if channel["type"] == 1 and int(channel["recipients"][0]["id"]) == recipient:
                return json_response(channel)
        channel_id = self._snowflake()
        self._channels[channel_id] = {
            "id": str(channel_id), "type": 1, "last_message_id": None,
            "recipients": [{"id": str(recipient), "username": f"user{recipient}",
                            "discriminator": "0", "global_name": None, "avatar": None}]}
        return json_response(self._channels[channel_id])

    async def _post_message(self, request: web.Request) -> web.Response:
        channel_id = int(request.match_info["channel_id"])
        payload, files = await self._read_payload(request)
        _consume_failure(self._post_failures, channel_id, str(payload.get("content") or ""))
        channel = self._existing_channel(channel_id)
        self._check_access(channel, SEND_MESSAGES_IN_THREADS if "thread_metadata" in channel
                           else SEND_MESSAGES)
        metadata = _unlocked_thread_metadata(channel)
        content = payload.get("content")
        content = None if content is None else str(content)
        components = check_components(payload.get("components"))
        check_content(content, has_more=bool(payload.get("embeds") or files or components
                                             or payload.get("sticker_ids")))
        reference = payload.get("message_reference") or None
        ref_id = int(reference["message_id"]) if reference and reference.get("message_id") else None
        if ref_id is not None and reference.get("fail_if_not_exists", True):
            known = self._messages.get(ref_id)
            if known is None or int(known["channel_id"]) != channel_id:
                raise _form_error("message_reference", "MESSAGE_REFERENCE_UNKNOWN_MESSAGE",
                                  "Unknown message")
        nonce = payload.get("nonce")
        if nonce is not None and len(str(nonce)) > 25:
            raise _form_error("nonce", "BASE_TYPE_MAX_LENGTH", "Must be 25 or fewer in length.")
        if nonce is not None and payload.get("enforce_nonce"):
            # as Discord: the same author's message with this nonce in the last few minutes
            # is returned, and no second one is made
            for earlier in reversed(self._messages.values()):
                if (earlier.get("nonce") == nonce and earlier["author"]["id"] == self.bot_user["id"]
                        and int(earlier["channel_id"]) == channel_id
                        and time.time() - earlier["_created"] < NONCE_WINDOW_SECONDS):
                    self.nonce_hits += 1
                    return json_response(public_message(earlier))
        limit_headers = self._count_post(channel_id)
        if metadata is not None:
            metadata["archived"] = False  # posting reopens an archived (unlocked) thread

        message = self._message(channel_id, content or "", self.bot_user, mentions=[])
        message["embeds"] = payload.get("embeds") or []
        message["components"] = components
        message["attachments"] = self._attachments_from(channel_id, files)
        if payload.get("nonce") is not None:
            message["nonce"] = payload["nonce"]
        if ref_id is not None:
            message["type"] = 19
            message["message_reference"] = self._reference(channel_id, ref_id)
            message["referenced_message"] = self._messages.get(ref_id)
        message["_created"] = time.time()
        self._messages[int(message["id"])] = message
        self.sent.append(SentRecord(channel_id=channel_id, content=content,
                                    message_reference=ref_id, nonce=payload.get("nonce"),
                                    message_id=int(message["id"]), raw=payload,
                                    files=[f.filename for f in files], attachments=files))
        self._wake("sent")
        return json_response(public_message(message), headers=limit_headers)

    def _count_post(self, channel_id: int) -> dict[str, str]:
        """A post against its channel's rate limit (``limit_posts``), as Discord counts it:
        the bucket's headers, or a 429 when the post is one too many."""
        limit = self._post_limits.get(channel_id)
        if limit is None:
            return {}
        posts, per = limit
        now = time.monotonic()
        times = self._post_times.setdefault(channel_id, deque())
        while times and now - times[0] >= per:
            times.popleft()
        if len(times) >= posts:
            reset = per - (now - times[0])
            raise ApiError(429, 0, "You are being rate limited.",
                           extra={"retry_after": reset, "global": False},
                           headers={"Via": "1.1 google", "Retry-After": str(max(1, round(reset))),
                                    **_bucket(channel_id, posts, 0, reset)})
        times.append(now)
        return _bucket(channel_id, posts, posts - len(times), per - (now - times[0]))

    async def _edit_message(self, request: web.Request) -> web.Response:
        """PATCH a message: the bot's own only; the fields it sends replace the old ones."""
        channel_id = int(request.match_info["channel_id"])
        payload, files = await self._read_payload(request)
        _consume_failure(self._edit_failures, channel_id)
        metadata = _unlocked_thread_metadata(self._existing_channel(channel_id))
        message = self._existing_message(channel_id, int(request.match_info["message_id"]))
        if message["author"]["id"] != self.bot_user["id"]:
            raise ApiError(403, 50005, "Cannot edit a message authored by another user")
        content = str(payload["content"] or "") if "content" in payload else message["content"]
        embeds = (payload["embeds"] or []) if "embeds" in payload else message["embeds"]
        kept = {str(a.get("id")) for a in payload.get("attachments") or []}
        attachments = message["attachments"] if "attachments" not in payload \
            else [a for a in message["attachments"] if a["id"] in kept]
        components = check_components(payload["components"]) if "components" in payload \
            else message["components"]
        check_content(content, has_more=bool(embeds or attachments or files or components
                                             or message.get("sticker_items")))
        if metadata is not None:
            metadata["archived"] = False  # as a post, an edit reopens an archived thread

        attachments = attachments + self._attachments_from(channel_id, files)
        message.update(content=content, embeds=embeds, attachments=attachments,
                       components=components, edited_timestamp=now_iso())
        self.edits.append(EditRecord(channel_id=channel_id, message_id=int(message["id"]),
                                     content=content, payload=payload))
        self._wake("edits")
        return json_response(public_message(message))

    async def _delete_message(self, request: web.Request) -> web.Response:
        """DELETE a message: 204. Others' messages too (the bot's role may manage
        messages), except in a DM, where only one's own can go."""
        channel_id = int(request.match_info["channel_id"])
        channel = self._existing_channel(channel_id)
        message = self._existing_message(channel_id, int(request.match_info["message_id"]))
        if channel["type"] == 1 and message["author"]["id"] != self.bot_user["id"]:
            raise ApiError(403, 50003, "Cannot execute action on a DM channel")
        del self._messages[int(message["id"])]
        self.deleted.add((channel_id, int(message["id"])))
        return web.Response(status=204)

    async def _get_messages(self, request: web.Request) -> web.Response:
        """A channel's history, as Discord answers it: newest first; ``after`` gives the
        ``limit`` (1-100, default 50) messages right after that id, ``before`` the ones
        right before it."""
        channel_id = int(request.match_info["channel_id"])
        self._existing_channel(channel_id)
        try:
            limit = int(request.query.get("limit", "50"))
        except ValueError:
            raise _form_error("limit", "NUMBER_TYPE_COERCE", "Value is not int.") from None
        if not 1 <= limit <= 100:
            raise _form_error("limit", "NUMBER_TYPE_MAX", "limit must be 1 to 100.")
        ids = sorted(i for i, m in self._messages.items() if int(m["channel_id"]) == channel_id)
        if "after" in request.query:
            ids = [i for i in ids if i > int(request.query["after"])][:limit]
        else:
            if "before" in request.query:
                ids = [i for i in ids if i < int(request.query["before"])]
            ids = ids[-limit:]
        self.history_requests += 1
        return json_response([public_message(self._messages[i]) for i in reversed(ids)])

    # ------------------------------------------------------------------ helpers

    async def _read_payload(self, request: web.Request) -> tuple[JSON, list[SentFile]]:
        """The message payload and its files; over the upload limit, Discord's 413."""
        try:
            return await read_message_payload(request, self.upload_limit)
        except PayloadTooLarge:
            raise ApiError(413, 40005, "Request entity too large") from None

    def _existing_channel(self, channel_id: int) -> JSON:
        channel = self._channels.get(channel_id)
        if channel is None:
            raise ApiError(404, 10003, "Unknown Channel")
        return channel

    def _existing_message(self, channel_id: int, message_id: int) -> JSON:
        message = self._messages.get(message_id)
        if message is None or int(message["channel_id"]) != channel_id:
            raise ApiError(404, 10008, "Unknown Message")
        return message


# ---------------------------------------------------------------------- module helpers

def public_message(message: JSON) -> JSON:
    """A message as the API shows it (without the fake's own bookkeeping)."""
    return {k: v for k, v in message.items() if not k.startswith("_")}


def json_response(data: Any, status: int = 200,
                  headers: dict[str, str] | None = None) -> web.Response:
    """A JSON response with Content-Type exactly ``application/json`` (no charset)."""
    return web.Response(body=json.dumps(data).encode(), status=status,
                        headers={**(headers or {}), "Content-Type": "application/json"})


def _bucket(channel_id: int, posts: int, remaining: int, reset: float) -> dict[str, str]:
    """Discord's rate limit headers for a channel's posts."""
    return {"X-RateLimit-Limit": str(posts), "X-RateLimit-Remaining": str(remaining),
            "X-RateLimit-Reset-After": f"{reset:.3f}", "X-RateLimit-Bucket": f"posts-{channel_id}",
            "X-RateLimit-Scope": "user"}


def _consume_failure(failures: list[Failure], channel_id: int, content: str = "") -> None:
    """Raise the first scripted failure for ``channel_id`` (or any channel) and ``content``
    (when the failure names one), if any."""
    for failure in failures:
        if failure.content is not None and failure.content not in content:
            continue
        if failure.channel_id is None or failure.channel_id == channel_id:
            if failure.skip > 0:
                failure.skip -= 1
                return
            failure.remaining -= 1
            if failure.remaining <= 0:
                failures.remove(failure)
            if failure.status == 429:
                raise ApiError(429, failure.code, failure.message,
                               extra={"retry_after": failure.retry_after, "global": False},
                               headers={"Via": "1.1 google",
                                        "Retry-After": str(max(1, round(failure.retry_after))),
                                        "X-RateLimit-Scope": "user"})
            raise ApiError(failure.status, failure.code, failure.message)


def check_components(components: Any) -> list[JSON]:
    """A message's components (none: ``[]``), or Discord's 400 Invalid Form Body."""
    errors = component_errors(components)
    if errors is not None:
        raise ApiError(400, 50035, "Invalid Form Body", extra={"errors": errors})
    return list(components or [])


def _unlocked_thread_metadata(channel: JSON) -> JSON | None:
    """A thread's metadata (None for a channel); a locked thread takes no posts or edits."""
    metadata = channel.get("thread_metadata")
    if metadata is not None and metadata["locked"]:
        raise ApiError(403, 50083, "Thread is archived")
    return metadata


def check_content(content: str | None, *, has_more: bool) -> None:
    """A message needs content or something else (``has_more``), and at most 2000 chars."""
    if not content and not has_more:
        raise ApiError(400, 50006, "Cannot send an empty message")
    if content is not None and len(content) > MAX_MESSAGE_LENGTH:
        raise _form_error("content", "BASE_TYPE_MAX_LENGTH",
                          f"Must be {MAX_MESSAGE_LENGTH} or fewer in length.")


def _form_error(key: str, code: str, message: str) -> ApiError:
    return ApiError(400, 50035, "Invalid Form Body",
                    extra={"errors": {key: {"_errors": [{"code": code, "message": message}]}}})


def now_iso() -> str:
    """The current time as Discord's ISO 8601 timestamps."""
    return datetime.now(UTC).isoformat()
