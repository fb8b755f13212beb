"""Request validation for the fake OpenAI server: what a strict real server answers 400 to.

Kept apart from the server because it is a rule book of its own (roles, tool-call
pairing, the strictest chat templates), read and changed without the HTTP side.
:func:`validate` raises :class:`BadRequest` with the reason the server sends back.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["ROLES", "BadRequest", "validate"]

JSON = dict[str, Any]

ROLES = ("system", "user", "assistant", "tool", "developer")


class BadRequest(Exception):
    """Raised by validation: answer 400 with this reason."""


def validate(body: object, *, strict: bool = True, streams: bool = True) -> None:
    """Raise :class:`BadRequest` where a strict real server would answer 400
    (``strict``: also where the strictest chat templates would; ``streams``: False for
    a server or model that cannot stream, as OpenAI's o1 could not)."""
    if not isinstance(body, dict):
        raise BadRequest("We could not parse the JSON body of your request: "
                         "expected a JSON object.")
    if not isinstance(body.get("model"), str) or not body["model"]:
        raise BadRequest("you must provide a model parameter")
    _validate_streaming(body, streams)
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise BadRequest("Missing required parameter: 'messages' (must be a list).")
    if not messages:
        raise BadRequest("Invalid 'messages': empty array. Expected an array with "
                         "minimum length 1, but got an empty array instead.")
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            raise BadRequest(f"Invalid type for 'messages[{i}]': expected an object.")
        role = message.get("role")
        if role not in ROLES:
            raise BadRequest(f"Invalid value for 'messages[{i}].role': {role!r}. "
                             f"Supported values are: {', '.join(ROLES)}.")
    _validate_tool_pairing(messages)
    if strict:
        _validate_template(messages)


def _validate_streaming(body: JSON, streams: bool) -> None:
    """``stream`` is a boolean (true only where the server streams); ``stream_options``
    an object, and only with a stream."""
    stream = body.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise BadRequest("Invalid type for 'stream': expected a boolean.")
    if stream and not streams:
        raise BadRequest("Unsupported value: 'stream' does not support true with this "
                         "model. Supported values are: false.")
    options = body.get("stream_options")
    if options is None:
        return
    if not isinstance(options, dict):
        raise BadRequest("Invalid type for 'stream_options': expected an object.")
    if not stream:
        raise BadRequest("The 'stream_options' parameter is only allowed when 'stream' "
                         "is enabled.")
    if not isinstance(options.get("include_usage", False), bool):
        raise BadRequest("Invalid type for 'stream_options.include_usage': expected a "
                         "boolean.")


#: how a chat template's refusal reaches a client: llama.cpp passes the Jinja
#: exception through, with the template's text around it (Homing must not show this)
_TEMPLATE_TRACE = ("{message} at row 1, column 2147:\n{{%- for message in loop_messages "
                   "%}}\n    {{%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) "
                   "%}}\n        {{{{- raise_exception('")


def _validate_template(messages: list[JSON]) -> None:
    """What the strictest common chat templates (Mistral-Nemo, Gemma-2, ...) refuse:
    a system message anywhere but first, and user and assistant turns that do not
    alternate — counting only assistant messages without tool calls, as they do —
    or do not start with the user."""
    for i, message in enumerate(messages):
        if message["role"] in ("system", "developer") and i != 0:
            raise BadRequest(_TEMPLATE_TRACE.format(
                message="Jinja Exception: System message must be at the beginning."))
    turns = [m["role"] for m in messages
             if m["role"] == "user" or (m["role"] == "assistant" and not m.get("tool_calls"))]
    for i, role in enumerate(turns):
        if role != ("user" if i % 2 == 0 else "assistant"):
            raise BadRequest(_TEMPLATE_TRACE.format(
                message="Jinja Exception: Conversation roles must alternate "
                        "user/assistant/user/assistant/..."))
    if messages[-1]["role"] not in ("user", "tool"):
        raise BadRequest(_TEMPLATE_TRACE.format(
            message="Jinja Exception: the conversation must end with a user message or "
                    "tool results"))


def _validate_tool_pairing(messages: list[JSON]) -> None:
    """Every tool result answers a call of the assistant message right before it,
    and every such call is answered before the next non-tool message."""
    declared: set[str] = set()  # every tool_call id declared so far
    pending: dict[str, int] = {}  # id -> index of the assistant message still awaiting it
    for i, message in enumerate(messages):
        role = message["role"]
        if role == "tool":
            call_id = message.get("tool_call_id")
            if not isinstance(call_id, str) or not call_id:
                raise BadRequest(f"Missing required parameter: 'messages[{i}].tool_call_id'.")
            if call_id not in declared:
                raise BadRequest(
                    f"Invalid parameter: messages[{i}] with role 'tool' has tool_call_id "
                    f"{call_id!r}, which no preceding assistant message's 'tool_calls' "
                    "declared.")
            if call_id not in pending:
                raise BadRequest(
                    f"Invalid parameter: messages[{i}] with role 'tool' (tool_call_id "
                    f"{call_id!r}) must directly follow the assistant message with that "
                    "'tool_calls' entry, and answer it only once.")
            del pending[call_id]
            continue
        _check_answered(pending)
        pending.clear()
        if role == "assistant" and message.get("tool_calls"):
            for call_id in _tool_call_ids(message, i):
                declared.add(call_id)
                pending[call_id] = i
        elif role == "assistant" and not isinstance(message.get("content"), str | list):
            raise BadRequest(f"Invalid value for 'messages[{i}].content': expected a "
                             "string (content is required unless tool_calls is set).")
        elif role == "user" and isinstance(message.get("content"), list):
            _check_parts(message["content"], i)
    _check_answered(pending)


_DATA_IMAGE = re.compile(r"^data:image/[\w.+-]+;base64,[A-Za-z0-9+/=]+$")


def _check_parts(parts: list[object], i: int) -> None:
    """User content parts as OpenAI takes them: text, or an image by URL or data URL."""
    for j, part in enumerate(parts):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text" and isinstance(part.get("text"), str):  # type: ignore[union-attr]
            continue
        if kind == "image_url":
            image = part.get("image_url")  # type: ignore[union-attr]
            url = image.get("url") if isinstance(image, dict) else None
            if isinstance(url, str) and (url.startswith(("http://", "https://"))
                                         or _DATA_IMAGE.match(url)):
                continue
            raise BadRequest(f"Invalid 'messages[{i}].content[{j}].image_url.url': expected "
                             "a URL or a base64-encoded data URL of an image.")
        raise BadRequest(f"Invalid value: 'messages[{i}].content[{j}].type': expected one "
                         "of 'text', 'image_url' (with the fields that type needs).")


def _check_answered(pending: dict[str, int]) -> None:
    if pending:
        index = next(iter(pending.values()))
        raise BadRequest(
            "An assistant message with 'tool_calls' must be followed by tool messages "
            f"responding to each 'tool_call_id'. The following tool_call_ids of "
            f"messages[{index}] did not have response messages: {', '.join(pending)}")


def _tool_call_ids(message: JSON, i: int) -> list[str]:
    calls = message["tool_calls"]
    if not isinstance(calls, list):
        raise BadRequest(f"Invalid type for 'messages[{i}].tool_calls': expected an array.")
    ids = []
    for j, call in enumerate(calls):
        where = f"messages[{i}].tool_calls[{j}]"
        if not isinstance(call, dict) or not isinstance(call.get("id"), str) or not call["id"]:
            raise BadRequest(f"Missing required parameter: '{where}.id'.")
        function = call.get("function")
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise BadRequest(f"Missing required parameter: '{where}.function.name'.")
        if not isinstance(function.get("arguments"), str):
            raise BadRequest(f"Invalid type for '{where}.function.arguments': "
                             "expected a string.")
        ids.append(call["id"])
    return ids
