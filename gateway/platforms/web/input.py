"""What the web chat reads from a request before acting on it, checked once for every
route: a JSON body (through the gateway's one decoder, gateway/inbound/checks.py) and
a conversation id, whether it comes in the socket's query or in a REST path."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from aiohttp import web

from gateway.inbound.checks import InputRefused, load_json

Error = Callable[[int, str], web.HTTPException]

CONVERSATION_RULE = "conversation ids are 1-64 letters, digits, '-' or '_'"
_CONVERSATION_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")


def valid_conversation(conversation: str) -> bool:
    """The whole id matches (``re.match`` with ``$`` would let a trailing newline in)."""
    return _CONVERSATION_ID.fullmatch(conversation) is not None


async def json_object(request: web.Request, error: Error) -> dict[str, Any]:
    """A request body that must be a JSON object (400 naming what is wrong otherwise)."""
    try:
        body = load_json(await request.read())
    except InputRefused as exc:
        raise error(400, f"body must be a JSON object; {exc}") from None
    if not isinstance(body, dict):
        raise error(400, "body must be a JSON object")
    return body
