"""The model agent when things go wrong: broken tool calls, broken or absent endpoints,
rate limits, cancelled turns — each gives the user a clear message, loses nothing, and
leaves the conversation working. The real ``openai`` client against the local fake."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.daemon.assembly import running_gateway
from gateway.words.events import SendResult
from tests.fakes.openai_server import (
    CallTools,
    ChatRequest,
    Fail,
    FakeOpenAI,
    Hang,
    Message,
    Raw,
    Response,
    Say,
)
from tests.helpers import eventually, eventually_async
from tests.model_support import (
    has_notice,
    is_notice,
    is_subagent,
    model_config,
    model_settings,
    reply_text,
    user_says,
    web_base,
)
from tests.test_web import open_tab


@pytest.mark.parametrize("broken, kind, expected", [
    # a broken tool call: the model reads a clear tool error (relayed here by the fake)
    (CallTools([("terminal", "{\"command\": ")]), "reply", "not valid JSON"),
    (CallTools([("launch_rockets", {"count": 3})]), "reply",
     "there is no tool named 'launch_rockets'"),
    (CallTools([("terminal", {"cmd": "ls"})]), "reply", "wrong arguments for terminal"),
    (CallTools([("process", {"action": "kill", "job_id": "j-not-mine"})]), "reply",
     "No job 'j-not-mine' in this conversation"),
    # an answer that cannot be read: the gateway tells the user
    (Raw("<html>502 Bad Gateway</html>", content_type="text/html"), "system",
     "cannot be read"),
    (Raw('{"choices": '), "system", "cannot be read"),
    (Raw('{"id": "x", "object": "chat.completion", "created": 1, "model": "m", '
         '"choices": []}'), "system", "returned no answer"),
])
async def test_a_broken_call_or_answer_gets_a_clear_message_and_the_next_one_works(
        model_gateway, model, http, broken: Response, kind: str, expected: str) -> None:
    _, base = model_gateway
    model.script(broken)
    model.brain = lambda req: (Say(f"The tool said: {req.last['content']}")
                               if req.last["role"] == "tool" else Say("next works"))
    tab = await open_tab(http, base)
    await tab.say("do the thing")
    answer = await reply_text(tab)
    assert answer["kind"] == kind and expected in answer["text"]
    await tab.say("and now?")
    assert (await reply_text(tab))["text"] == "next works"


async def test_an_endpoint_failing_three_times_gets_a_clear_message_and_keeps_history(
        model_gateway, model, http) -> None:
    _, base = model_gateway
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
    assert (await reply_text(tab))["text"] == "answering 1 messages"
    # both kept, as one user turn: templates refuse two in a row
    assert model.requests[-1].texts("user") == ["first question\n\nsecond question"]


async def test_a_timeout_is_reported_while_other_conversations_go_on(
        tmp_path: Path, model: FakeOpenAI, http) -> None:
    def brain(req: ChatRequest) -> Response:
        return Hang(3) if req.last["content"] == "a slow one" else Say("quick answer")

    model.brain = brain
    config = model_config(tmp_path / "home", model, agent__timeout_seconds=0.4)
    async with running_gateway(config) as gw:
        base = web_base(gw)
        a, b = await open_tab(http, base), await open_tab(http, base)
        await a.say("a slow one")
        await eventually(lambda: model.requests, what="A's model call under way")
        await b.say("hi")
        assert (await reply_text(b))["text"] == "quick answer"  # while A still waits
        timed_out = await reply_text(a)
        assert timed_out["kind"] == "system"
        # a timeout is asked again once, not max_retries times
        assert "did not answer in time (2 tries of 0.4 s)" in timed_out["text"]
        await a.say("and now?")
        assert (await reply_text(a))["text"] == "quick answer"


async def test_a_notice_still_arrives_when_the_model_cannot_comment(
        model_gateway, model, http) -> None:
    _, base = model_gateway

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
    notice = await reply_text(tab, timeout=30)
    assert notice["kind"] == "notification"
    assert "notice-marker" in notice["text"]
    assert "The model could not comment on this" in notice["text"]


async def test_send_message_reaches_here_and_home_channels_and_nowhere_else(
        tmp_path: Path, model: FakeOpenAI, http) -> None:
    from tests.fakes.telegram_server import FakeTelegram
    from tests.test_telegram import FORUM, telegram_config

    model.script(
        CallTools([("send_message", {"text": "progress: half way"}),
                   ("send_message", {"text": "deploy done", "target": "ops"}),
                   ("send_message", {"text": "sneaky", "target": "telegram:-1002"})]))
    model.brain = lambda req: Say("results: " + " | ".join(
        m["content"] for m in req.messages if m["role"] == "tool"))
    async with FakeTelegram() as telegram:
        config = telegram_config(tmp_path / "home", telegram, **model_settings(model),
                                 agent__home_channels=[{"name": "ops", "platform": "telegram",
                                                        "chat_id": FORUM, "thread_id": 42}])
        async with running_gateway(config) as gw:
            await gw.runner.adapters["telegram"].wait_connected()
            tab = await open_tab(http, web_base(gw))
            await tab.say("deploy please")
            assert (await reply_text(tab))["text"] == "progress: half way"
            final = (await reply_text(tab))["text"]
        assert "no target 'telegram:-1002'" in final and "here, ops" in final
        assert '"sent": true, "target": "ops"' in final
        assert [(s.chat_id, s.message_thread_id, s.text) for s in telegram.sent] == [
            (FORUM, 42, "deploy done")]


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


async def test_sloppy_assistant_messages_do_not_poison_the_history(
        model_gateway, model, http) -> None:
    """An endpoint that leaves out a tool call's id, or sends neither words nor calls:
    what is stored must still be a history the (strict) endpoint accepts next time."""
    _, base = model_gateway
    model.script(
        Message({"role": "assistant", "content": None, "tool_calls": [
            {"id": "", "type": "function",
             "function": {"name": "process", "arguments": '{"action": "list"}'}},
            {"id": "c2", "type": "function",
             "function": {"name": "process", "arguments": '{"action": '}}]}),
        Say("listed"),
        Message({"role": "assistant", "content": None}))
    tab = await open_tab(http, base)
    await tab.say("list my jobs")
    assert (await reply_text(tab))["text"] == "listed"
    await tab.say("and?")
    empty = await reply_text(tab)
    assert (empty["kind"], empty["text"]) == ("system", "(The model gave an empty answer.)")
    await tab.say("still there?")
    assert (await reply_text(tab))["text"] == "ok"
    assert all(r.error is None for r in model.requests)
    (calls,) = [m["tool_calls"] for m in model.requests[-1].messages if m.get("tool_calls")]
    assert all(c["id"] for c in calls)  # made up where the endpoint left it out
    assert calls[1]["function"]["arguments"] == "{}"  # broken JSON is not sent back
    assert not [m for m in model.requests[-1].messages  # nor an empty assistant turn
                if m["role"] == "assistant" and not m["content"] and not m.get("tool_calls")]


async def test_running_out_of_tool_rounds_says_so(tmp_path: Path, model: FakeOpenAI,
                                                  http) -> None:
    model.brain = lambda req: (Say("fine") if user_says(req, "stop")
                               else CallTools([("process", {"action": "list"})]))
    async with running_gateway(model_config(tmp_path / "home", model,
                                            agent__max_tool_rounds=3)) as gw:
        tab = await open_tab(http, web_base(gw))
        await tab.say("loop forever")
        stopped = await reply_text(tab)
        assert stopped["kind"] == "system" and "stopped after 3 rounds" in stopped["text"]
        await tab.say("stop")
        assert (await reply_text(tab))["text"] == "fine"
    assert len(model.requests) == 4


async def test_a_rate_limit_in_a_turn_is_waited_out(model_gateway, model, http) -> None:
    _, base = model_gateway
    model.script(Fail(429, headers={"retry-after": "0.05"}), Say("after the wait"))
    tab = await open_tab(http, base)
    await tab.say("hi")
    assert (await reply_text(tab))["text"] == "after the wait"
    assert len(model.requests) == 2


@pytest.mark.parametrize("overflow", [
    Fail(400, message="This model's maximum context length is 8192 tokens. However, your "
         "messages resulted in 9001 tokens.", code="context_length_exceeded"),  # OpenAI, vLLM
    Fail(400, message="the request exceeds the available context size, try increasing it"),
])  # llama.cpp
async def test_a_conversation_too_long_for_the_model_is_compressed_and_answered(
        model_gateway, model, http, overflow: Fail) -> None:
    gw, base = model_gateway
    model.brain = lambda req: Say("SUMMARY") if req.messages[0]["content"].startswith(
        "You compress") else Say("answered")
    tab = await open_tab(http, base)
    for text in ("one", "two", "three"):
        await tab.say(text)
        assert (await reply_text(tab))["text"] == "answered"
    model.script(overflow)
    await tab.say("four")
    assert (await reply_text(tab))["text"] == "answered"
    live = await gw.store.live_session(tab.ready["session_key"])
    assert live is not None and live.parent_session_id == tab.ready["session_id"]
    assert model.requests[-1].texts("user")[-1] == "four"


async def test_a_sub_agent_whose_model_fails_reports_the_failure_home(
        model_gateway, model, http) -> None:
    _, base = model_gateway

    def brain(req: ChatRequest) -> Response:
        if is_subagent(req):
            return Fail(500)
        if is_notice(req):
            return Say("relayed: " + req.last["content"].split("\n", 1)[1])
        if req.last["role"] == "tool":
            return Say("delegated")
        return CallTools([("delegate_task", {"task": "look around"})])

    model.brain = brain
    tab = await open_tab(http, base)
    await tab.say("please delegate")
    assert (await reply_text(tab))["text"] == "delegated"
    relayed = await reply_text(tab, timeout=30)
    assert relayed["kind"] == "notification"
    assert "failed: The model endpoint failed with HTTP 500 (3 tries)" in relayed["text"]


async def test_a_notice_turn_whose_answer_fails_to_send_is_not_run_twice(
        tmp_path: Path, model: FakeOpenAI) -> None:
    """The answer could not be sent: the notice is tried again, as it is — the model's
    turn for it is not run again (which would repeat the first part and the tools)."""
    from gateway.words.route import Route
    from tests.memory_platform import MemoryAdapter

    adapter = MemoryAdapter("memory")
    route = Route("memory", "dm", "42", user_id="1")

    def brain(req: ChatRequest) -> Response:
        in_notice_turn = has_notice(req)
        if in_notice_turn and req.last["role"] == "tool":
            adapter.scripted_failures["42"] = [SendResult.failed("flood", retry_after=0.05)]
            return Say("second part")
        if in_notice_turn:
            return CallTools([("process", {"action": "list"})], text="first part")
        if req.last["role"] == "tool":
            return Say("started")
        return CallTools([("terminal", {"command": "echo job-output", "background": True})])

    model.brain = brain
    config = model_config(tmp_path / "home", model)
    async with running_gateway(config, extra_adapters=[adapter]) as gw:
        assert await adapter.receive("start it", route) == "handled"

        async def delivered() -> bool:
            return bool(await gw.outbox.list(state="delivered"))

        await eventually_async(delivered, timeout=30, what="the notice delivered")
        texts = [m.text for m in adapter.sent]
    assert texts[0] == "started" and texts[1].endswith("\nfirst part")
    assert len(texts) == 3 and "job-output" in texts[2]  # the notice itself, once
    notice_turn = [r for r in model.requests if has_notice(r)]
    assert len(notice_turn) == 2  # one turn of two rounds, not run again


async def test_a_notice_turn_that_runs_out_of_rounds_still_posts_the_notice(
        tmp_path: Path, model: FakeOpenAI, http) -> None:
    def brain(req: ChatRequest) -> Response:
        if has_notice(req):
            return CallTools([("process", {"action": "list"})])  # forever
        if req.last["role"] == "tool":
            return Say("started")
        return CallTools([("terminal", {"command": "echo the-output", "background": True})])

    model.brain = brain
    config = model_config(tmp_path / "home", model, agent__max_tool_rounds=2)
    async with running_gateway(config) as gw:
        tab = await open_tab(http, web_base(gw))
        await tab.say("go")
        assert (await reply_text(tab))["text"] == "started"
        notice = await reply_text(tab, timeout=30)
    assert notice["kind"] == "notification" and "the-output" in notice["text"]
    assert "stopped after 2 rounds" in notice["text"]


async def test_a_turn_cut_short_by_shutdown_leaves_a_history_the_endpoint_accepts(
        tmp_path: Path, model: FakeOpenAI, http) -> None:
    def brain(req: ChatRequest) -> Response:
        if user_says(req, "long"):
            return CallTools([("terminal", {"command": "sleep 30"})], text="working on it")
        return Say(f"fine, {len(req.messages)} messages")

    model.brain = brain
    config = model_config(tmp_path / "home", model, shutdown__drain_timeout_seconds=0.5)
    async with running_gateway(config) as gw:
        tab = await open_tab(http, web_base(gw))
        await tab.say("a long one")
        assert (await reply_text(tab))["text"] == "working on it"
        conversation = tab.ready["conversation"]
    async with running_gateway(config) as gw:
        tab = await open_tab(http, web_base(gw), conversation=conversation)
        await tab.say("are you back?")
        assert (await reply_text(tab))["text"].startswith("fine")
    last = model.requests[-1]
    assert last.error is None
    (tool_result,) = [m for m in last.messages if m["role"] == "tool"]
    assert "interrupted" in tool_result["content"]
