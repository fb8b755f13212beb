"""Streamed replies as users see them: web deltas then one final frame; a Telegram or
Discord preview edited in the turn's own topic or thread, then exactly one final
message — whatever flood control, a vanished preview or a long reply does. The real
``openai`` client streams from the strict fake; the real platform libraries talk to
theirs."""

from __future__ import annotations

from pathlib import Path

import pytest

import gateway.formatting.telegram_html as telegram_html
import gateway.formatting.web_html as web_html
from gateway.daemon.assembly import running_gateway
from gateway.platforms.preview import WRITING
from tests.fakes.openai_server import CallTools, ChatRequest, Cut, Response, Say
from tests.helpers import eventually
from tests.model_support import model_config, model_settings, user_says, web_base
from tests.previews_support import ANSWERS, page_sees, raw_markup, telegram_sees, words_of
from tests.test_web import open_tab


def words(tag: str, count: int = 24) -> str:
    """A reply long enough to be streamed in many pieces, naming its conversation."""
    return " ".join(f"{tag}-{i}" for i in range(count))


# ---------------------------------------------------------------------- web

async def test_web_tabs_get_deltas_then_one_final_frame_with_the_same_stream(
        tmp_path: Path, model, http) -> None:
    model.chunk_delay = 0.03
    model.brain = lambda req: Say(words("web"))
    async with running_gateway(model_config(tmp_path / "home", model)) as gw:
        first = await open_tab(http, web_base(gw))
        second = await open_tab(http, web_base(gw), first.ready["conversation"])
        elsewhere = await open_tab(http, web_base(gw))
        await first.say("tell me")
        for tab in (first, second):
            frames = []
            while not frames or frames[-1]["type"] != "message":
                frames.append(await tab.frame(deltas=True))
            deltas, final = frames[:-1], frames[-1]
            assert len(deltas) > 3 and all(d["type"] == "delta" for d in deltas)
            assert {d["stream"] for d in deltas} == {final["stream"]}
            # batched: what the deltas showed is the start of the final text, which has it all
            assert final["text"] == words("web")
            assert final["text"].startswith("".join(d["text"] for d in deltas))
            assert final["kind"] == "reply"
            await tab.no_frame(0.2)
        await elsewhere.no_frame(0.1)
    assert model.requests[-1].stream


async def test_web_deltas_carry_the_reply_so_far_formatted_as_the_final_message_is(
        tmp_path: Path, model, http) -> None:
    answer = ANSWERS[1]
    model.chunk_delay = 0.01
    model.brain = lambda req: Say(answer)
    async with running_gateway(model_config(tmp_path / "home", model)) as gw:
        tab = await open_tab(http, web_base(gw))
        await tab.say("why did it fail")
        frames = []
        while not frames or frames[-1]["type"] != "message":
            frames.append(await tab.frame(deltas=True))
    deltas, final = frames[:-1], frames[-1]
    assert final["html"] == web_html.render(answer)
    reads = words_of(page_sees(final["html"]))
    assert len(deltas) > 3
    for delta in deltas:
        # well-formed, and only ever the start of what the final message reads
        assert reads.startswith(words_of(page_sees(delta["html"]))), delta["html"]
        assert "**" not in delta["html"] and "## " not in delta["html"]
    shown = "".join(d["html"] for d in deltas)
    assert "<h2>" in shown and "<strong>" in shown and "<table>" in shown  # while written


async def test_a_stream_cut_mid_answer_is_asked_again_and_the_page_starts_over(
        tmp_path: Path, model, http) -> None:
    model.script(Cut("half an answer that"), Say("the whole answer", chunk_delay=0.08))
    async with running_gateway(model_config(tmp_path / "home", model)) as gw:
        tab = await open_tab(http, web_base(gw))
        await tab.say("go")
        frames = []
        while not frames or frames[-1]["type"] != "message":
            frames.append(await tab.frame(deltas=True))
        resets = [f for f in frames if f.get("reset")]
        assert resets and resets[0]["text"].startswith("the")
        assert frames[-1]["text"] == "the whole answer"
        await tab.no_frame(0.3)
    assert len(model.requests) == 2


async def test_stop_mid_stream_drops_the_growing_reply_and_the_next_message_works(
        tmp_path: Path, model, http) -> None:
    model.chunk_delay = 0.2
    model.brain = lambda req: (Say("fine", chunk_delay=0) if user_says(req, "again")
                               else Say(words("slow", 60)))
    async with running_gateway(model_config(tmp_path / "home", model)) as gw:
        tab = await open_tab(http, web_base(gw))
        await tab.say("write a lot")
        first = await tab.frame(deltas=True)
        assert first["type"] == "delta"
        await tab.say("/stop")
        frames = []
        while not any(f.get("done") for f in frames):
            frames.append(await tab.frame(deltas=True))
        assert not [f for f in frames if f["type"] == "message" and "slow-" in f["text"]]
        await tab.say("again")
        assert (await tab.frame())["text"] == "fine"


async def test_with_streaming_off_answers_come_whole(tmp_path: Path, model, http) -> None:
    model.brain = lambda req: Say(words("whole"))
    config = model_config(tmp_path / "home", model, agent__stream=False)
    async with running_gateway(config) as gw:
        tab = await open_tab(http, web_base(gw))
        await tab.say("hi")
        assert (await tab.frame(deltas=True))["text"] == words("whole")
    assert not model.requests[-1].stream and "stream_options" not in model.requests[-1].body


async def test_streamed_tool_calls_of_local_servers_run_as_whole_ones_would(
        tmp_path: Path, model, http) -> None:
    """No id, arguments as an object, two calls in one message (llama.cpp, Ollama)."""
    from tests.fakes.openai_server import Message

    def brain(req: ChatRequest) -> Response:
        if req.last["role"] == "tool":
            results = [m["content"][:40] for m in req.messages if m["role"] == "tool"]
            return Say(f"results: {results}")
        return Message({"role": "assistant", "content": None, "reasoning_content": "hmm",
                        "tool_calls": [
                            {"type": "function", "function": {
                                "name": "terminal", "arguments": {"command": "echo one"}}},
                            {"type": "function", "function": {
                                "name": "terminal", "arguments": {"command": "echo two"}}}]})

    model.brain = brain
    async with running_gateway(model_config(tmp_path / "home", model)) as gw:
        tab = await open_tab(http, web_base(gw))
        await tab.say("run both")
        answer = await tab.frame()
        assert "one" in answer["text"] and "two" in answer["text"]
    calls = model.requests[-1].messages[-3]["tool_calls"]
    assert [c["function"]["name"] for c in calls] == ["terminal", "terminal"]
    assert len({c["id"] for c in calls}) == 2


# ---------------------------------------------------------------------- Telegram

def _telegram(tmp_path: Path, telegram, model, **overrides: object):
    from tests.test_telegram import telegram_config

    return telegram_config(tmp_path / "home", telegram, **model_settings(model),
                           platforms__telegram__stream_edit_interval_seconds=0.2,
                           **overrides)


def _topic_message(telegram, text: str, thread_id: int) -> None:
    from tests.test_telegram import FORUM

    telegram.user_message(text=text, thread_id=thread_id, chat_id=FORUM,
                          chat_type="supergroup", is_forum=True, is_topic_message=True)


async def test_two_topics_streaming_at_once_each_end_with_one_final_message(
        tmp_path: Path, model) -> None:
    from tests.fakes.telegram_server import FakeTelegram
    from tests.test_telegram import FORUM

    model.chunk_delay = 0.05
    model.brain = lambda req: Say(words("t42") if user_says(req, "in 42") else words("t17"))
    async with FakeTelegram() as telegram:
        async with running_gateway(_telegram(tmp_path, telegram, model)) as gw:
            await gw.runner.adapters["telegram"].wait_connected()
            _topic_message(telegram, "in 42", 42)
            _topic_message(telegram, "in 17", 17)
            await eventually(lambda: telegram.visible(FORUM, 42) == [words("t42")]
                             and telegram.visible(FORUM, 17) == [words("t17")],
                             timeout=20, what="both final messages")
    for thread, tag, other in ((42, "t42", "t17"), (17, "t17", "t42")):
        edits = [e for e in telegram.edits if e.message_thread_id == thread]
        assert len(edits) >= 2, f"the preview in topic {thread} was edited as it grew"
        assert all(tag in e.text and other not in e.text for e in edits)
        posted = [s for s in telegram.sent if s.message_thread_id == thread]
        assert len(posted) == 1 and posted[0].text.endswith(" …")  # the preview, once
    assert {s.message_thread_id for s in telegram.sent} == {42, 17}


async def test_a_rate_limited_preview_edit_loses_nothing_and_doubles_nothing(
        tmp_path: Path, model) -> None:
    from tests.fakes.telegram_server import FakeTelegram
    from tests.test_telegram import FORUM, all_taken_and_settled

    model.chunk_delay = 0.05
    model.brain = lambda req: Say(words("flood", 40))
    async with FakeTelegram() as telegram:
        async with running_gateway(_telegram(tmp_path, telegram, model)) as gw:
            await gw.runner.adapters["telegram"].wait_connected()
            telegram.fail_next_edit(status=429, retry_after=1, count=2)
            _topic_message(telegram, "flood me", 42)
            await eventually(lambda: telegram.visible(FORUM, 42) == [words("flood", 40)],
                             timeout=20, what="the final message")
            await all_taken_and_settled(gw, telegram)  # the turn is over: nothing follows
            assert telegram.visible(FORUM, 42) == [words("flood", 40)]
    assert len([s for s in telegram.sent if s.message_thread_id == 42]) == 1
    refused = [p for m, p in telegram.calls if m == "editMessageText"]
    assert len(refused) > len(telegram.edits)  # the 429s were answered, and waited out


async def test_a_rate_limited_final_edit_is_waited_out_not_sent_again(
        tmp_path: Path, model) -> None:
    from tests.fakes.telegram_server import FakeTelegram
    from tests.test_telegram import FORUM

    model.chunk_delay = 0.15
    model.brain = lambda req: Say(words("last", 8))

    async with FakeTelegram() as telegram:
        async with running_gateway(_telegram(tmp_path, telegram, model)) as gw:
            await gw.runner.adapters["telegram"].wait_connected()
            _topic_message(telegram, "go", 42)
            await telegram.wait_for_sent(1, timeout=30)  # the preview is up
            telegram.fail_next_edit(status=429, retry_after=1, count=3)
            await eventually(lambda: telegram.visible(FORUM, 42) == [words("last", 8)],
                             timeout=20, what="the final message")
    assert len([s for s in telegram.sent if s.message_thread_id == 42]) == 1


async def test_a_long_reply_ends_as_split_parts_the_first_in_the_preview(
        tmp_path: Path, model) -> None:
    from gateway.formatting.telegram_html import message_parts, render
    from tests.fakes.telegram_server import FakeTelegram
    from tests.test_telegram import FORUM

    long = "\n\n".join(words(f"p{n}", 40) for n in range(20))  # about 5,000 characters
    model.chunk_delay = 0.002
    model.brain = lambda req: Say(long)
    async with FakeTelegram() as telegram:
        async with running_gateway(_telegram(tmp_path, telegram, model)) as gw:
            await gw.runner.adapters["telegram"].wait_connected()
            _topic_message(telegram, "a long one", 42)
            parts = [render(p) for p in message_parts(long)]
            assert len(parts) == 2
            await eventually(lambda: telegram.visible(FORUM, 42) == parts, timeout=30,
                             what="the reply as its parts")
    preview = [s for s in telegram.sent if s.message_thread_id == 42][0]
    assert preview.text.endswith(" …") and telegram.message_text(
        FORUM, preview.message_id) == parts[0]


async def test_a_preview_deleted_meanwhile_gives_the_final_text_its_own_message(
        tmp_path: Path, model) -> None:
    from tests.fakes.telegram_server import FakeTelegram
    from tests.test_telegram import FORUM

    model.chunk_delay = 0.1
    model.brain = lambda req: Say(words("orphan", 20))
    async with FakeTelegram() as telegram:
        async with running_gateway(_telegram(tmp_path, telegram, model)) as gw:
            await gw.runner.adapters["telegram"].wait_connected()
            _topic_message(telegram, "go", 42)
            (preview,) = await telegram.wait_for_sent(1, timeout=30)
            await gw.runner.adapters["telegram"].app.bot.delete_message(
                FORUM, preview.message_id)  # as a user deleting it
            await eventually(lambda: telegram.visible(FORUM, 42) == [words("orphan", 20)],
                             timeout=20, what="the final message")


async def test_a_preview_that_can_be_neither_edited_nor_deleted_gets_no_second_copy(
        tmp_path: Path, model) -> None:
    """Telegram keeps the preview but will neither edit nor delete it any more: posting
    the reply as a message of its own would show it twice, so the preview stays as the
    reply's one copy (the failure is logged) and nothing is posted after it."""
    from tests.fakes.telegram_server import FakeTelegram
    from tests.test_telegram import FORUM, all_taken_and_settled

    model.chunk_delay = 0.1
    model.brain = lambda req: Say(words("stuck", 20))
    async with FakeTelegram() as telegram:
        async with running_gateway(_telegram(tmp_path, telegram, model)) as gw:
            await gw.runner.adapters["telegram"].wait_connected()
            _topic_message(telegram, "go", 42)
            (preview,) = await telegram.wait_for_sent(1, timeout=30)
            telegram.fail_next_edit(status=400, description="Bad Request: message can't be "
                                                            "edited", count=1000)
            telegram.fail_next_delete(count=1000)  # "message can't be deleted"
            await all_taken_and_settled(gw, telegram)  # the turn is over: nothing follows
            assert telegram.visible(FORUM, 42) == [preview.text]  # the preview, once
    assert preview.text.endswith(" …") and words("stuck", 20).startswith(preview.text[:-2])
    assert len([s for s in telegram.sent if s.message_thread_id == 42]) == 1
    asked = {m for m, _ in telegram.calls}
    assert {"editMessageText", "deleteMessage"} <= asked  # both were tried, and refused


async def test_tool_status_shows_in_the_preview_until_the_answer_replaces_it(
        tmp_path: Path, model) -> None:
    from tests.fakes.telegram_server import FakeTelegram
    from tests.test_telegram import FORUM

    def brain(req: ChatRequest) -> Response:
        if req.last["role"] == "tool":
            return Say("built fine")
        return CallTools([("terminal", {"command": "sleep 1.5; echo built"})])

    model.brain = brain
    async with FakeTelegram() as telegram:
        async with running_gateway(_telegram(tmp_path, telegram, model)) as gw:
            await gw.runner.adapters["telegram"].wait_connected()
            _topic_message(telegram, "build it", 42)
            await eventually(lambda: telegram.visible(FORUM, 42) == ["built fine"],
                             timeout=20, what="the answer in place of the status")
    (status,) = [s for s in telegram.sent if s.message_thread_id == 42]
    # the command shows as code, as the final text's Markdown would show it
    assert (status.text, status.parse_mode) == (
        "running <code>sleep 1.5; echo built</code>…", "HTML")


async def test_a_telegram_preview_is_formatted_as_it_grows_and_never_shows_raw_markdown(
        tmp_path: Path, model) -> None:
    from tests.fakes.telegram_server import FakeTelegram
    from tests.test_telegram import FORUM

    answer = ANSWERS[1]
    final = telegram_html.render(answer)
    model.chunk_delay = 0.03
    model.brain = lambda req: Say(answer)
    async with FakeTelegram() as telegram:
        async with running_gateway(_telegram(tmp_path, telegram, model)) as gw:
            await gw.runner.adapters["telegram"].wait_connected()
            _topic_message(telegram, "why did it fail", 42)
            await eventually(lambda: telegram.visible(FORUM, 42) == [telegram_sees(final)],
                             timeout=20, what="the final message")
    posted = [s for s in telegram.sent if s.message_thread_id == 42]
    previews = posted + [e for e in telegram.edits
                         if e.message_thread_id == 42 and e.text.endswith(WRITING)]
    assert len(posted) == 1 and len(previews) >= 3
    final_shows = raw_markup(telegram_sees(final))
    for preview in previews:  # each parsed by the fake as strictly as by Telegram
        assert preview.parse_mode == "HTML"
        assert raw_markup(telegram_sees(preview.text)) <= final_shows, preview.text
    assert any("<b>" in p.text for p in previews) and any("<pre>" in p.text for p in previews)
    assert telegram.message_text(FORUM, posted[0].message_id) == final


async def test_a_preview_telegram_cannot_parse_goes_as_plain_text_and_so_do_the_next(
        tmp_path: Path, model) -> None:
    """A refused preview is sent again as plain text, and the reply's later previews
    go plain at once (no refused request each time); the final text is HTML again."""
    from tests.fakes.telegram_server import FakeTelegram
    from tests.test_telegram import FORUM

    answer = " ".join(f"**w{i}**" for i in range(60))
    refused = 'Bad Request: can\'t parse entities: Unsupported start tag "x" at byte offset 0'
    model.chunk_delay = 0.05
    model.brain = lambda req: Say(answer)
    async with FakeTelegram() as telegram:
        async with running_gateway(_telegram(tmp_path, telegram, model)) as gw:
            await gw.runner.adapters["telegram"].wait_connected()
            telegram.fail_next_send(status=400, description=refused)
            _topic_message(telegram, "go", 42)
            (preview,) = await telegram.wait_for_sent(1, timeout=10)
            final = telegram_html.render(answer)
            await eventually(lambda: telegram.visible(FORUM, 42) == [telegram_sees(final)],
                             timeout=20, what="the final message, formatted")
    # the refused post went again as the Markdown as written, and so did the next
    assert preview.parse_mode is None and preview.text.startswith("**w0** **w1**")
    edits = [e for e in telegram.edits if e.message_thread_id == 42]
    previews, last = edits[:-1], edits[-1]
    assert len(previews) >= 2 and all(e.parse_mode is None for e in previews), previews
    assert all(e.text.startswith("**w0**") and e.text.endswith(WRITING) for e in previews)
    assert (last.parse_mode, last.text) == ("HTML", final)
    # one refused request in all: the post's
    assert [m for m, _ in telegram.calls if m == "sendMessage"] == ["sendMessage"] * 2
    assert len([m for m, _ in telegram.calls if m == "editMessageText"]) == len(edits)


async def test_a_preview_that_would_look_the_same_is_not_sent_again(
        tmp_path: Path, model) -> None:
    """While a link's long target is typed the preview looks the same (the link shows
    once its target is whole): no edit is spent on it, each edit shows something new."""
    from tests.fakes.telegram_server import FakeTelegram
    from tests.test_telegram import FORUM

    target = " ".join(f"part{n}" for n in range(40))  # streamed word by word
    answer = f"See [the log](<https://ci.example/{target}>) for more."
    final = telegram_html.render(answer)
    model.chunk_delay = 0.05
    model.brain = lambda req: Say(answer)
    async with FakeTelegram() as telegram:
        async with running_gateway(_telegram(tmp_path, telegram, model)) as gw:
            await gw.runner.adapters["telegram"].wait_connected()
            _topic_message(telegram, "the log?", 42)
            await eventually(lambda: telegram.visible(FORUM, 42) == [telegram_sees(final)],
                             timeout=20, what="the final message")
    posted = [s.text for s in telegram.sent if s.message_thread_id == 42]
    edited = [e.text for e in telegram.edits if e.message_thread_id == 42]
    shown = posted + edited
    assert len(posted) == 1 and edited[-1] == final
    assert all(a != b for a, b in zip(shown, shown[1:], strict=False)), shown
    assert len([m for m, _ in telegram.calls if m == "editMessageText"]) == len(edited)
    # two seconds of target typed, at most one preview of it
    assert shown.count("See the log" + WRITING) <= 1


async def test_a_preview_whose_table_renders_longer_than_its_markdown_still_fits_a_message(
        tmp_path: Path, model) -> None:
    """A table's columns are padded: its preview can show more than its Markdown holds,
    and is cut to what one message takes, not refused as too long."""
    from tests.fakes.telegram_server import FakeTelegram
    from tests.test_telegram import FORUM

    rows = "\n".join("|x|yyyyyyyyyy|" if n % 2 else "|xxxxxxxxxx|y|" for n in range(400))
    answer = "|a|b|\n|-|-|\n" + rows
    parts = [telegram_sees(telegram_html.render(p)) for p in telegram_html.message_parts(answer)]
    model.chunk_delay = 0.005
    model.brain = lambda req: Say(answer)
    async with FakeTelegram() as telegram:
        async with running_gateway(_telegram(tmp_path, telegram, model)) as gw:
            await gw.runner.adapters["telegram"].wait_connected()
            _topic_message(telegram, "the table", 42)
            await eventually(lambda: telegram.visible(FORUM, 42) == parts, timeout=30,
                             what="the table as its parts")
    previews = [e for e in telegram.edits if e.text.endswith(WRITING)]
    assert previews and max(len(telegram_sees(e.text)) for e in previews) > 3000
    # not one edit was refused (MESSAGE_TOO_LONG): each asked is among those taken
    assert len([m for m, _ in telegram.calls if m == "editMessageText"]) == len(telegram.edits)


# ---------------------------------------------------------------------- Discord

async def test_a_discord_thread_streams_into_one_message_through_a_rate_limit(
        tmp_path: Path, model, discord_endpoints) -> None:
    from tests.fakes.discord_server import FakeDiscord
    from tests.test_discord import CHANNEL, THREAD_A, THREAD_B

    model.chunk_delay = 0.05
    model.brain = lambda req: Say(words("a") if user_says(req, "in A") else words("b"))
    async with FakeDiscord() as fake:
        fake.add_channel(CHANNEL, "builds")
        fake.add_thread(THREAD_A, CHANNEL)
        fake.add_thread(THREAD_B, CHANNEL)
        config = model_config(
            tmp_path / "home", model, platforms__discord__enabled=True,
            platforms__discord__token=fake.token, platforms__discord__api_base=fake.api_base,
            platforms__discord__gateway_url=fake.gateway_url,
            platforms__discord__guild_ready_timeout_seconds=fake.guild_ready_timeout,
            platforms__discord__allowed_users=["1"],
            platforms__discord__stream_edit_interval_seconds=0.2)
        async with running_gateway(config) as gw:
            await gw.runner.adapters["discord"].wait_connected(timeout=30)
            fake.fail_next_edit(channel_id=THREAD_A, status=429, count=1)
            await fake.user_message(content="in A", channel_id=THREAD_A)
            await fake.user_message(content="in B", channel_id=THREAD_B)
            await eventually(lambda: fake.visible(THREAD_A) == [words("a")]
                             and fake.visible(THREAD_B) == [words("b")],
                             timeout=20, what="one final message in each thread")
    for thread, tag in ((THREAD_A, "a-"), (THREAD_B, "b-")):
        edits = [e for e in fake.edits if e.channel_id == thread]
        assert len(edits) >= 2 and all(e.content.startswith(tag) for e in edits)
        assert len([s for s in fake.sent if s.channel_id == thread]) == 1


async def test_a_discord_preview_shows_the_code_being_written_as_a_closed_block(
        tmp_path: Path, model, discord_endpoints) -> None:
    from tests.fakes.discord_server import FakeDiscord
    from tests.test_discord import CHANNEL, THREAD_A

    code = "\n".join(f"step_{n} = run({n})" for n in range(30))
    answer = f"Running it:\n\n```python\n{code}\n```\n\nAll done."
    model.chunk_delay = 0.03
    model.brain = lambda req: Say(answer)
    async with FakeDiscord() as fake:
        fake.add_channel(CHANNEL, "builds")
        fake.add_thread(THREAD_A, CHANNEL)
        config = model_config(
            tmp_path / "home", model, platforms__discord__enabled=True,
            platforms__discord__token=fake.token, platforms__discord__api_base=fake.api_base,
            platforms__discord__gateway_url=fake.gateway_url,
            platforms__discord__guild_ready_timeout_seconds=fake.guild_ready_timeout,
            platforms__discord__allowed_users=["1"],
            platforms__discord__stream_edit_interval_seconds=0.2)
        async with running_gateway(config) as gw:
            await gw.runner.adapters["discord"].wait_connected(timeout=15)
            await fake.user_message(content="run it", channel_id=THREAD_A)
            await eventually(lambda: fake.visible(THREAD_A) == [answer], timeout=20,
                             what="the final message")
    previews = [s.content for s in fake.sent if s.channel_id == THREAD_A] + [
        e.content for e in fake.edits if e.channel_id == THREAD_A
        and e.content.endswith(WRITING)]
    assert len(previews) >= 3
    assert all(p.count("```") % 2 == 0 for p in previews), previews  # never left open
    assert any("```python\nstep_" in p and "All done" not in p for p in previews)


async def test_waiting_on_a_job_shows_as_the_turns_status(tmp_path: Path, model,
                                                           http) -> None:
    import json

    def brain(req: ChatRequest) -> Response:
        results = [json.loads(m["content"]) for m in req.messages if m["role"] == "tool"]
        if not results:
            return CallTools([("terminal", {"command": "sleep 0.3", "background": True})])
        if len(results) == 1:
            return CallTools([("process", {"action": "wait", "job_id": results[0]["job_id"]})])
        return Say("waited")

    model.brain = brain
    async with running_gateway(model_config(tmp_path / "home", model)) as gw:
        tab = await open_tab(http, web_base(gw), live="1")
        await tab.say("start and wait")
        frames = []
        while not frames or frames[-1].get("text") != "waited":
            frames.append(await tab.frame())
    statuses = [f["text"] for f in frames if f["type"] == "status"]
    assert any(s.startswith("waiting for job ") and s.endswith("…") for s in statuses)


async def test_an_endpoint_that_ignores_stream_is_read_as_a_whole_answer(
        tmp_path: Path, model, http) -> None:
    from tests.fakes.openai_server import Raw

    model.script(Raw('{"choices": [{"index": 0, "finish_reason": "stop", '
                     '"message": {"role": "assistant", "content": "all at once"}}]}'))
    async with running_gateway(model_config(tmp_path / "home", model)) as gw:
        tab = await open_tab(http, web_base(gw))
        await tab.say("hi")
        assert (await tab.frame(deltas=True))["text"] == "all at once"


async def test_an_endpoint_that_refuses_stream_options_is_asked_without_them(
        tmp_path: Path, model, http) -> None:
    from tests.fakes.openai_server import Fail

    model.script(Fail(400, "Unrecognized request argument supplied: stream_options"))
    model.brain = lambda req: Say("streamed anyway")
    async with running_gateway(model_config(tmp_path / "home", model)) as gw:
        tab = await open_tab(http, web_base(gw))
        await tab.say("one")
        assert (await tab.frame())["text"] == "streamed anyway"
        await tab.say("two")
        assert (await tab.frame())["text"] == "streamed anyway"
    assert [("stream_options" in r.body, r.stream) for r in model.requests] == [
        (True, True), (False, True), (False, True)]


async def test_an_endpoint_that_refuses_stream_is_asked_for_whole_answers_from_then_on(
        tmp_path: Path, model, http) -> None:
    model.streams = False  # a 400 naming 'stream', as OpenAI's o1 answered
    model.brain = lambda req: Say(words("whole", 8))
    async with running_gateway(model_config(tmp_path / "home", model)) as gw:
        tab = await open_tab(http, web_base(gw))
        for text in ("one", "two"):
            await tab.say(text)
            answer = await tab.frame(deltas=True)
            assert (answer["type"], answer["text"]) == ("message", words("whole", 8))
            assert answer["kind"] == "reply"
    assert [(r.stream, r.error is None) for r in model.requests] == [
        (True, False), (False, True), (False, True)]  # refused once, then never asked


async def test_stop_while_the_final_edit_waits_out_a_429_leaves_no_preview(
        tmp_path: Path, model) -> None:
    from tests.fakes.telegram_server import FakeTelegram
    from tests.test_telegram import FORUM, all_taken_and_settled

    model.chunk_delay = 0.15
    model.brain = lambda req: Say(words("half", 8))
    async with FakeTelegram() as telegram:
        async with running_gateway(_telegram(tmp_path, telegram, model)) as gw:
            await gw.runner.adapters["telegram"].wait_connected()
            _topic_message(telegram, "go", 42)
            (preview,) = await telegram.wait_for_sent(1, timeout=30)
            telegram.fail_next_edit(status=429, retry_after=2, count=10)
            await eventually(lambda: len([p for m, p in telegram.calls
                                          if m == "editMessageText"]) >= 2,
                             timeout=30, what="the final edit refused")
            _topic_message(telegram, "/stop", 42)
            await eventually(lambda: telegram.message_text(FORUM, preview.message_id) is None,
                             timeout=20, what="the preview deleted")
            await all_taken_and_settled(gw, telegram)  # the stopped turn is over
    assert not [t for t in telegram.visible(FORUM, 42) if "half-" in t]


def _sse(*events: str) -> str:
    return "".join(f"data: {e}\n\n" for e in events)


_PIECE = ('{"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m", '
          '"choices": [{"index": 0, "delta": {"content": "%s"}, "finish_reason": null}]}')


@pytest.mark.parametrize("stream, asked", [
    # an error event mid-answer: as a server error, asked again
    (_sse(_PIECE % "half", '{"error": {"message": "overloaded"}}'), 2),
    # a stream that stops with neither a finish reason nor [DONE] was cut: asked again
    (_sse(_PIECE % "half"), 2),
    # [DONE] without a finish reason: a whole answer (some servers leave it out)
    (_sse(_PIECE % "from the stream", "[DONE]"), 1),
])
async def test_how_a_stream_ends_decides_whether_it_is_asked_again(
        tmp_path: Path, model, http, stream: str, asked: int) -> None:
    from tests.fakes.openai_server import Raw

    model.script(Raw(stream, content_type="text/event-stream"))
    model.brain = lambda req: Say("asked again")
    async with running_gateway(model_config(tmp_path / "home", model)) as gw:
        tab = await open_tab(http, web_base(gw))
        await tab.say("hi")
        final = await tab.frame()
        assert final["text"] == ("asked again" if asked == 2 else "from the stream")
        assert final["kind"] == "reply"
    assert len(model.requests) == asked
