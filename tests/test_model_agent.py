"""The model agent: the real ``openai`` client against a local fake OpenAI-compatible
server, behind the real gateway and its web chat."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from agent.compression import SUMMARY_PROMPT
from agent.history import NOTICE_MARK
from agent.model import SUBAGENT_PROMPT
from gateway.daemon import Gateway, running_gateway
from gateway.platforms.web import WebAdapter

from .conftest import make_config
from .fakes.openai_server import CallTools, ChatRequest, Fail, FakeOpenAI, Hang, Response, Say
from .helpers import eventually_async
from .test_web import Tab, open_tab


@pytest.fixture
async def model() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI() as fake:
        yield fake


def model_config(home: Path, fake: FakeOpenAI, **overrides: object):
    settings: dict[str, object] = dict(
        agent__backend="openai", agent__base_url=fake.base_url, agent__model="fake-model",
        agent__api_key="sk-test", agent__retry_backoff_seconds=0.01,
        agent__timeout_seconds=5)
    settings.update(overrides)
    return make_config(home, **settings)


@pytest.fixture
async def gateway(tmp_path: Path, model: FakeOpenAI) -> AsyncIterator[tuple[Gateway, str]]:
    async with running_gateway(model_config(tmp_path / "home", model)) as gw:
        yield gw, _base(gw)


def _base(gw: Gateway) -> str:
    adapter = gw.runner.adapters["web"]
    assert isinstance(adapter, WebAdapter)
    return f"http://127.0.0.1:{adapter.port}"


def is_notice(req: ChatRequest) -> bool:
    return req.last["role"] == "system" and req.last["content"].startswith(NOTICE_MARK)


def is_subagent(req: ChatRequest) -> bool:
    return req.messages[0]["content"] == SUBAGENT_PROMPT


def is_summary(req: ChatRequest) -> bool:
    return req.messages[0]["content"] == SUMMARY_PROMPT


def user_says(req: ChatRequest, text: str) -> bool:
    return req.last["role"] == "user" and text in req.last["content"]


async def reply_text(tab: Tab, timeout: float = 10) -> dict[str, Any]:
    return await tab.frame(timeout)


# --- the way back: a job started by a tool call reports to its own conversation ---------

async def test_a_build_started_by_the_model_reports_to_its_conversation_only(
        gateway, model, http) -> None:
    _, base = gateway

    def brain(req: ChatRequest) -> Response:
        if is_notice(req):
            ok = "build-ok" in req.last["content"]
            return Say(f"The build has finished {'successfully' if ok else 'badly'}.")
        if req.last["role"] == "tool":
            return Say("Build started; I will tell you when it is done.")
        if user_says(req, "build"):
            return CallTools([("terminal", {"command": "sleep 1; echo build-ok",
                                            "background": True, "notify_on_complete": True})])
        return Say(f"B heard: {req.last['content']}")

    model.brain = brain
    a, b = await open_tab(http, base), await open_tab(http, base)
    await a.say("please run the build")
    started = await reply_text(a)
    assert (started["kind"], started["text"]) == (
        "reply", "Build started; I will tell you when it is done.")

    for i in range(5):  # B chats with the model while A's build runs
        await b.say(f"hello {i}")
        assert (await reply_text(b))["text"] == f"B heard: hello {i}"

    done = await reply_text(a, timeout=15)
    assert (done["kind"], done["text"]) == ("notification",
                                            "The build has finished successfully.")
    assert done["session_id"] == a.ready["session_id"]
    await b.no_frame()
    await a.no_frame(0.05)

    (notice_request,) = [r for r in model.requests if is_notice(r)]
    # the notice is a system message, never the user's words, and A's context is A's own
    assert not any(NOTICE_MARK in t for t in notice_request.texts("user"))
    assert notice_request.texts("user") == ["please run the build"]
    assert notice_request.tool_names == ["terminal", "process", "delegate_task",
                                         "send_message"]


async def test_the_reply_to_a_notice_goes_under_the_message_that_started_the_work(
        tmp_path: Path, model: FakeOpenAI) -> None:
    from .fakes.telegram_server import FakeTelegram
    from .test_telegram import ALICE, FORUM, telegram_config

    def brain(req: ChatRequest) -> Response:
        if is_subagent(req):
            if req.last["role"] == "tool":
                out = json.loads(req.last["content"])["output"]
                return Say(f"Sub-agent summary: found {out}")
            return CallTools([("terminal", {"command": "sleep 0.5; echo sub-result"})])
        if is_notice(req):
            return Say("Your research is back: " + req.last["content"].splitlines()[-1])
        if req.last["role"] == "tool":
            return Say("Delegated.")
        if user_says(req, "research"):
            return CallTools([("delegate_task", {"task": "find the sub-result"})])
        return Say("noted")

    model.brain = brain
    async with FakeTelegram() as telegram:
        config = model_config(tmp_path / "home", model)
        config = config.model_copy(update={"platforms": telegram_config(
            tmp_path / "home", telegram).platforms})
        async with running_gateway(config) as gw:
            await gw.runner.adapters["telegram"].wait_connected()
            topic = dict(chat_id=FORUM, chat_type="supergroup", is_forum=True,
                         is_topic_message=True)
            start = telegram.user_message(text="please research this", thread_id=42, **topic)
            telegram.user_message(text="unrelated chatter", thread_id=17, **topic)
            telegram.user_message(text="anything else meanwhile?", thread_id=42, **topic)

            def back() -> list:
                return [s for s in telegram.sent if s.text.startswith("Your research")]

            await eventually_async(_async(lambda: len(back()) == 1), timeout=15,
                                   what="the delegation's summary")
            (answer,) = back()
            assert answer.text == "Your research is back: Sub-agent summary: found sub-result"
            assert (answer.chat_id, answer.message_thread_id) == (FORUM, 42)
            assert answer.reply_to_message_id == start["message_id"]
            topic17 = [s.text for s in telegram.sent if s.message_thread_id == 17]
            assert topic17 == ["noted"]
            assert ALICE  # the fake's default sender is the allowed user


def _async(predicate):
    async def check() -> bool:
        return predicate()
    return check


# --- compression -------------------------------------------------------------------------

async def test_past_the_budget_the_session_compresses_and_old_jobs_still_report(
        tmp_path: Path, model: FakeOpenAI, http) -> None:
    def brain(req: ChatRequest) -> Response:
        if is_summary(req):
            return Say("SUMMARY: the user started a slow job earlier.")
        if is_notice(req):
            has_summary = any("SUMMARY: the user started" in t for t in req.texts("system"))
            return Say(f"Slow job done (I remember the summary: {has_summary}).")
        if req.last["role"] == "tool":
            return Say("started")
        if user_says(req, "start the slow job"):
            return CallTools([("terminal", {"command": "sleep 2; echo slow-done",
                                            "background": True})])
        return Say("ok " + req.last["content"][:10])

    model.brain = brain
    config = model_config(tmp_path / "home", model, agent__context_budget_tokens=1000,
                          agent__keep_recent_turns=1)
    async with running_gateway(config) as gw:
        tab = await open_tab(http, _base(gw))
        first_session = tab.ready["session_id"]
        await tab.say("start the slow job")
        assert (await reply_text(tab))["text"] == "started"
        for i in range(4):  # about 400 tokens each: the history passes 1000
            await tab.say(f"chunk{i} " + "lorem ipsum " * 130)
            assert (await reply_text(tab))["text"].startswith(f"ok chunk{i}")

        live = await gw.store.live_session(tab.ready["session_key"])
        assert live is not None and live.id != first_session
        chain = await gw.store.lineage(live.id)
        assert chain[-1] == first_session or chain[0] == first_session
        first = await gw.store.get(first_session)
        assert first is not None and first.end_reason == "compression"

        done = await reply_text(tab, timeout=15)
        assert done["text"] == "Slow job done (I remember the summary: True)."
        assert done["session_id"] == live.id  # the live child, not the compressed parent
        summaries = [r for r in model.requests if is_summary(r)]
        assert summaries and "start the slow job" in summaries[0].messages[1]["content"]


async def test_compress_command_summarises_and_says_so_when_the_model_is_down(
        gateway, model, http) -> None:
    gw, base = gateway
    model.brain = lambda req: (Say("SUMMARY of it all") if is_summary(req)
                               else Say("fine"))
    tab = await open_tab(http, base)
    for text in ("remember the number 7", "and the colour blue", "and the city Oslo"):
        await tab.say(text)
        assert (await reply_text(tab))["text"] == "fine"

    model.script(Fail(500), Fail(500), Fail(500))
    await tab.say("/compress")
    refused = await reply_text(tab)
    assert refused["kind"] == "system"
    assert "not compressed" in refused["text"] and "HTTP 500" in refused["text"]
    assert (await gw.store.live_session(tab.ready["session_key"])).id == tab.ready["session_id"]

    await tab.say("/compress")
    assert "Context compressed" in (await reply_text(tab))["text"]
    await tab.say("what was the number?")
    assert (await reply_text(tab))["text"] == "fine"
    last = model.requests[-1]
    assert any("SUMMARY of it all" in t for t in last.texts("system"))
    # the oldest turn went into the summary; the last two (keep_recent_turns) stay verbatim
    assert last.texts("user") == ["and the colour blue", "and the city Oslo",
                                  "what was the number?"]
    summary_request = [r for r in model.requests if is_summary(r)][-1]
    assert "remember the number 7" in summary_request.messages[1]["content"]


# --- failures ----------------------------------------------------------------------------

@pytest.mark.parametrize("broken, expected", [
    (CallTools([("terminal", "{\"command\": ")]), "not valid JSON"),
    (CallTools([("launch_rockets", {"count": 3})]), "there is no tool named 'launch_rockets'"),
    (CallTools([("terminal", {"cmd": "ls"})]), "wrong arguments for terminal"),
    (CallTools([("process", {"action": "kill", "job_id": "j-not-mine"})]),
     "No job 'j-not-mine' in this conversation"),
])
async def test_a_broken_tool_call_gets_a_clear_tool_error(
        gateway, model, http, broken: Response, expected: str) -> None:
    _, base = gateway
    model.script(broken)
    model.brain = lambda req: (Say(f"The tool said: {req.last['content']}")
                               if req.last["role"] == "tool" else Say("next works"))
    tab = await open_tab(http, base)
    await tab.say("do the thing")
    answer = await reply_text(tab)
    assert answer["kind"] == "reply" and expected in answer["text"]
    await tab.say("and now?")
    assert (await reply_text(tab))["text"] == "next works"


async def test_an_endpoint_failing_three_times_gets_a_clear_message_and_keeps_history(
        gateway, model, http) -> None:
    _, base = gateway
    model.script(Fail(500), Fail(500), Fail(500))
    tab = await open_tab(http, base)
    await tab.say("first question")
    failed = await reply_text(tab)
    assert failed["kind"] == "system"
    assert "failed with HTTP 500 (3 tries)" in failed["text"]
    assert "send another message to try again" in failed["text"]
    assert len(model.requests) == 3

    model.brain = lambda req: Say(f"answering {len(req.texts('user'))} messages")
    await tab.say("second question")
    assert (await reply_text(tab))["text"] == "answering 2 messages"
    assert model.requests[-1].texts("user") == ["first question", "second question"]


async def test_a_timeout_is_reported_while_other_conversations_go_on(
        tmp_path: Path, model: FakeOpenAI, http) -> None:
    def brain(req: ChatRequest) -> Response:
        return Hang(3) if user_says(req, "slow") else Say("quick answer")

    model.brain = brain
    config = model_config(tmp_path / "home", model, agent__timeout_seconds=0.4)
    async with running_gateway(config) as gw:
        base = _base(gw)
        a, b = await open_tab(http, base), await open_tab(http, base)
        await a.say("a slow one")
        await asyncio.sleep(0.1)
        await b.say("hi")
        assert (await reply_text(b))["text"] == "quick answer"  # while A still waits
        timed_out = await reply_text(a)
        assert timed_out["kind"] == "system"
        assert "did not answer in time (3 tries of 0.4 s)" in timed_out["text"]
        await a.say("and now?")
        assert (await reply_text(a))["text"] == "quick answer"


async def test_a_notice_still_arrives_when_the_model_cannot_comment(gateway, model, http) -> None:
    _, base = gateway

    def brain(req: ChatRequest) -> Response:
        if is_notice(req):
            return Fail(503)
        if req.last["role"] == "tool":
            return Say("started")
        return CallTools([("terminal", {"command": "echo notice-marker", "background": True})])

    model.brain = brain
    tab = await open_tab(http, base)
    await tab.say("go")
    assert (await reply_text(tab))["text"] == "started"
    notice = await reply_text(tab, timeout=15)
    assert notice["kind"] == "notification"
    assert "notice-marker" in notice["text"]
    assert "The model could not comment on this" in notice["text"]


async def test_send_message_reaches_here_and_home_channels_and_nowhere_else(
        tmp_path: Path, model: FakeOpenAI, http) -> None:
    model.script(
        CallTools([("send_message", {"text": "progress: half way"}),
                   ("send_message", {"text": "deploy done", "target": "ops"}),
                   ("send_message", {"text": "sneaky", "target": "web:someone-else"})]))
    model.brain = lambda req: Say("results: " + " | ".join(
        m["content"] for m in req.messages if m["role"] == "tool"))
    config = model_config(tmp_path / "home", model, agent__home_channels=[
        {"name": "ops", "platform": "web", "chat_id": "ops-room", "chat_type": "dm"}])
    async with running_gateway(config) as gw:
        base = _base(gw)
        ops = await open_tab(http, base, conversation="ops-room")
        tab = await open_tab(http, base)
        await tab.say("deploy please")
        assert (await reply_text(tab))["text"] == "progress: half way"
        assert (await reply_text(ops))["text"] == "deploy done"
        final = (await reply_text(tab))["text"]
        assert "no target 'web:someone-else'" in final and "here, ops" in final
        await ops.no_frame()


async def test_a_rate_limit_is_waited_out_as_the_endpoint_asks(tmp_path: Path,
                                                                model: FakeOpenAI) -> None:
    from agent.model_client import ModelClient, ModelUnavailable

    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    config = model_config(tmp_path / "home", model, agent__retry_backoff_seconds=0.5)
    client = ModelClient(config.agent, sleep=sleep)
    try:
        model.script(Fail(429, headers={"retry-after": "7"}), Say("after the wait"))
        reply = await client.complete([{"role": "user", "content": "hi"}])
        assert reply.text == "after the wait" and slept == [7.0]

        model.script(Fail(429, headers={"retry-after": "3600"}))
        with pytest.raises(ModelUnavailable, match="asks to wait 3600 s"):
            await client.complete([{"role": "user", "content": "hi"}])
        assert slept == [7.0]  # an hour is not waited for

        model.script(Fail(401, message="bad key"))
        with pytest.raises(ModelUnavailable, match="check agent.api_key"):
            await client.complete([{"role": "user", "content": "hi"}])
        assert model.api_keys[-1] == "sk-test"
    finally:
        await client.close()


async def test_slash_commands_still_work_without_asking_the_model(gateway, model, http) -> None:
    _, base = gateway
    tab = await open_tab(http, base)
    await tab.say("/run echo direct")
    assert "direct" in (await reply_text(tab))["text"]
    await tab.say("/status")
    assert "model: fake-model" in (await reply_text(tab))["text"]
    assert model.requests == []


async def test_many_conversations_starting_jobs_at_once_each_hear_their_own(
        gateway, model, http) -> None:
    _, base = gateway

    async def brain(req: ChatRequest) -> Response:
        await asyncio.sleep(0.01)  # model latency, so turns of different tabs interleave
        if is_notice(req):
            marker = next(w for w in req.last["content"].split() if w.startswith("marker-"))
            return Say(f"done {marker}")
        if req.last["role"] == "tool":
            return Say("started")
        name = req.last["content"].split()[-1]
        return CallTools([("terminal", {"command": f"sleep 0.3; echo marker-{name}",
                                        "background": True})])

    model.brain = brain
    tabs = [await open_tab(http, base) for _ in range(10)]
    await asyncio.gather(*(tab.say(f"build t{i}") for i, tab in enumerate(tabs)))
    for i, tab in enumerate(tabs):
        assert (await reply_text(tab))["text"] == "started"
        assert (await reply_text(tab, timeout=15))["text"] == f"done marker-t{i}"
    for tab in tabs:
        await tab.no_frame(0.05)


async def test_the_history_survives_a_restart(tmp_path: Path, model: FakeOpenAI, http) -> None:
    model.brain = lambda req: Say(f"I have {len(req.texts('user'))} messages from you")
    config = model_config(tmp_path / "home", model)
    async with running_gateway(config) as gw:
        tab = await open_tab(http, _base(gw))
        await tab.say("first")
        assert (await reply_text(tab))["text"] == "I have 1 messages from you"
        conversation = tab.ready["conversation"]
    async with running_gateway(config) as gw:
        tab = await open_tab(http, _base(gw), conversation=conversation)
        await tab.say("second")
        assert (await reply_text(tab))["text"] == "I have 2 messages from you"
    assert model.requests[-1].texts("user") == ["first", "second"]
