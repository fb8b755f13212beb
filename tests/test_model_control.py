"""Control of a turn under way: /stop, commands that answer at once, agent.busy — and
signs of life while it runs (typing in the right topic or thread, tool status). The real
``openai`` client against the strict fake; the real platform libraries against theirs."""

from __future__ import annotations

import os
from pathlib import Path

from agent.loop import INTERRUPTED
from gateway.daemon.assembly import running_gateway
from tests.fakes.openai_server import CallTools, ChatRequest, Hang, Response, Say
from tests.helpers import eventually, running_command
from tests.model_support import model_config, model_settings, reply_text, user_says, web_base
from tests.test_web import open_tab


async def test_stop_ends_a_turn_waiting_on_a_slow_model_and_the_next_message_works(
        tmp_path: Path, model, http) -> None:
    def brain(req: ChatRequest) -> Response:
        return Hang(30) if req.last["content"] == "think hard" else Say("here now")

    model.brain = brain
    async with running_gateway(model_config(tmp_path / "home", model)) as gw:
        tab = await open_tab(http, web_base(gw))
        await tab.say("think hard")
        await eventually(lambda: len(model.requests) == 1, what="the slow model call")
        await tab.say("/stop")
        stopped = await reply_text(tab, timeout=10)
        assert (stopped["kind"], stopped["text"]) == ("system", "Stopped the turn under way.")
        await tab.say("still there?")
        assert (await reply_text(tab))["text"] == "here now"
        # the answer is out before its turn has written its end: a /stop in that instant
        # still finds the turn (and says so); once it has ended there is nothing to stop
        await gw.runner.conversation_idle(tab.ready["session_key"])
        await tab.say("/stop")
        assert (await reply_text(tab))["text"] == "Nothing is running in this conversation."
    assert [r.error for r in model.requests] == [None, None]  # strict mode took both


async def test_stop_ends_a_foreground_command_and_keeps_the_round_in_the_history(
        tmp_path: Path, model, http) -> None:
    def brain(req: ChatRequest) -> Response:
        if user_says(req, "run the long one"):
            return CallTools([("terminal", {"command": "sleep 30"})])
        return Say("fine")

    model.brain = brain
    async with running_gateway(model_config(tmp_path / "home", model)) as gw:
        tab = await open_tab(http, web_base(gw))
        await tab.say("run the long one")
        await eventually(lambda: len(model.requests) == 1, what="the tool call")
        await eventually(lambda: running_command("sleep 30", os.getpid()),
                         what="sleep 30 running")
        await tab.say("/stop")
        assert (await reply_text(tab, timeout=10))["text"] == "Stopped the turn under way."
        await tab.say("what now?")
        assert (await reply_text(tab))["text"] == "fine"
    last = model.requests[-1]
    assert last.error is None
    results = [m for m in last.messages if m["role"] == "tool"]
    assert [r["content"] for r in results] == [INTERRUPTED]  # the cut round has its result


async def test_status_and_help_answer_at_once_while_a_foreground_command_runs(
        tmp_path: Path, http) -> None:
    from tests.conftest import make_config

    async with running_gateway(make_config(tmp_path / "home")) as gw:
        tab = await open_tab(http, web_base(gw))
        await tab.say("/run sleep 20")
        await eventually(lambda: running_command("sleep 20", os.getpid()),
                         what="sleep 20 running")
        await tab.say("/status")
        status = await tab.frame(timeout=10)  # not after the 20 s command (10 s: a busy machine)
        assert "session" in status["text"]
        await tab.say("/help")
        assert "/stop" in (await tab.frame(timeout=10))["text"]
        await tab.say("/stop")
        assert (await tab.frame(timeout=10))["text"] == "Stopped the turn under way."


async def test_busy_interrupt_stops_the_turn_and_answers_with_both_in_context(
        tmp_path: Path, model, http) -> None:
    def brain(req: ChatRequest) -> Response:
        if req.last["content"] == "write me an essay":
            return Hang(30)
        return Say(f"answering: {req.last['content']!r}")

    model.brain = brain
    config = model_config(tmp_path / "home", model, agent__busy="interrupt")
    async with running_gateway(config) as gw:
        tab = await open_tab(http, web_base(gw))
        await tab.say("write me an essay")
        await eventually(lambda: len(model.requests) == 1, what="the slow call")
        await tab.say("actually, just a haiku")
        answer = await reply_text(tab, timeout=10)
        assert answer["text"] == "answering: 'write me an essay\\n\\nactually, just a haiku'"
        await tab.no_frame(0.3)  # one answer, for both
    assert all(r.error is None for r in model.requests)


async def test_busy_steer_gives_the_message_to_the_turn_before_its_next_model_call(
        tmp_path: Path, model, http) -> None:
    def brain(req: ChatRequest) -> Response:
        if req.last["role"] == "user" and req.last["content"] == "deploy it":
            return CallTools([("terminal", {"command": "sleep 1; echo deployed"})])
        steered = [t for t in req.texts("user") if "staging" in t]
        return Say(f"done; heard {steered}")

    model.brain = brain
    config = model_config(tmp_path / "home", model, agent__busy="steer")
    async with running_gateway(config) as gw:
        tab = await open_tab(http, web_base(gw))
        await tab.say("deploy it")
        await eventually(lambda: len(model.requests) == 1, what="the tool call")
        await tab.say("to staging, please")  # while the command runs
        answer = await reply_text(tab, timeout=10)
        assert answer["text"] == "done; heard ['to staging, please']"
        await tab.no_frame(0.5)  # the steered message is not answered a second time
    assert len(model.requests) == 2 and all(r.error is None for r in model.requests)
    assert model.requests[1].last["content"] == "to staging, please"


async def test_busy_queue_answers_each_message_after_the_turn(tmp_path: Path, model,
                                                              http) -> None:
    def brain(req: ChatRequest) -> Response:
        if req.last["content"] == "first":
            return Hang(0.5, Say("first done"))
        return Say(f"then {req.last['content']}")

    model.brain = brain
    async with running_gateway(model_config(tmp_path / "home", model)) as gw:
        tab = await open_tab(http, web_base(gw))
        await tab.say("first")
        await eventually(lambda: len(model.requests) == 1, what="the first call")
        await tab.say("second")
        assert (await reply_text(tab))["text"] == "first done"
        assert (await reply_text(tab))["text"] == "then second"


# --- signs of life -----------------------------------------------------------------------

async def test_web_tabs_that_ask_see_typing_and_the_tool_status(tmp_path: Path, model,
                                                                http) -> None:
    def brain(req: ChatRequest) -> Response:
        if req.last["role"] == "tool":
            return Say("tested")
        return CallTools([("terminal", {"command": "sleep 0.2; echo ok"})])

    model.brain = brain
    async with running_gateway(model_config(tmp_path / "home", model)) as gw:
        live = await open_tab(http, web_base(gw), live="1")
        plain = await open_tab(http, web_base(gw), live.ready["conversation"])
        await live.say("make test")
        frames = []
        while not frames or frames[-1] != {"type": "typing", "active": False}:
            frames.append(await live.frame())
        assert frames[0] == {"type": "typing", "active": True}
        assert {"type": "status", "text": "running `sleep 0.2; echo ok`…"} in frames
        assert [f["text"] for f in frames if f["type"] == "message"] == ["tested"]
        assert (await plain.frame())["text"] == "tested"  # API clients: as before
        await plain.no_frame(0.2)


async def test_typing_shows_in_the_telegram_topic_and_the_discord_thread_of_the_turn(
        tmp_path: Path, model, discord_endpoints) -> None:
    from tests.fakes.discord_server import FakeDiscord
    from tests.fakes.telegram_server import FakeTelegram
    from tests.test_discord import CHANNEL, THREAD_A
    from tests.test_telegram import FORUM, telegram_config

    model.brain = lambda req: Hang(0.6, Say("thought about it"))
    async with FakeTelegram() as telegram, FakeDiscord() as discord_fake:
        discord_fake.add_channel(CHANNEL, "builds")
        discord_fake.add_thread(THREAD_A, CHANNEL)
        config = telegram_config(
            tmp_path / "home", telegram, **model_settings(model),
            platforms__discord__enabled=True, platforms__discord__token=discord_fake.token,
            platforms__discord__api_base=discord_fake.api_base,
            platforms__discord__gateway_url=discord_fake.gateway_url,
            platforms__discord__guild_ready_timeout_seconds=discord_fake.guild_ready_timeout,
            platforms__discord__allowed_users=["1"])
        async with running_gateway(config) as gw:
            await gw.runner.adapters["telegram"].wait_connected()
            await gw.runner.adapters["discord"].wait_connected(timeout=15)
            telegram.user_message(text="ponder this", thread_id=42, chat_id=FORUM,
                                  chat_type="supergroup", is_forum=True, is_topic_message=True)
            await discord_fake.user_message(content="ponder that", channel_id=THREAD_A)
            await eventually(lambda: any("thought" in s.text for s in telegram.sent)
                             and any("thought" in s.content for s in discord_fake.sent),
                             timeout=15, what="both answers")
    actions = [p for m, p in telegram.calls if m == "sendChatAction"]
    assert actions and all(str(p.get("message_thread_id")) == "42" for p in actions)
    assert all(str(p.get("chat_id")) == str(FORUM) and p.get("action") == "typing"
               for p in actions)
    assert discord_fake.typing and set(discord_fake.typing) == {THREAD_A}
