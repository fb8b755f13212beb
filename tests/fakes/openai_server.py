"""A small fake OpenAI-compatible chat-completions server for tests with the real ``openai`` client.

Homing talks to models through ``openai.AsyncOpenAI``; testing against this
fake exercises the real client (request building, response parsing, error
mapping, timeouts) without a network or a model::

    async with FakeOpenAI() as fake:
        client = AsyncOpenAI(base_url=fake.base_url, api_key="test", max_retries=0)
        fake.script(CallTools([("search", {"q": "x"})]), Say("found it"))
        fake.brain = lambda req: Say(f"you said {req.last['content']}")  # after the script
        ...
        assert fake.requests[0].tool_names == ["search"]

Protocol as on OpenAI: ``POST /v1/chat/completions`` answers a ``chat.completion``
object or, with ``"stream": true``, ``text/event-stream`` ``chat.completion.chunk`` events
ending in ``data: [DONE]`` (role first, then text and tool-call arguments in pieces, a
finish chunk, and a usage chunk when ``stream_options.include_usage``); pieces can be
paced by ``chunk_delay``, and :class:`Cut` drops the connection mid-stream. Errors are
never streamed: they carry the real HTTP status and an
``{"error": {"message", "type", "param", "code"}}`` body, which the client maps to
``BadRequestError`` (400), ``RateLimitError`` (429), ``InternalServerError`` (5xx)...
Requests, streamed or not, are validated like a strict real server (roles, tool-call
pairing), so a malformed conversation built by Homing fails here as it would in production.
``GET /v1/models`` lists one model.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import json
import math
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from .local_server import LocalServer

__all__ = ["Brain", "CallTools", "ChatRequest", "Cut", "Fail", "FakeOpenAI", "Hang",
           "Message", "Raw", "Response", "Say"]

JSON = dict[str, Any]

ROLES = ("system", "user", "assistant", "tool", "developer")
MODEL_ID = "fake-model"


# ---------------------------------------------------------------------- scripted answers

@dataclass(frozen=True)
class Say:
    """An assistant text reply (``finish_reason="length"``: cut off at max_tokens).

    ``chunk_delay``: seconds between streamed pieces, None for the server's ``chunk_delay``.
    """

    text: str
    finish_reason: str = "stop"
    chunk_delay: float | None = None


@dataclass(frozen=True)
class CallTools:
    """An assistant message with ``tool_calls`` (content None unless ``text``).

    Each call is ``(function name, arguments)``: a dict is sent as ``json.dumps``
    text, a str verbatim (e.g. malformed JSON, as real models sometimes produce).
    Streamed, each call's arguments come in pieces after its id and name.
    """

    calls: list[tuple[str, dict | str]]
    text: str | None = None
    chunk_delay: float | None = None  # as Say's


@dataclass(frozen=True)
class Fail:
    """An HTTP error with an OpenAI-style error body."""

    status: int
    message: str = "fake failure"
    headers: dict[str, str] = field(default_factory=dict)
    code: str | None = None  # the error code, when it is not the status's usual one


@dataclass(frozen=True)
class Hang:
    """Wait ``seconds`` (cut short when the server stops), then answer ``then``."""

    seconds: float
    then: Response | None = None


@dataclass(frozen=True)
class Raw:
    """A 200 (or ``status``) whose body is exactly ``body``: a broken endpoint."""

    body: str
    status: int = 200
    content_type: str = "application/json"


@dataclass(frozen=True)
class Message:
    """A completion whose assistant message is exactly ``message`` (ids, nulls and all).

    Streamed, its text fields (``content``, ``reasoning_content``) come in pieces and its
    ``tool_calls`` verbatim in one delta, as Ollama sends them (add ``"index"`` to each
    call for a well-formed stream).
    """

    message: JSON


@dataclass(frozen=True)
class Cut:
    """A crash mid-answer: stream ``text_before``, then drop the connection without a
    finish chunk or ``[DONE]`` (asked without streaming: drop it before any answer)."""

    text_before: str


Response = Say | CallTools | Fail | Hang | Raw | Message | Cut


# ---------------------------------------------------------------------- requests

@dataclass
class ChatRequest:
    """One POST /v1/chat/completions body, parsed."""

    body: dict  # the raw JSON ({} when the body was not a JSON object)
    model: str
    messages: list[dict]
    tool_names: list[str]  # names of the function tools in body["tools"]
    stream: bool = False  # whether the client asked for a streamed answer
    error: str | None = None  # why the fake rejected it with a 400, None when valid

    @classmethod
    def parse(cls, body: object) -> ChatRequest:
        """Tolerant parse: the fields of an invalid body come out empty, never raise."""
        if not isinstance(body, dict):
            body = {}
        model = body.get("model")
        messages = body.get("messages")
        tools = body.get("tools")
        names = [t["function"]["name"] for t in tools
                 if isinstance(t, dict) and t.get("type") == "function"
                 and isinstance(t.get("function"), dict) and "name" in t["function"]
                 ] if isinstance(tools, list) else []
        return cls(body=body, model=model if isinstance(model, str) else "",
                   messages=[m for m in messages if isinstance(m, dict)]
                   if isinstance(messages, list) else [],
                   tool_names=names, stream=body.get("stream") is True)

    @property
    def last(self) -> dict:
        """The last message."""
        return self.messages[-1]

    def texts(self, role: str) -> list[str]:
        """Text contents of the messages of ``role``, in order (text parts joined)."""
        return [text for m in self.messages if m.get("role") == role
                for text in [_content_text(m.get("content"))] if text is not None]

    def has_text(self, needle: str, role: str | None = None) -> bool:
        """Whether any message (of ``role``) has ``needle`` in its content."""
        return any(needle in text for m in self.messages
                   if role is None or m.get("role") == role
                   for text in [_content_text(m.get("content"))] if text is not None)


Brain = Callable[[ChatRequest], Response | Awaitable[Response]]


class _BadRequest(Exception):
    """Raised by validation: answer 400 with this reason."""


# ---------------------------------------------------------------------- server

class FakeOpenAI(LocalServer):
    """An in-process chat-completions server on ``127.0.0.1`` (a free port, picked on start).

    Answers come from the :meth:`script` queue first, then from ``brain``, else ``Say("ok")``.
    """

    def __init__(self, brain: Brain | None = None, *, strict: bool = True,
                 chunk_delay: float = 0.0) -> None:
        self.brain: Brain | None = brain
        #: refuse what the strictest chat templates refuse (as llama.cpp does for them)
        self.strict = strict
        #: seconds between the streamed pieces of an answer (a Say or CallTools can override)
        self.chunk_delay = chunk_delay
        self.requests: list[ChatRequest] = []  # every chat request received, valid or not
        self.api_keys: list[str] = []  # bearer tokens seen, one per request
        self.port: int = 0
        self._script: list[Response] = []
        self._completion_ids = itertools.count(1)
        self._call_ids = itertools.count(1)
        self._closing = asyncio.Event()

    @property
    def base_url(self) -> str:
        """Value for ``AsyncOpenAI(base_url=...)``."""
        return f"http://127.0.0.1:{self.port}/v1"

    def script(self, *responses: Response) -> None:
        """Queue answers for the next requests, consumed in order before the brain."""
        self._script.extend(responses)

    def _build_app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat_completions)
        app.router.add_get("/v1/models", self._models)
        app.router.add_route("*", "/{tail:.*}", self._not_found)
        self._closing.clear()
        return app

    async def _before_stop(self) -> None:
        """Cut pending Hangs and paced streams short so stop() does not wait for them."""
        self._closing.set()

    async def _pause(self, seconds: float) -> bool:
        """Wait ``seconds``; False, at once, when the server is stopping."""
        try:
            await asyncio.wait_for(self._closing.wait(), seconds)
        except TimeoutError:
            return True
        return False

    # ------------------------------------------------------------------ HTTP

    async def _not_found(self, request: web.Request) -> web.Response:
        return _error(404, f"Invalid URL ({request.method} {request.path})")

    async def _models(self, request: web.Request) -> web.Response:
        self._record_key(request)
        return web.json_response({"object": "list", "data": [
            {"id": MODEL_ID, "object": "model", "created": 0, "owned_by": "homing-tests"}]})

    async def _chat_completions(self, request: web.Request) -> web.StreamResponse:
        self._record_key(request)
        try:
            body: object = await request.json()
        except ValueError:
            body = None
        chat = ChatRequest.parse(body)
        self.requests.append(chat)
        try:
            _validate(body, strict=self.strict)
        except _BadRequest as exc:
            chat.error = str(exc)
            return _error(400, chat.error)
        try:
            answer = await self._decide(chat)
        except Exception as exc:  # a broken brain shows up as a model error, not a hang
            return _error(500, f"brain raised {type(exc).__name__}: {exc}")
        return await self._answer(request, chat, answer)

    def _record_key(self, request: web.Request) -> None:
        auth = request.headers.get("Authorization", "")
        scheme, _, token = auth.partition(" ")
        if scheme.lower() == "bearer" and token:
            self.api_keys.append(token)

    async def _decide(self, chat: ChatRequest) -> Response:
        if self._script:
            return self._script.pop(0)
        if self.brain is None:
            return Say("ok")
        answer = self.brain(chat)
        if inspect.isawaitable(answer):
            answer = await answer
        return answer

    async def _answer(self, request: web.Request, chat: ChatRequest,
                      answer: Response) -> web.StreamResponse:
        while isinstance(answer, Hang):
            if not await self._pause(answer.seconds):
                return _error(503, "fake server is shutting down")
            answer = answer.then if answer.then is not None else Say("late")
        if isinstance(answer, Fail):
            return _error(answer.status, answer.message, answer.headers, answer.code)
        if isinstance(answer, Raw):
            return web.Response(status=answer.status, text=answer.body,
                                content_type=answer.content_type)
        if isinstance(answer, Cut):
            if not chat.stream:
                return _drop(request)
            deltas = _deltas({"role": "assistant", "content": answer.text_before})
            return await self._stream(request, chat, deltas, self.chunk_delay)
        if isinstance(answer, Say | CallTools | Message):
            message = self._message(answer)
            finish_reason = ("tool_calls" if "tool_calls" in message
                             else answer.finish_reason if isinstance(answer, Say) else "stop")
            usage = _usage(chat, message)
            if not chat.stream:
                return web.json_response(self._completion(chat, {
                    "choices": [{"index": 0, "message": message, "logprobs": None,
                                 "finish_reason": finish_reason}],
                    "usage": usage}))
            pace = None if isinstance(answer, Message) else answer.chunk_delay
            deltas = _deltas(message, split_tool_calls=not isinstance(answer, Message))
            return await self._stream(request, chat, deltas,
                                      self.chunk_delay if pace is None else pace,
                                      ending=(finish_reason, usage))
        return _error(500, f"the fake got an answer it cannot send: {answer!r}")

    def _message(self, answer: Say | CallTools | Message) -> JSON:
        """The assistant message of an answer, with fresh tool-call ids."""
        if isinstance(answer, Message):
            return answer.message
        message: JSON = {"role": "assistant", "content": answer.text}
        if isinstance(answer, CallTools):
            message["tool_calls"] = [
                {"id": f"call_{next(self._call_ids)}", "type": "function",
                 "function": {"name": name,
                              "arguments": args if isinstance(args, str) else json.dumps(args)}}
                for name, args in answer.calls]
        return message

    def _completion(self, chat: ChatRequest, fields: JSON, *,
                    kind: str = "chat.completion") -> JSON:
        """``fields`` under a fresh completion id (a stream's chunks share one header)."""
        return {"id": f"chatcmpl-{next(self._completion_ids)}", "object": kind,
                "created": int(time.time()), "model": chat.model, **fields}

    async def _stream(self, request: web.Request, chat: ChatRequest, deltas: list[JSON],
                      delay: float, *, ending: tuple[str, JSON] | None = None,
                      ) -> web.StreamResponse:
        """Send ``deltas`` as chunks, ``delay`` seconds apart after the first; then
        ``ending`` (finish reason, usage): the finish chunk, the usage chunk when the
        client asked for it, and ``[DONE]``. No ending (a Cut), or the server stopping
        mid-stream: drop the connection instead, as a crashing server does."""
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                               "Cache-Control": "no-cache"})
        await response.prepare(request)
        header = self._completion(chat, {}, kind="chat.completion.chunk")
        options = chat.body.get("stream_options")
        with_usage = isinstance(options, dict) and options.get("include_usage") is True

        async def send(chunk: JSON) -> None:
            await response.write(f"data: {json.dumps({**header, **chunk})}\n\n".encode())

        def choice(delta: JSON, finish_reason: str | None = None) -> JSON:
            chunk: JSON = {"choices": [{"index": 0, "delta": delta, "logprobs": None,
                                        "finish_reason": finish_reason}]}
            return chunk | {"usage": None} if with_usage else chunk

        try:
            for i, delta in enumerate(deltas):
                if i and delay > 0 and not await self._pause(delay):
                    return _drop(request, response)
                await send(choice(delta))
            if ending is None:
                return _drop(request, response)
            finish_reason, usage = ending
            await send(choice({}, finish_reason))
            if with_usage:
                await send({"choices": [], "usage": usage})
            await response.write(b"data: [DONE]\n\n")
            await response.write_eof()
        except ConnectionResetError:
            pass  # the client closed the stream early: there is no one left to answer
        return response


# ---------------------------------------------------------------------- validation

def _validate(body: object, *, strict: bool = True) -> None:
    """Raise :class:`_BadRequest` where a strict real server would answer 400
    (``strict``: also where the strictest chat templates would)."""
    if not isinstance(body, dict):
        raise _BadRequest("We could not parse the JSON body of your request: "
                          "expected a JSON object.")
    if not isinstance(body.get("model"), str) or not body["model"]:
        raise _BadRequest("you must provide a model parameter")
    _validate_streaming(body)
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise _BadRequest("Missing required parameter: 'messages' (must be a list).")
    if not messages:
        raise _BadRequest("Invalid 'messages': empty array. Expected an array with "
                          "minimum length 1, but got an empty array instead.")
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            raise _BadRequest(f"Invalid type for 'messages[{i}]': expected an object.")
        role = message.get("role")
        if role not in ROLES:
            raise _BadRequest(f"Invalid value for 'messages[{i}].role': {role!r}. "
                              f"Supported values are: {', '.join(ROLES)}.")
    _validate_tool_pairing(messages)
    if strict:
        _validate_template(messages)


def _validate_streaming(body: JSON) -> None:
    """``stream`` is a boolean; ``stream_options`` an object, and only with a stream."""
    stream = body.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise _BadRequest("Invalid type for 'stream': expected a boolean.")
    options = body.get("stream_options")
    if options is None:
        return
    if not isinstance(options, dict):
        raise _BadRequest("Invalid type for 'stream_options': expected an object.")
    if not stream:
        raise _BadRequest("The 'stream_options' parameter is only allowed when 'stream' "
                          "is enabled.")
    if not isinstance(options.get("include_usage", False), bool):
        raise _BadRequest("Invalid type for 'stream_options.include_usage': expected a "
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
            raise _BadRequest(_TEMPLATE_TRACE.format(
                message="Jinja Exception: System message must be at the beginning."))
    turns = [m["role"] for m in messages
             if m["role"] == "user" or (m["role"] == "assistant" and not m.get("tool_calls"))]
    for i, role in enumerate(turns):
        if role != ("user" if i % 2 == 0 else "assistant"):
            raise _BadRequest(_TEMPLATE_TRACE.format(
                message="Jinja Exception: Conversation roles must alternate "
                        "user/assistant/user/assistant/..."))
    if messages[-1]["role"] not in ("user", "tool"):
        raise _BadRequest(_TEMPLATE_TRACE.format(
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
                raise _BadRequest(f"Missing required parameter: 'messages[{i}].tool_call_id'.")
            if call_id not in declared:
                raise _BadRequest(
                    f"Invalid parameter: messages[{i}] with role 'tool' has tool_call_id "
                    f"{call_id!r}, which no preceding assistant message's 'tool_calls' "
                    "declared.")
            if call_id not in pending:
                raise _BadRequest(
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
            raise _BadRequest(f"Invalid value for 'messages[{i}].content': expected a "
                              "string (content is required unless tool_calls is set).")
    _check_answered(pending)


def _check_answered(pending: dict[str, int]) -> None:
    if pending:
        index = next(iter(pending.values()))
        raise _BadRequest(
            "An assistant message with 'tool_calls' must be followed by tool messages "
            f"responding to each 'tool_call_id'. The following tool_call_ids of "
            f"messages[{index}] did not have response messages: {', '.join(pending)}")


def _tool_call_ids(message: JSON, i: int) -> list[str]:
    calls = message["tool_calls"]
    if not isinstance(calls, list):
        raise _BadRequest(f"Invalid type for 'messages[{i}].tool_calls': expected an array.")
    ids = []
    for j, call in enumerate(calls):
        where = f"messages[{i}].tool_calls[{j}]"
        if not isinstance(call, dict) or not isinstance(call.get("id"), str) or not call["id"]:
            raise _BadRequest(f"Missing required parameter: '{where}.id'.")
        function = call.get("function")
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise _BadRequest(f"Missing required parameter: '{where}.function.name'.")
        if not isinstance(function.get("arguments"), str):
            raise _BadRequest(f"Invalid type for '{where}.function.arguments': "
                              "expected a string.")
        ids.append(call["id"])
    return ids


# ---------------------------------------------------------------------- module helpers

def _error(status: int, message: str, headers: dict[str, str] | None = None,
           code: str | None = None) -> web.Response:
    """An OpenAI-style error answer."""
    if status == 429:
        kind, code = "requests", code or "rate_limit_exceeded"
    elif status >= 500:
        kind = "server_error"
    else:
        kind = "invalid_request_error"
    body = {"error": {"message": message, "type": kind, "param": None, "code": code}}
    return web.json_response(body, status=status, headers=headers)


def _usage(chat: ChatRequest, message: JSON) -> JSON:
    prompt_tokens = _tokens(chat.messages)
    completion_tokens = _tokens(message)
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


def _deltas(message: JSON, *, split_tool_calls: bool = True) -> list[JSON]:
    """The deltas that stream ``message``, as OpenAI sends them: role (and any other
    field) first, with its text fields emptied (a null content stays null, as OpenAI's
    does before tool calls); then reasoning and content in pieces; then
    each tool call's id and name, followed by its arguments in pieces — or, not
    ``split_tool_calls``, the tool calls verbatim in one delta, as Ollama sends them."""
    texts = [key for key in ("reasoning_content", "content")
             if isinstance(message.get(key), str)]
    deltas = [{key: "" if key in texts else value
               for key, value in message.items() if key != "tool_calls"}]
    deltas += [{key: piece} for key in texts for piece in _pieces(message[key])]
    if "tool_calls" in message and not split_tool_calls:
        deltas.append({"tool_calls": message["tool_calls"]})
    elif "tool_calls" in message:
        for index, call in enumerate(message["tool_calls"]):
            function = call["function"]
            deltas.append({"tool_calls": [
                {"index": index, "id": call["id"], "type": "function",
                 "function": {"name": function["name"], "arguments": ""}}]})
            deltas += [{"tool_calls": [{"index": index, "function": {"arguments": piece}}]}
                       for piece in _pieces(function["arguments"])]
    return deltas


def _pieces(text: str) -> list[str]:
    """``text`` in the pieces a model would stream it in: words with their trailing spaces."""
    return re.findall(r"\S+\s*|\s+", text)


def _drop(request: web.Request, response: web.StreamResponse | None = None,
          ) -> web.StreamResponse:
    """Close the connection at once, mid-answer, as a crashing server does."""
    if request.transport is not None:
        request.transport.abort()
    return response if response is not None else web.Response()


def _tokens(value: object) -> int:
    """A rough token count: a quarter of the JSON length, rounded up."""
    return math.ceil(len(json.dumps(value)) / 4)


def _content_text(content: object) -> str | None:
    """The text of a message content: a str, or the text parts of a list joined."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p["text"] for p in content
                 if isinstance(p, dict) and isinstance(p.get("text"), str)]
        return "".join(parts) if parts else None
    return None
