"""The fake OpenAI server against the real ``openai.AsyncOpenAI`` client."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator

import openai
import pytest
from openai import AsyncOpenAI

from tests.fakes.openai_server import CallTools, ChatRequest, Fail, FakeOpenAI, Hang, Say

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


async def test_stream_is_refused(client: AsyncOpenAI) -> None:
    with pytest.raises(openai.BadRequestError, match="stream"):
        await client.chat.completions.create(model="m", messages=USER, stream=True)


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
