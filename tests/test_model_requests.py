"""Requests every real server takes: the shape strict chat templates demand, the token
limit, readable refusals, and the replies local servers really give. The real ``openai``
client against the fake endpoint in strict mode (as llama.cpp is with Mistral's
template)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from agent.history import NOTICE_MARK, History
from agent.loop import CUT_NOTE
from agent.wire import NO_ANSWER, wire_messages
from gateway.daemon.assembly import running_gateway
from gateway.sessions.store import SessionStore
from gateway.store.migrations import MIGRATIONS
from tests.fakes.openai_server import CallTools, ChatRequest, Fail, Message, Response, Say
from tests.model_support import (
    is_notice,
    is_subagent,
    model_config,
    reply_text,
    user_says,
    web_base,
)
from tests.test_web import open_tab


def roles(messages: list[dict]) -> list[str]:
    return [m["role"] for m in messages]


async def test_job_watch_and_delegation_notices_then_two_turns_all_pass_strict_mode(
        tmp_path: Path, model, http) -> None:
    def brain(req: ChatRequest) -> Response:
        if is_subagent(req):
            return Say("sub-agent: all good")
        if is_notice(req):
            return Say(f"noted {len([r for r in model.requests if is_notice(r)])}")
        if req.last["role"] == "tool":
            return Say("started all three")
        if user_says(req, "start everything"):
            return CallTools([
                ("terminal", {"command": "echo built", "background": True}),
                ("terminal", {"command": "sleep 0.3; echo ERROR here; sleep 0.3",
                              "background": True, "watch_patterns": ["ERROR"]}),
                ("delegate_task", {"task": "check the logs"}),
            ])
        return Say(f"turn {len(req.texts('user'))}")

    model.brain = brain
    async with running_gateway(model_config(tmp_path / "home", model)) as gw:
        tab = await open_tab(http, web_base(gw))
        await tab.say("start everything")
        assert (await reply_text(tab))["text"] == "started all three"
        notices = [await reply_text(tab, timeout=30) for _ in range(4)]
        assert all(n["kind"] == "notification" for n in notices)
        await tab.say("and now?")
        assert (await reply_text(tab))["kind"] == "reply"
        await tab.say("one more")
        assert (await reply_text(tab))["kind"] == "reply"
    refused = [r.error for r in model.requests if r.error]
    assert refused == []  # not one request a strict template would refuse
    for req in model.requests:
        assert roles(req.messages).count("system") == 1 and req.messages[0]["role"] == "system"
    last = model.requests[-1]
    assert sum(NOTICE_MARK in t for t in last.texts("user")) == 4  # each notice, marked


async def test_max_tokens_is_on_every_request_and_a_cut_answer_is_not_asked_again(
        tmp_path: Path, model, http) -> None:
    model.brain = lambda req: Say("a very long answer that goes on and", finish_reason="length")
    config = model_config(tmp_path / "home", model, agent__max_tokens=64)
    async with running_gateway(config) as gw:
        tab = await open_tab(http, web_base(gw))
        await tab.say("tell me everything")
        answer = await reply_text(tab)
        await tab.no_frame(0.3)
    assert answer["text"] == f"a very long answer that goes on and\n\n{CUT_NOTE}"
    assert len(model.requests) == 1  # posted as it is, not retried
    assert all(r.body.get("max_tokens") == 64 for r in model.requests)


async def test_a_refused_request_is_one_sentence_and_the_conversation_goes_on(
        tmp_path: Path, model, http) -> None:
    trace = ("Jinja Exception: Conversation roles must alternate user/assistant/user/"
             "assistant/... at row 1, column 2147:\n{%- for message in loop_messages %}")
    model.script(Fail(400, trace))
    async with running_gateway(model_config(tmp_path / "home", model)) as gw:
        tab = await open_tab(http, web_base(gw))
        await tab.say("hello")
        refused = await reply_text(tab)
        assert refused["kind"] == "system"
        assert refused["text"].startswith("The model endpoint refused this conversation "
                                          "(HTTP 400); the gateway's log has its reason.")
        for leak in ("Jinja", "loop_messages", "{%", "row 1"):
            assert leak not in refused["text"]
        await tab.say("again")
        assert (await reply_text(tab))["text"] == "ok"
    # the two user turns went as one: no template takes two in a row
    assert model.requests[-1].texts("user") == ["hello\n\nagain"]


async def test_replies_of_local_servers_are_understood(tmp_path: Path, model, http) -> None:
    """llama.cpp, vLLM and Ollama answers: arguments as an object, calls without ids,
    ``content: null`` beside ``reasoning_content``, several calls in one message."""
    model.script(
        Message({"role": "assistant", "content": None, "reasoning_content": "let me see",
                 "tool_calls": [
                     {"type": "function", "function": {
                         "name": "terminal", "arguments": {"command": "echo one"}}},
                     {"id": "", "type": "function", "function": {
                         "name": "terminal", "arguments": '{"command": "echo two"}'}}]}),
        Message({"role": "assistant", "content": None, "reasoning_content": "done thinking",
                 "tool_calls": None}),
    )
    model.brain = lambda req: Say("after all that")
    async with running_gateway(model_config(tmp_path / "home", model)) as gw:
        tab = await open_tab(http, web_base(gw))
        await tab.say("run both")
        empty = await reply_text(tab)
        assert (empty["kind"], empty["text"]) == ("system", "(The model gave an empty answer.)")
        await tab.say("next")
        assert (await reply_text(tab))["text"] == "after all that"
    second = model.requests[1]
    results = [json.loads(m["content"]) for m in second.messages if m["role"] == "tool"]
    assert [r["output"].strip() for r in results] == ["one", "two"]
    calls = second.messages[-3]["tool_calls"]
    assert len({c["id"] for c in calls}) == 2 and all(c["id"] for c in calls)
    assert all(isinstance(c["function"]["arguments"], str) for c in calls)
    assert all(r.error is None for r in model.requests)


def test_a_history_of_any_shape_goes_out_in_the_one_strict_templates_take() -> None:
    call = {"role": "assistant", "content": "", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "terminal", "arguments": "{}"}}]}
    history = [
        {"role": "system", "content": "[Summary of earlier turns] the user builds things"},
        {"role": "user", "content": "build it"},
        call,
        {"role": "tool", "tool_call_id": "c1", "content": "{}"},
        # the turn was cut short here: no answer
        {"role": "user", "content": "are you there?"},
        {"role": "system", "content": f"{NOTICE_MARK} (notice 7)\nJob j1 finished"},  # old
        {"role": "assistant", "content": "It finished."},
        {"role": "assistant", "content": "Anything else?"},
    ]
    wire = wire_messages("You are Homing.", history)
    assert roles(wire) == ["system", "user", "assistant", "tool", "assistant", "user",
                           "assistant"]
    assert wire[0]["content"] == ("You are Homing.\n\n"
                                  "[Summary of earlier turns] the user builds things")
    assert wire[4]["content"] == NO_ANSWER
    assert wire[5]["content"] == f"are you there?\n\n{NOTICE_MARK} (notice 7)\nJob j1 finished"
    assert wire[6]["content"] == "It finished.\n\nAnything else?"


async def test_notices_stored_by_an_older_version_are_read_as_user_turns(
        tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    db_path = home / "state.db"
    old = json.dumps({"role": "system", "content": f"{NOTICE_MARK} (notice 3)\nJob j9 done"})
    with sqlite3.connect(db_path) as db:  # a store as version 11 left it
        for migration in MIGRATIONS[:11]:
            db.executescript(migration)
        db.execute("PRAGMA user_version = 11")
        db.execute("INSERT INTO agent_messages (session_id, message, tokens, created_at) "
                   "VALUES ('s1', ?, 10, 0)", (old,))
    async with SessionStore(db_path) as store:
        (row,) = await store.db.fetchall("SELECT message FROM agent_messages")
        # a second delivery of that notice is still known as already given to the model
        assert await History(store.db).has_notice(["s1"], 3)
    assert json.loads(row[0]) == {"role": "user",
                                  "content": f"{NOTICE_MARK} (notice 3)\nJob j9 done"}
