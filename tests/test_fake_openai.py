"""The fake OpenAI server against the real ``openai.AsyncOpenAI`` client."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator

import httpx
import openai
import pytest
from openai import AsyncOpenAI, AsyncStream
from openai.types.chat import ChatCompletionChunk

from tests.fakes.openai_server import (
    CallTools,
    ChatRequest,
    Cut,
    Fail,
    FakeOpenAI,
    Hang,
    Message,
    Say,
)

USER = [{"role": "user", "content": "hello"}]
TOOLS = [{"type": "function", "function": {"name": "search", "parameters": {"type": "object"}}}]


@pytest.fixture
async def fake() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI() as server:
        yield server


@pytest.fixture
async def client(fake: FakeOpenAI) -> AsyncIterator[AsyncOpenAI]:
    async with AsyncOpenAI(base_url=fake.base_url, api_key="test", max_retries=0) as c:
        yield c


async def test_text_reply_parses(fake: FakeOpenAI, client: AsyncOpenAI) -> None:
    fake.script(Say("hi there"))
    reply = await client.chat.completions.create(model="m1", messages=USER, tools=TOOLS)
    assert reply.choices[0].message.content == "hi there"
    assert reply.choices[0].finish_reason == "stop"
    assert reply.model == "m1" and reply.id == "chatcmpl-1"
    assert reply.usage is not None and reply.usage.total_tokens > 0
    # script consumed -> default answer
    again = await client.chat.completions.create(model="m1", messages=USER)
    assert again.choices[0].message.content == "ok"
    request = fake.requests[0]
    assert request.model == "m1" and request.tool_names == ["search"]
    assert request.last == USER[0] and request.texts("user") == ["hello"]
    assert request.has_text("ell", role="user") and not request.has_text("ell", role="system")
    assert fake.api_keys == ["test", "test"]


async def test_tool_calls_parse_including_malformed_arguments(
        fake: FakeOpenAI, client: AsyncOpenAI) -> None:
    fake.script(CallTools([("search", {"q": "cats"}), ("search", '{"q": "dogs"')]))
    reply = await client.chat.completions.create(model="m", messages=USER, tools=TOOLS)
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    calls = choice.message.tool_calls
    assert calls is not None
    assert [c.id for c in calls] == ["call_1", "call_2"]
    assert [c.function.name for c in calls] == ["search", "search"]
    assert json.loads(calls[0].function.arguments) == {"q": "cats"}
    assert calls[1].function.arguments == '{"q": "dogs"'  # verbatim, the client does not parse


async def test_brain_sync_async_and_raising(fake: FakeOpenAI, client: AsyncOpenAI) -> None:
    fake.brain = lambda req: Say(f"echo {req.last['content']}")
    reply = await client.chat.completions.create(model="m", messages=USER)
    assert reply.choices[0].message.content == "echo hello"

    async def async_brain(req: ChatRequest) -> Say:
        return Say(str(len(req.messages)))

    fake.brain = async_brain
    answered = [{"role": "assistant", "content": "hi"}]
    reply = await client.chat.completions.create(model="m", messages=USER + answered + USER)
    assert reply.choices[0].message.content == "3"

    def broken(req: ChatRequest) -> Say:
        raise KeyError("oops")

    fake.brain = broken
    with pytest.raises(openai.InternalServerError, match="oops"):
        await client.chat.completions.create(model="m", messages=USER)


async def test_fail_500_and_429(fake: FakeOpenAI, client: AsyncOpenAI) -> None:
    fake.script(Fail(500), Fail(429, "slow down", headers={"retry-after": "2"}))
    with pytest.raises(openai.InternalServerError) as server_error:
        await client.chat.completions.create(model="m", messages=USER)
    assert server_error.value.status_code == 500
    with pytest.raises(openai.RateLimitError) as rate_limited:
        await client.chat.completions.create(model="m", messages=USER)
    assert rate_limited.value.response.headers["retry-after"] == "2"
    assert rate_limited.value.code == "rate_limit_exceeded"
    assert isinstance(rate_limited.value.body, dict)
    assert rate_limited.value.body["message"] == "slow down"


def _assistant_calls(*ids: str) -> dict:
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": i, "type": "function", "function": {"name": "search", "arguments": "{}"}}
        for i in ids]}


def _result(call_id: str) -> dict:
    return {"role": "tool", "tool_call_id": call_id, "content": "done"}


@pytest.mark.parametrize(("messages", "reason"), [
    (USER + [_result("call_9")], "no preceding assistant"),
    (USER + [_assistant_calls("a", "b"), _result("a"), {"role": "user", "content": "?"}],
     "did not have response messages: b"),
    (USER + [_assistant_calls("a")], "did not have response messages: a"),
    ([{"role": "robot", "content": "beep"}], r"messages\[0\]\.role"),
    ([], "empty array"),
])
async def test_invalid_requests_get_400(fake: FakeOpenAI, client: AsyncOpenAI,
                                        messages: list[dict], reason: str) -> None:
    with pytest.raises(openai.BadRequestError, match=reason):
        await client.chat.completions.create(model="m", messages=messages)
    assert fake.requests[-1].error is not None  # recorded, with the reason


async def test_valid_tool_round_trip_is_accepted(client: AsyncOpenAI) -> None:
    messages = USER + [_assistant_calls("a", "b"), _result("b"), _result("a"),
                       {"role": "assistant", "content": "done"},
                       {"role": "user", "content": "thanks"}]
    reply = await client.chat.completions.create(model="m", messages=messages)
    assert reply.choices[0].message.content == "ok"


SYSTEM = [{"role": "system", "content": "be brief"}]
ANSWER = [{"role": "assistant", "content": "sure"}]


@pytest.mark.parametrize("messages,said", [
    (SYSTEM + USER + ANSWER + SYSTEM + USER, "System message must be at the beginning"),
    (SYSTEM + USER + USER, "roles must alternate"),
    (SYSTEM + ANSWER + USER, "roles must alternate"),  # the user speaks first
    (USER + [_assistant_calls("a"), _result("a")] + USER, "roles must alternate"),
    (USER + ANSWER, "must end with a user message or tool results"),
], ids=["late system", "two users", "assistant first", "no answer after tools", "ends"])
async def test_strict_mode_refuses_what_strict_chat_templates_refuse(
        fake: FakeOpenAI, client: AsyncOpenAI, messages: list, said: str) -> None:
    with pytest.raises(openai.BadRequestError, match=said):
        await client.chat.completions.create(model="m", messages=messages)
    fake.strict = False  # what lenient templates (Llama-3.1, Qwen2.5) take
    reply = await client.chat.completions.create(model="m", messages=messages)
    assert reply.choices[0].message.content == "ok"


async def _stream(client: AsyncOpenAI, messages: list[dict] = USER, *,
                  include_usage: bool = True) -> list[ChatCompletionChunk]:
    """Every chunk of one streamed answer."""
    stream = await client.chat.completions.create(
        model="m", messages=messages, tools=TOOLS, stream=True,
        stream_options={"include_usage": include_usage})
    return [chunk async for chunk in stream]


def _content_deltas(chunks: list[ChatCompletionChunk]) -> list[str]:
    return [c.choices[0].delta.content for c in chunks
            if c.choices and c.choices[0].delta.content]


def _finish_reasons(chunks: list[ChatCompletionChunk]) -> list[str]:
    return [c.choices[0].finish_reason for c in chunks
            if c.choices and c.choices[0].finish_reason is not None]


async def test_streamed_text_arrives_in_pieces_and_ends_with_stop(
        fake: FakeOpenAI, client: AsyncOpenAI) -> None:
    fake.script(Say("hi there, streaming world"))
    chunks = await _stream(client)
    assert len(_content_deltas(chunks)) > 1
    assert "".join(_content_deltas(chunks)) == "hi there, streaming world"
    first = chunks[0].choices[0].delta
    assert first.role == "assistant" and first.content == ""
    assert {(c.id, c.created, c.model, c.object) for c in chunks} == {
        ("chatcmpl-1", chunks[0].created, "m", "chat.completion.chunk")}
    assert _finish_reasons(chunks) == ["stop"]
    assert fake.requests[0].stream


async def test_streamed_say_after_a_hang_can_end_with_length(
        fake: FakeOpenAI, client: AsyncOpenAI) -> None:
    fake.script(Hang(0.01, then=Say("a long answer that goes on", finish_reason="length")))
    chunks = await _stream(client)
    assert "".join(_content_deltas(chunks)) == "a long answer that goes on"
    assert _finish_reasons(chunks) == ["length"]


async def test_streamed_tool_calls_reassemble_by_index(
        fake: FakeOpenAI, client: AsyncOpenAI) -> None:
    fake.script(CallTools([("search", {"q": "cats", "limit": 3}), ("search", '{"q": "dogs"')]))
    chunks = await _stream(client)
    calls: dict[int, dict[str, str]] = {}
    argument_pieces = 0
    for chunk in chunks:
        for delta in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
            call = calls.setdefault(delta.index, {"id": "", "name": "", "arguments": ""})
            call["id"] += delta.id or ""
            assert delta.function is not None
            call["name"] += delta.function.name or ""
            call["arguments"] += delta.function.arguments or ""
            argument_pieces += bool(delta.function.arguments)
    assert calls == {
        0: {"id": "call_1", "name": "search", "arguments": '{"q": "cats", "limit": 3}'},
        1: {"id": "call_2", "name": "search", "arguments": '{"q": "dogs"'}}
    assert argument_pieces > 2  # the arguments come in pieces, after the id and name
    assert chunks[0].choices[0].delta.content is None  # no text: content null, as on OpenAI
    assert _finish_reasons(chunks) == ["tool_calls"]


async def test_streamed_message_keeps_its_quirks_verbatim(
        fake: FakeOpenAI, client: AsyncOpenAI) -> None:
    quirky_call = {"type": "function", "function": {"name": "search", "arguments": {"q": 1}}}
    fake.script(Message({"role": "assistant", "content": None,
                         "reasoning_content": "let me think", "tool_calls": [quirky_call]}))
    chunks = await _stream(client, include_usage=False)
    deltas = [c.choices[0].delta for c in chunks]
    reasoning = [(d.model_extra or {}).get("reasoning_content") for d in deltas]
    assert "".join(r for r in reasoning if r) == "let me think"
    assert all(d.content is None for d in deltas)
    [tool_delta] = [d for d in deltas if d.tool_calls]
    assert tool_delta.model_dump(include={"tool_calls"}, exclude_unset=True, warnings=False) == {
        "tool_calls": [quirky_call]}  # no index, no id, arguments an object: as sent
    assert _finish_reasons(chunks) == ["tool_calls"]


async def test_usage_chunk_comes_last_only_with_include_usage(
        fake: FakeOpenAI, client: AsyncOpenAI) -> None:
    fake.script(Say("counted"), Say("counted"), Say("counted"))
    plain = await client.chat.completions.create(model="m", messages=USER, tools=TOOLS)
    with_usage = await _stream(client)
    *answer, usage = with_usage
    assert usage.choices == [] and usage.usage == plain.usage
    assert all(c.choices and "usage" in c.model_fields_set and c.usage is None
               for c in answer)  # "usage": null on every chunk before, as on OpenAI
    without = await _stream(client, include_usage=False)
    assert all(c.choices and "usage" not in c.model_fields_set for c in without)
    assert len(without) == len(answer)


@pytest.mark.parametrize(("options", "said"), [
    ({"stream_options": {"include_usage": True}}, "only allowed when 'stream' is enabled"),
    ({"stream": False, "stream_options": {"include_usage": True}},
     "only allowed when 'stream' is enabled"),
    ({"stream": True, "stream_options": "usage please"}, "'stream_options': expected an object"),
], ids=["no stream", "stream false", "not an object"])
async def test_stream_options_are_validated_as_on_openai(
        fake: FakeOpenAI, client: AsyncOpenAI, options: dict, said: str) -> None:
    with pytest.raises(openai.BadRequestError, match=said):
        await client.chat.completions.create(model="m", messages=USER, extra_body=options)
    assert fake.requests[-1].error is not None


@pytest.mark.parametrize(("messages", "said"), [
    (SYSTEM + USER + USER, "roles must alternate"),
    (USER + [_assistant_calls("a")], "did not have response messages: a"),
], ids=["template", "tool pairing"])
async def test_a_refused_stream_request_gets_the_same_400(
        fake: FakeOpenAI, client: AsyncOpenAI, messages: list[dict], said: str) -> None:
    with pytest.raises(openai.BadRequestError, match=said) as refused:
        await _stream(client, messages)
    assert refused.value.response.headers["content-type"].startswith("application/json")
    assert fake.requests[-1].stream and fake.requests[-1].error is not None


async def test_a_server_that_cannot_stream_refuses_stream_and_answers_whole(
        fake: FakeOpenAI, client: AsyncOpenAI) -> None:
    fake.streams = False
    with pytest.raises(openai.BadRequestError, match="'stream' does not support true"):
        await _stream(client)
    reply = await client.chat.completions.create(model="m", messages=USER)
    assert reply.choices[0].message.content == "ok"


async def test_errors_are_not_streamed(fake: FakeOpenAI, client: AsyncOpenAI) -> None:
    fake.script(Fail(429, "slow down"))
    with pytest.raises(openai.RateLimitError, match="slow down"):
        await _stream(client)  # raised by create(), before any chunk


async def test_cut_stream_raises_remote_protocol_error_while_iterating(
        fake: FakeOpenAI, client: AsyncOpenAI) -> None:
    fake.script(Cut("the answer was going"), Cut("never sent"))
    stream: AsyncStream[ChatCompletionChunk] = await client.chat.completions.create(
        model="m", messages=USER, stream=True)
    received: list[ChatCompletionChunk] = []
    # the openai client does not wrap it: callers iterating a stream catch httpx's error
    with pytest.raises(httpx.RemoteProtocolError, match="incomplete chunked read"):
        async for chunk in stream:
            received.append(chunk)
    assert "".join(_content_deltas(received)) == "the answer was going"
    assert _finish_reasons(received) == []
    # not streamed, the same crash comes before any answer: the client wraps it
    with pytest.raises(openai.APIConnectionError):
        await client.chat.completions.create(model="m", messages=USER)


async def test_chunk_delay_paces_streams_and_an_answer_can_override_it() -> None:
    async with FakeOpenAI(chunk_delay=60) as fake, AsyncOpenAI(
            base_url=fake.base_url, api_key="test", max_retries=0) as client:
        fake.script(Say("not paced at all", chunk_delay=0),
                    CallTools([("search", {"q": "x"})], chunk_delay=0))
        said = await _stream(client)
        assert len(said) == 1 + 4 + 1 + 1  # role, 4 words, finish, usage
        called = await _stream(client)
        assert len(called) == 1 + 1 + 2 + 1 + 1  # role, call, 2 argument pieces, finish, usage
        fake.script(Say("paced by the server"))
        stream = await client.chat.completions.create(model="m", messages=USER, stream=True)
        first = await anext(aiter(stream))  # the role; the first word waits a minute
        assert first.choices[0].delta.role == "assistant"
        await fake.stop()  # cuts the pause short, and with it the stream
        with pytest.raises(httpx.RemoteProtocolError):
            async for _ in stream:
                pass


async def test_models_list(client: AsyncOpenAI) -> None:
    models = await client.models.list()
    assert [m.id for m in models.data] == ["fake-model"]


async def test_hang_times_out_and_stop_does_not_wait() -> None:
    fake = FakeOpenAI()
    await fake.start()
    fake.script(Hang(5))
    async with AsyncOpenAI(base_url=fake.base_url, api_key="test", max_retries=0,
                           timeout=0.3) as client:
        with pytest.raises(openai.APITimeoutError):
            await client.chat.completions.create(model="m", messages=USER)
    started = time.monotonic()
    await fake.stop()
    assert time.monotonic() - started < 0.5


async def test_hang_then_answers(fake: FakeOpenAI, client: AsyncOpenAI) -> None:
    fake.script(Hang(0.05, then=Say("finally")), Hang(0.01))
    first = await client.chat.completions.create(model="m", messages=USER)
    second = await client.chat.completions.create(model="m", messages=USER)
    assert first.choices[0].message.content == "finally"
    assert second.choices[0].message.content == "late"
