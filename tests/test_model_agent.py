"""The model agent: the real ``openai`` client against a local fake OpenAI-compatible
server, behind the real gateway and its web chat."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

from agent.history import NOTICE_MARK
from gateway.daemon.assembly import running_gateway
from tests.fakes.openai_server import CallTools, ChatRequest, Fail, FakeOpenAI, Response, Say
from tests.helpers import eventually_async
from tests.model_support import (
    is_notice,
    is_subagent,
    is_summary,
    model_config,
    model_settings,
    reply_text,
    user_says,
    web_base,
)
from tests.test_web import open_tab

# --- the way back: a job started by a tool call reports to its own conversation ---------

async def test_a_build_started_by_the_model_reports_to_its_conversation_only(
        model_gateway, model, http) -> None:
    _, base = model_gateway

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

    done = await reply_text(a, timeout=30)
    assert done["kind"] == "notification"
    header, words = done["text"].split("\n", 1)  # the notice's facts, then the model's
    assert re.fullmatch(r"Job j\w+ finished: exit code 0 after \d+\.\d s\.", header)
    assert words == "The build has finished successfully."
    assert done["session_id"] == a.ready["session_id"]
    await b.no_frame()
    await a.no_frame(0.05)

    (notice_request,) = [r for r in model.requests if is_notice(r)]
    # the notice is marked as not the user's words, and A's context is A's own
    assert notice_request.last["content"].startswith(NOTICE_MARK)
    assert notice_request.texts("user")[:-1] == ["please run the build"]
    assert [m["role"] for m in notice_request.messages].count("system") == 1
    assert notice_request.tool_names == ["terminal", "process", "delegate_task",
                                         "send_message", "schedule", "send_file"]


async def test_the_reply_to_a_notice_goes_under_the_message_that_started_the_work(
        tmp_path: Path, model: FakeOpenAI) -> None:
    from tests.fakes.telegram_server import FakeTelegram
    from tests.test_telegram import ALICE, FORUM, telegram_config

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
        config = telegram_config(tmp_path / "home", telegram, **model_settings(model))
        async with running_gateway(config) as gw:
            await gw.runner.adapters["telegram"].wait_connected()
            topic = dict(chat_id=FORUM, chat_type="supergroup", is_forum=True,
                         is_topic_message=True)
            start = telegram.user_message(text="please research this", thread_id=42, **topic)
            telegram.user_message(text="unrelated chatter", thread_id=17, **topic)
            telegram.user_message(text="anything else meanwhile?", thread_id=42, **topic)

            def back() -> list:
                return [s for s in telegram.sent if "\nYour research" in s.text]

            await eventually_async(_async(lambda: len(back()) == 1), timeout=30,
                                   what="the delegation's summary")
            (answer,) = back()
            assert answer.text.endswith(
                "\nYour research is back: Sub-agent summary: found sub-result")
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
    config = model_config(tmp_path / "home", model, agent__context_budget_tokens=4000,
                          agent__keep_recent_turns=1)
    async with running_gateway(config) as gw:
        tab = await open_tab(http, web_base(gw))
        first_session = tab.ready["session_id"]
        await tab.say("start the slow job")
        assert (await reply_text(tab))["text"] == "started"
        for i in range(4):  # about 1,000 tokens each: the history passes 4,000
            await tab.say(f"chunk{i} " + "lorem ipsum " * 330)
            assert (await reply_text(tab))["text"].startswith(f"ok chunk{i}")

        async def compressed() -> bool:
            live = await gw.store.live_session(tab.ready["session_key"])
            return live is not None and live.id != first_session

        # the reply goes out before the turn records it and finds the budget passed
        await eventually_async(compressed, what="the compression")
        live = await gw.store.live_session(tab.ready["session_key"])
        chain = await gw.store.lineage(live.id)
        assert chain[-1] == first_session or chain[0] == first_session
        first = await gw.store.get(first_session)
        assert first is not None and first.end_reason == "compression"

        done = await reply_text(tab, timeout=30)
        assert done["text"].endswith("\nSlow job done (I remember the summary: True).")
        assert done["session_id"] == live.id  # the live child, not the compressed parent
        summaries = [r for r in model.requests if is_summary(r)]
        assert summaries and "start the slow job" in summaries[0].messages[1]["content"]


async def test_compress_command_summarises_and_says_so_when_the_model_is_down(
        model_gateway, model, http) -> None:
    gw, base = model_gateway
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


async def test_slash_commands_still_work_without_asking_the_model(
        model_gateway, model, http) -> None:
    _, base = model_gateway
    tab = await open_tab(http, base)
    await tab.say("/run echo direct")
    assert "direct" in (await reply_text(tab))["text"]
    await tab.say("/status")
    assert "model: fake-model" in (await reply_text(tab))["text"]
    assert model.requests == []


async def test_many_conversations_starting_jobs_at_once_each_hear_their_own(
        model_gateway, model, http) -> None:
    _, base = model_gateway

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
        assert (await reply_text(tab, timeout=30))["text"].endswith(f"\ndone marker-t{i}")
    for tab in tabs:
        await tab.no_frame(0.05)


async def test_the_history_survives_a_restart(tmp_path: Path, model: FakeOpenAI, http) -> None:
    model.brain = lambda req: Say(f"I have {len(req.texts('user'))} messages from you")
    config = model_config(tmp_path / "home", model)
    async with running_gateway(config) as gw:
        tab = await open_tab(http, web_base(gw))
        await tab.say("first")
        assert (await reply_text(tab))["text"] == "I have 1 messages from you"
        conversation = tab.ready["conversation"]
    async with running_gateway(config) as gw:
        tab = await open_tab(http, web_base(gw), conversation=conversation)
        await tab.say("second")
        assert (await reply_text(tab))["text"] == "I have 2 messages from you"
    assert model.requests[-1].texts("user") == ["first", "second"]


async def test_the_real_daemon_reports_a_model_started_job_after_a_kill_9(
        tmp_path: Path, model: FakeOpenAI, http) -> None:
    from tests.test_cli import web_home
    from tests.test_crash_recovery import start_daemon

    def brain(req: ChatRequest) -> Response:
        if is_notice(req):
            return Say(f"Done; you had asked me to {req.texts('user')[0]!r}.")
        if req.last["role"] == "tool":
            return Say("started")
        return CallTools([("terminal", {"command": "sleep 2; echo built",
                                        "background": True})])

    model.brain = brain
    env = web_home(tmp_path / "home", f"agent: {{backend: openai, base_url: "
                                      f"'{model.base_url}', model: fake-model}}\n")
    proc, url = await start_daemon(env)
    try:
        tab = await open_tab(http, url.rstrip("/"))
        await tab.say("build it")
        assert (await reply_text(tab))["text"] == "started"
        # the reply is recorded (in the transcript, and the message as answered) ...
        async with http.get(f"{url}api/sessions/{tab.ready['session_id']}/messages") as resp:
            assert (await resp.json())["messages"][-1]["text"] == "started"
        proc.kill()  # ... and the job runs on while the daemon is gone
        await proc.wait()
        proc, url = await start_daemon(env)
        tab = await open_tab(http, url.rstrip("/"), conversation=tab.ready["conversation"])
        notice = await reply_text(tab, timeout=20)
        assert notice["kind"] == "notification"
        assert notice["text"].endswith("\nDone; you had asked me to 'build it'.")
    finally:
        proc.terminate()
        await proc.wait()


async def test_watch_patterns_and_process_wait_through_the_tools(
        model_gateway, model, http) -> None:
    _, base = model_gateway

    def brain(req: ChatRequest) -> Response:
        if is_notice(req):
            body = req.last["content"].split("\n", 1)[1]
            return Say("watch says: disk full" if "ERROR disk full" in body
                       else "job ended")
        if req.last["role"] == "tool":
            result = json.loads(req.last["content"])
            if "job_id" in result:
                return CallTools([("process", {"action": "wait", "job_id": result["job_id"],
                                               "timeout_seconds": 10})])
            told = " | ".join(n.split("\n", 1)[0] for n in result.get("notices", []))
            return Say(f"waited: ended={result['ended']}, last line: "
                       f"{result['output'].splitlines()[-1]}; notices: {told}")
        return CallTools([("terminal", {
            "command": "echo start; sleep 0.3; echo ERROR disk full; sleep 0.3; echo end",
            "background": True, "notify_on_complete": False, "watch_patterns": ["ERROR"]})])

    model.brain = brain
    tab = await open_tab(http, base)
    await tab.say("deploy and watch it")
    reply = await reply_text(tab, timeout=30)
    # the watch notice that came while the turn waited, and the completion, were handed
    # to the model by process wait: no notice turn follows for either
    assert reply["text"].startswith("waited: ended=True, last line: end; notices: Job ")
    assert "output matched" in reply["text"] and "finished: exit code 0" in reply["text"]
    await tab.no_frame(0.5)


async def test_a_completion_the_model_got_from_process_wait_is_not_delivered_again(
        model_gateway, model, http) -> None:
    gw, base = model_gateway
    waited: list[dict] = []

    def brain(req: ChatRequest) -> Response:
        if is_notice(req):
            return Say("a notice turn")
        if req.last["role"] == "tool":
            result = json.loads(req.last["content"])
            if "job_id" in result:
                return CallTools([("process", {"action": "wait", "job_id": result["job_id"],
                                               "timeout_seconds": 10})])
            waited.append(result)
            return Say("the build is done: " + result["notices"][-1].splitlines()[0])
        return CallTools([("terminal", {"command": "sleep 0.3; echo built; exit 2",
                                        "background": True})])

    model.brain = brain
    tab = await open_tab(http, base)
    await tab.say("build it and wait")
    reply = await reply_text(tab, timeout=30)
    assert reply["text"].startswith("the build is done: Job ")
    assert "exit code 2" in reply["text"]
    await gw.router.settle()
    await tab.no_frame(0.5)  # no second word about the same completion
    assert not [r for r in model.requests if is_notice(r)]
    (row,) = [n for n in await gw.outbox.list() if n.kind == "completion"]
    assert (row.state, row.reason) == ("delivered", "consumed")
    assert "built" in waited[0]["notices"][-1] and waited[0]["ended"] is True


async def test_a_delegation_started_before_compression_reports_to_the_live_session(
        model_gateway, model, http) -> None:
    gw, base = model_gateway

    def brain(req: ChatRequest) -> Response:
        if is_subagent(req):
            return (Say("sub-agent: all good") if req.last["role"] == "tool"
                    else CallTools([("terminal", {"command": "sleep 1.5; echo checked"})]))
        if is_summary(req):
            return Say("SUMMARY")
        if is_notice(req):
            return Say("back: " + req.last["content"].splitlines()[-1])
        if req.last["role"] == "tool":
            return Say("delegated")
        if user_says(req, "delegate"):
            return CallTools([("delegate_task", {"task": "check things"})])
        return Say("fine")

    model.brain = brain
    tab = await open_tab(http, base)
    await tab.say("delegate a check")
    assert (await reply_text(tab))["text"] == "delegated"
    for text in ("a", "b", "c"):
        await tab.say(text)
        assert (await reply_text(tab))["text"] == "fine"
    await tab.say("/compress")
    assert "Context compressed" in (await reply_text(tab))["text"]
    live = await gw.store.live_session(tab.ready["session_key"])
    assert live is not None and live.parent_session_id == tab.ready["session_id"]
    back = await reply_text(tab, timeout=30)
    assert back["text"].endswith("\nback: sub-agent: all good")
    assert back["session_id"] == live.id


async def test_a_turn_that_passes_the_budget_midway_is_compressed_not_repeated(
        tmp_path: Path, model: FakeOpenAI, http) -> None:
    def brain(req: ChatRequest) -> Response:
        if is_summary(req):
            return Say("SUMMARY")
        if req.last["role"] == "tool":
            return Say("scanned")
        if user_says(req, "scan"):
            return CallTools([("terminal", {
                "command": "for i in $(seq 40); do printf '%0190d\\n' $i; done"})])
        return Say("hello")

    model.brain = brain
    config = model_config(tmp_path / "home", model, agent__context_budget_tokens=2000)
    async with running_gateway(config) as gw:
        tab = await open_tab(http, web_base(gw))
        await tab.say("hi")
        assert (await reply_text(tab))["text"] == "hello"
        await tab.say("scan the disk")  # its tool result alone passes the budget
        assert (await reply_text(tab))["text"] == "scanned"
        live = await gw.store.live_session(tab.ready["session_key"])
    assert live is not None and live.parent_session_id == tab.ready["session_id"]
    scans = [r for r in model.requests if user_says(r, "scan") and not is_summary(r)]
    assert len(scans) == 1  # the command was not asked for again
    last = model.requests[-1]
    assert last.texts("user") == ["scan the disk"]  # the turn under way is kept...
    assert last.last["role"] == "tool" and last.last["content"].endswith("compressed]")


async def test_new_starts_the_model_with_an_empty_history(model_gateway, model, http) -> None:
    _, base = model_gateway
    model.brain = lambda req: Say(f"I see {len(req.texts('user'))} of your messages")
    tab = await open_tab(http, base)
    for text in ("one", "two"):
        await tab.say(text)
        await reply_text(tab)
    await tab.say("/new")
    assert "Started a new session" in (await reply_text(tab))["text"]
    await tab.say("three")
    assert (await reply_text(tab))["text"] == "I see 1 of your messages"
