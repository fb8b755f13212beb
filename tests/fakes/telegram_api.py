"""The Bot API's envelope for the fake Telegram server: a call's parameters in, its
error answers out, and the failures a test scripts.

Kept apart from the methods because every method shares it: how PTB's form-encoded,
multipart or JSON bodies become parameters (and how their values are read), and the
``{"ok": false, "error_code", "description", "parameters"}`` answer a handler's
:class:`ApiError` or a scripted :class:`Failure` turns into.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from aiohttp import web

__all__ = ["ApiError", "Failure", "as_bool", "as_int", "as_json", "consume_failure",
           "error_response", "message_key", "read_params", "scripted_failure"]

JSON = dict[str, Any]


@dataclass
class Failure:
    """A scripted error answer, consumed by the next matching call."""

    chat_id: int | None
    status: int
    description: str
    retry_after: int | None
    remaining: int
    #: only a call whose text holds this fails (None: any call)
    text: str | None = None


class ApiError(Exception):
    """Raised inside a handler to answer with a Bot API error."""

    def __init__(self, status: int, description: str, retry_after: int | None = None) -> None:
        super().__init__(description)
        self.status = status
        self.description = description
        self.retry_after = retry_after


def error_response(status: int, description: str,
                   retry_after: int | None = None) -> web.Response:
    """A Bot API error answer, with the real HTTP status."""
    body: JSON = {"ok": False, "error_code": status, "description": description}
    if retry_after is not None:
        body["parameters"] = {"retry_after": retry_after}
    return web.json_response(body, status=status)


def scripted_failure(chat_id: int | None, status: int, retry_after: int | None,
                     description: str, count: int, text: str | None = None) -> Failure:
    """A scripted failure; a 429 without ``retry_after`` gets 1, as Telegram's own answer."""
    if status == 429 and retry_after is None:
        retry_after = 1
    return Failure(chat_id, status, description, retry_after, count, text)


def consume_failure(failures: list[Failure], chat_id: int | None, text: str = "") -> None:
    """Raise the first scripted failure matching ``chat_id`` (or any chat) and ``text``
    (when the failure names one), if any."""
    for failure in failures:
        if failure.text is not None and failure.text not in text:
            continue
        if failure.chat_id is None or failure.chat_id == chat_id:
            failure.remaining -= 1
            if failure.remaining <= 0:
                failures.remove(failure)
            raise ApiError(failure.status, failure.description, failure.retry_after)


async def read_params(request: web.Request) -> dict[str, Any]:
    """Query string plus body: form-encoded, multipart (files as FileField) or JSON."""
    params: dict[str, Any] = dict(request.query)
    if not request.body_exists:
        return params
    if request.content_type == "application/json":
        body = await request.json()
        params.update({k: v if isinstance(v, str) else json.dumps(v) for k, v in body.items()})
    else:
        params.update(await request.post())
    return params


def as_int(value: Any) -> int | None:
    if value is None or value == "":
        return None
    return int(value)


def as_bool(value: Any) -> bool:
    return str(value).lower() in ("true", "1")


def as_json(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except ValueError:
        return None


def message_key(params: dict[str, Any]) -> tuple[int, int]:
    """(chat id, message id) of the message an edit or delete names."""
    try:
        chat_id = int(params.get("chat_id", ""))
    except (TypeError, ValueError):
        raise ApiError(400, "Bad Request: chat not found") from None
    message_id = as_int(params.get("message_id"))
    if not message_id:
        raise ApiError(400, "Bad Request: message identifier is not specified")
    return chat_id, message_id
