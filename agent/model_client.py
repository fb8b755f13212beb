"""Talking to an OpenAI-compatible chat-completions endpoint, with one retry policy.

The official ``openai`` client does the HTTP, the errors and the parsing; its
own retries are off so that every retry happens here, is logged with the
session it belongs to, and ends in one clear sentence for the user when the
endpoint cannot answer.
"""

from __future__ import annotations

import asyncio
import email.utils
import re
import time
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import openai
import pydantic
import structlog
from openai.types.chat import ChatCompletion, ChatCompletionMessageFunctionToolCall

from agent.history import Message
from agent.model_reply import ModelReply, ToolCall, arguments_text, make_reply, new_call_id
from agent.streamed import StreamedAnswer, StreamError, sse_data
from gateway.config.settings import AgentConfig, secret
from gateway.errors import PlatformError
from gateway.retry import RetryPolicy

log = structlog.get_logger(__name__)

#: statuses worth asking again besides 5xx: timeout, conflict, rate limit
_RETRYABLE = {408, 409, 429}
#: how endpoints say the prompt is longer than the model can read
_OVERFLOW_HINTS = ("context_length_exceeded", "context length", "maximum context",
                   "context size", "exceed_context_size", "too many tokens", "context window",
                   "prompt is too long")
#: a refusal that names ``stream`` itself (``stream_options`` is another word)
_NAMES_STREAM = re.compile(r"\bstream\b", re.IGNORECASE)
#: what a reply that cannot be read raises inside the client and in parsing
_UNREADABLE = (ValueError, TypeError, AttributeError, KeyError, IndexError,
               pydantic.ValidationError)


class ModelUnavailable(PlatformError):
    """The endpoint did not answer; ``str(exc)`` is a sentence for the user.

    ``context_overflow`` is set when it refused because the conversation is
    longer than the model can read (compressing it may help).
    """

    def __init__(self, sentence: str, *, context_overflow: bool = False) -> None:
        super().__init__(sentence)
        self.context_overflow = context_overflow


#: told the answer's text so far, each time a streamed answer's text grows
OnText = Callable[[str], Awaitable[None]]


class ModelClient:
    def __init__(self, config: AgentConfig, *,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        self.config = config
        self._sleep = sleep
        #: the wait after each failed try (the number of tries is decided per request)
        self.retry = RetryPolicy.exponential(config.retry_backoff_seconds,
                                             config.max_retries + 1, jitter=0.2)
        # local servers take any key, but the client insists on one; $OPENAI_API_KEY is
        # deliberately not read behind the config's back (it would go to any base_url)
        self._client = openai.AsyncOpenAI(
            base_url=config.base_url, api_key=secret(config.api_key) or "not-needed",
            timeout=config.timeout_seconds, max_retries=0)
        #: ask for the token count at a stream's end (off once a server refuses it)
        self._usage_in_stream = True
        #: stream where asked to (off once a server refuses ``stream``)
        self._streams = True

    async def close(self) -> None:
        await self._client.close()

    async def complete(self, messages: list[Message],
                       tools: list[dict[str, Any]] | None = None, *,
                       on_text: OnText | None = None) -> ModelReply:
        """One model answer, retried per the policy; raises ModelUnavailable.

        With ``on_text`` (and ``agent.stream``) the answer is streamed and ``on_text``
        is told its text as it grows — from the start again when an attempt is retried.
        """
        attempts = self.config.max_retries + 1
        timeouts = 0
        body = self._request(messages, tools)
        for attempt in range(1, attempts + 1):
            started = time.monotonic()
            try:
                if on_text is not None and self.config.stream:
                    return await self._streamed_or_not(body, on_text)
                return await self._whole(body)
            except openai.APIError as exc:
                if isinstance(exc, openai.APITimeoutError):
                    # the same request with the same budget is asked again once, no more:
                    # a model that talks past the timeout would only do it again
                    timeouts += 1
                    attempts = min(attempts, attempt + (timeouts < 2))
                wait, sentence = self._judge(exc, attempt, attempts)
                log.warning("model_request_failed", attempt=attempt, attempts=attempts,
                            error=_describe(exc), retry_in=wait,
                            seconds=round(time.monotonic() - started, 3))
                if wait is None:
                    raise ModelUnavailable(sentence,
                                           context_overflow=_is_overflow(exc)) from exc
                await self._sleep(wait)
            except _UNREADABLE as exc:
                log.warning("model_reply_unreadable", error=repr(exc)[:300])
                raise ModelUnavailable(
                    f"The model endpoint gave an answer that cannot be read "
                    f"({type(exc).__name__}).") from exc
        raise AssertionError("unreachable: the last attempt returns or raises")

    async def _whole(self, body: dict[str, Any]) -> ModelReply:
        # post() rather than chat.completions.create(): the messages are already
        # wire-format dicts, and create() re-walks every one of them against the
        # typed schema — 40 ms a call at 200 messages (bench/agent_overhead.py)
        response = await self._client.post("/chat/completions", body=body,
                                           cast_to=ChatCompletion)
        return _reply(response)

    async def _streamed_or_not(self, body: dict[str, Any], on_text: OnText) -> ModelReply:
        """Streamed while the server takes it; what it refuses is left out from then on
        (each once, so this ends): ``stream_options``, else streaming itself."""
        while self._streams:
            try:
                return await self._streamed(body, on_text)
            except openai.APIStatusError as exc:
                if exc.status_code not in (400, 422):
                    raise
                named = f"{exc.param or ''} {_message(exc)}"
                if self._usage_in_stream and "stream_options" in named:
                    # a server that does not know stream_options: without it (no token
                    # count)
                    log.warning("model_stream_options_refused", error=_message(exc))
                    self._usage_in_stream = False
                elif _NAMES_STREAM.search(named):
                    # a server (or model) that cannot stream: whole answers, no preview
                    log.warning("model_stream_refused", error=_message(exc),
                                hint="answers are asked for whole from now on; "
                                     "agent.stream: false says so in the config")
                    self._streams = False
                else:
                    raise
        return await self._whole(body)

    async def _streamed(self, body: dict[str, Any], on_text: OnText) -> ModelReply:
        request = {**body, "stream": True}
        if self._usage_in_stream:
            request["stream_options"] = {"include_usage": True}
        response = await self._client.post("/chat/completions", cast_to=httpx.Response,
                                           stream=True, body=request)
        try:
            kind = response.headers.get("content-type", "")
            if "text/event-stream" not in kind:
                await response.aread()
                if "json" not in kind:
                    raise TypeError(f"a {kind or 'untyped'} answer instead of a chat "
                                    f"completion")
                # a server (or a proxy) that ignores stream: true answers the whole
                # thing; read as leniently as a whole answer is
                data = response.json()
                if not isinstance(data, dict):
                    raise TypeError(f"a JSON {type(data).__name__} instead of a chat "
                                    f"completion")
                return _reply(ChatCompletion.construct(**data))
            answer = await self._read_stream(response, on_text)
        finally:
            await response.aclose()
        if not answer.chunks:
            raise ModelUnavailable("The model endpoint returned no answer.")
        return answer.reply()

    @staticmethod
    async def _read_stream(response: httpx.Response, on_text: OnText) -> StreamedAnswer:
        answer = StreamedAnswer()
        try:
            async for data in sse_data(response):
                if answer.add_event(data) and answer.text.strip():
                    await on_text(answer.text)
                if answer.done:
                    break
        except httpx.TimeoutException as exc:  # between two chunks: as a timeout
            raise openai.APITimeoutError(request=response.request) from exc
        except httpx.HTTPError as exc:  # the server went away mid-answer (a cut body)
            raise openai.APIConnectionError(message=f"the stream broke: {exc!r}",
                                            request=response.request) from exc
        except StreamError as exc:  # judged as a server error: asked again
            raise openai.APIError(f"an error event mid-answer: {exc}", response.request,
                                  body=None) from exc
        if answer.chunks and not answer.done and answer.finish_reason is None:
            raise openai.APIConnectionError(message="the stream ended before the answer did",
                                            request=response.request)
        return answer

    def _request(self, messages: list[Message], tools: list[dict[str, Any]] | None
                 ) -> dict[str, Any]:
        request: dict[str, Any] = {"model": self.config.model, "messages": messages,
                                   "max_tokens": self.config.max_tokens}
        if tools:
            request["tools"] = tools
        if self.config.temperature is not None:
            request["temperature"] = self.config.temperature
        return request

    def _judge(self, exc: openai.APIError, attempt: int, attempts: int
               ) -> tuple[float | None, str]:
        """How long to wait before the next attempt (None: give up), and what to tell."""
        cfg = self.config
        backoff = self.retry.delay(attempt - 1)
        last = attempt >= attempts
        if isinstance(exc, openai.APITimeoutError):
            return (None if last else backoff), (
                f"The model did not answer in time ({attempts} tries of "
                f"{cfg.timeout_seconds:g} s).")
        if isinstance(exc, openai.APIConnectionError):
            return (None if last else backoff), (
                f"The model endpoint {cfg.base_url} cannot be reached ({attempts} tries).")
        if isinstance(exc, openai.APIResponseValidationError):
            return None, "The model endpoint gave an answer that cannot be read."
        if not isinstance(exc, openai.APIStatusError):
            # an error event in the middle of a streamed answer: as a server error
            return (None if last else backoff), (
                f"The model endpoint failed while answering ({attempts} tries).")
        status = exc.status_code
        if status == 429:
            asked = retry_after(exc.response.headers)
            if asked is not None and asked > cfg.max_retry_after_seconds:
                return None, (f"The model endpoint is rate limiting and asks to wait "
                              f"{asked:.0f} s; try again later.")
            return (None if last else max(asked or 0.0, backoff)), (
                f"The model endpoint is rate limiting ({attempts} tries).")
        if status >= 500 or status in _RETRYABLE:
            return (None if last else backoff), (
                f"The model endpoint failed with HTTP {status} ({attempts} tries).")
        if status in (401, 403):
            return None, (f"The model endpoint refused the API key (HTTP {status}); "
                          f"check agent.api_key.")
        if status == 404:
            return None, (f"The model endpoint does not know model {cfg.model!r} or the "
                          f"path (HTTP 404); check agent.model and agent.base_url.")
        # what the server says can be a chat template's internals, cut off mid-word: the
        # log has it; the user gets a sentence
        return None, (f"The model endpoint refused this conversation (HTTP {status}); the "
                      f"gateway's log has its reason.")


def retry_after(headers: Any) -> float | None:
    """Seconds a response asks us to wait: ``retry-after-ms``, or ``retry-after`` as
    seconds or an HTTP date."""
    millis = headers.get("retry-after-ms")
    if millis:
        try:
            return max(0.0, float(millis) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _reply(response: ChatCompletion) -> ModelReply:
    if not isinstance(response, ChatCompletion):
        raise TypeError(f"a {type(response).__name__} instead of a chat completion")
    if not response.choices:
        raise ModelUnavailable("The model endpoint returned no answer.")
    choice = response.choices[0]
    msg = choice.message
    # an id the endpoint left out is made up here: the history must pair every
    # tool result with its call, or the endpoint refuses the next request
    calls = [ToolCall(c.id or new_call_id(), c.function.name or "",
                      arguments_text(c.function.arguments))
             for c in (msg.tool_calls or [])
             if isinstance(c, ChatCompletionMessageFunctionToolCall)]
    return make_reply(msg.content, calls, getattr(response, "usage", None),
                      choice.finish_reason)


def _is_overflow(exc: openai.APIError) -> bool:
    if not isinstance(exc, openai.APIStatusError) or exc.status_code not in (400, 413):
        return False
    said = f"{exc.code or ''} {exc.type or ''} {_message(exc)}".lower()
    return any(hint in said for hint in _OVERFLOW_HINTS)


def _message(exc: openai.APIStatusError) -> str:
    body = exc.body
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])[:300]
    return exc.message[:300]


def _describe(exc: openai.APIError) -> str:
    status = getattr(exc, "status_code", None)
    return f"{type(exc).__name__}" + (f" {status}" if status else "") + f": {exc.message[:200]}"
