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
paced by ``chunk_delay``, and :class:`Cut` drops the connection mid-stream (``streams=False``:
a server that refuses ``"stream": true`` with a 400 naming it). Errors are
never streamed: they carry the real HTTP status and an
``{"error": {"message", "type", "param", "code"}}`` body, which the client maps to
``BadRequestError`` (400), ``RateLimitError`` (429), ``InternalServerError`` (5xx)...
Requests, streamed or not, are validated like a strict real server (roles, tool-call
pairing), so a malformed conversation built by Homing fails here as it would in production.
``GET /v1/models`` lists one model.

This module holds what tests script and see (the answers, :class:`ChatRequest`) and the
server that picks an answer; the rules a request must follow are in ``openai_validation``
and the streamed form of an answer in ``openai_streaming``.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import json
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from tests.fakes.local_server import LocalServer
from tests.fakes.openai_streaming import drop, stream_chunks, stream_deltas
from tests.fakes.openai_validation import ROLES, BadRequest, validate  # noqa: F401 (ROLES: re-exported)

__all__ = ["Brain", "CallTools", "ChatRequest", "Cut", "Fail", "FakeOpenAI", "Hang",
           "Message", "Raw", "Response", "Say"]

JSON = dict[str, Any]

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


# ---------------------------------------------------------------------- server

class FakeOpenAI(LocalServer):
    """An in-process chat-completions server on ``127.0.0.1`` (a free port, picked on start).

    Answers come from the :meth:`script` queue first, then from ``brain``, else ``Say("ok")``.
    """

    def __init__(self, brain: Brain | None = None, *, strict: bool = True,
                 chunk_delay: float = 0.0, streams: bool = True) -> None:
        self.brain: Brain | None = brain
        #: refuse what the strictest chat templates refuse (as llama.cpp does for them)
        self.strict = strict
        #: False: a streamed request is refused with a 400 naming ``stream``
        self.streams = streams
        #: seconds between the streamed pieces of an answer (a Say or CallTools can override)
        self.chunk_delay = chunk_delay
        self.requests: list[ChatRequest] = []  # every chat request received, valid or not
        #: what /v1/audio/transcriptions answers for the audio it gets
        self.transcribe: Callable[[bytes], str] = lambda data: f"({len(data)} bytes of audio)"
        self.transcriptions: list[tuple[str, str | None, bytes]] = []  # (model, name, data)
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
        app.router.add_post("/v1/audio/transcriptions", self._transcriptions)
        app.router.add_route("*", "/{tail:.*}", self._not_found)
        self._closing.clear()
        return app

    async def _transcriptions(self, request: web.Request) -> web.Response:
        """``POST /v1/audio/transcriptions`` as OpenAI takes it: multipart with ``file``
        and ``model``; answers ``{"text": ...}`` from :attr:`transcribe`."""
        self._record_key(request)
        if not request.content_type.startswith("multipart/"):
            return _error(400, "Invalid request: expected multipart/form-data.")
        form = await request.post()
        upload, model = form.get("file"), form.get("model")
        if not isinstance(upload, web.FileField):
            return _error(400, "Missing required parameter: 'file'.")
        if not isinstance(model, str) or not model:
            return _error(400, "Missing required parameter: 'model'.")
        data = upload.file.read()
        self.transcriptions.append((model, upload.filename, data))
        return web.json_response({"text": self.transcribe(data)})

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
            validate(body, strict=self.strict, streams=self.streams)
        except BadRequest as exc:
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
                return drop(request)
            deltas = stream_deltas({"role": "assistant", "content": answer.text_before})
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
            deltas = stream_deltas(message, split_tool_calls=not isinstance(answer, Message))
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
        """Send ``deltas`` as chunks of one completion (see :func:`stream_chunks`)."""
        options = chat.body.get("stream_options")
        return await stream_chunks(
            request, deltas, delay, pause=self._pause, ending=ending,
            header=lambda: self._completion(chat, {}, kind="chat.completion.chunk"),
            with_usage=isinstance(options, dict) and options.get("include_usage") is True)


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
