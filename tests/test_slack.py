"""The Slack adapter: the real slack-sdk (Socket Mode and the Web API) against the fake
Slack, with the whole gateway running."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from gateway.config.settings import Config
from gateway.daemon.assembly import Gateway, running_gateway
from gateway.platforms.questions import PlatformAnswers
from gateway.platforms.slack.adapter import SlackAdapter
from tests.approval_support import dangerous, runner_brain, runs
from tests.conftest import make_config
from tests.fakes.openai_server import FakeOpenAI, Say
from tests.fakes.slack_server import APP_TOKEN, BOT_TOKEN, Call, FakeSlack
from tests.helpers import eventually, eventually_async, settled, write_lock_held
from tests.model_support import model_settings

ALICE, EVE = "U0123ABCD", "U0EVE"
GENERAL, DM = "C0GENERAL", "D0DM"


@pytest.fixture
async def fake() -> AsyncIterator[FakeSlack]:
    async with FakeSlack() as server:
        yield server


def slack_config(home: Path, fake: FakeSlack, **overrides: object) -> Config:
    settings: dict[str, object] = {
        "platforms__slack__enabled": True, "platforms__slack__bot_token": BOT_TOKEN,
        "platforms__slack__app_token": APP_TOKEN,
        "platforms__slack__api_base": fake.api_base,
        "platforms__slack__allowed_users": [ALICE]}
    return make_config(home, **{**settings, **overrides})


@asynccontextmanager
async def slack_gateway(config: Config) -> AsyncIterator[Gateway]:
    async with running_gateway(config) as gw:
        adapter = gw.runner.adapters["slack"].inner  # the platform's own, behind the fence
        assert isinstance(adapter, SlackAdapter)
        await adapter.wait_connected(timeout=30)
        yield gw


@pytest.fixture
async def gateway(tmp_path: Path, fake: FakeSlack) -> AsyncIterator[Gateway]:
    async with slack_gateway(slack_config(tmp_path / "home", fake)) as gw:
        yield gw


def posted(fake: FakeSlack, starts: str = "") -> list[Call]:
    return [p for p in fake.posts if str(p.params.get("text", "")).startswith(starts)]


def first_line(post: Call) -> str:
    """A reply's first line (the command agent adds a hint to plain text)."""
    return str(post.params["text"]).split("\n")[0]


def notices(fake: FakeSlack) -> list[Call]:
    return posted(fake, "Job ")


# ---------------------------------------------------------------------- routes

async def test_a_top_level_message_is_answered_in_a_thread_that_is_then_its_conversation(
        gateway, fake) -> None:
    ts = fake.user_message(channel=GENERAL, text="hello")
    (reply,) = await fake.wait_for_posts(1)
    assert reply.params["channel"] == GENERAL and reply.params["thread_ts"] == ts
    fake.user_message(channel=GENERAL, thread_ts=ts, text="and more")
    await fake.wait_for_posts(2)
    await settled(gateway)
    assert [m.text.split("\n")[0] for m in fake.messages(GENERAL, ts)] == [
        "Received: hello", "Received: and more"]
    assert fake.messages(GENERAL) == []  # nothing at the channel's top level
    session = await gateway.store.live_session(f"agent:main:slack:thread:{GENERAL}:{ts}")
    assert session is not None and session.route.parent_chat_id == GENERAL


async def test_notices_reach_the_thread_or_dm_their_job_started_in_and_nowhere_else(
        gateway, fake) -> None:
    fake.add_channel("C0BUILDS")
    top = fake.user_message(channel=GENERAL, text="/bg sleep 0.5; echo marker-top")
    parent = fake.user_message(channel="C0BUILDS", text="a thread for b")
    await eventually(lambda: len(fake.messages("C0BUILDS", parent)) == 1,
                     what="the answer to the thread's first message")
    fake.user_message(channel="C0BUILDS", thread_ts=parent,
                      text="/bg sleep 0.5; echo marker-reply")
    fake.user_message(channel=DM, text="/bg sleep 0.5; echo marker-dm")
    await eventually(lambda: len(notices(fake)) == 3, timeout=30, what="every notice")
    await settled(gateway)
    where = {"top": (GENERAL, top), "reply": ("C0BUILDS", parent), "dm": (DM, None)}
    for name, (channel, thread) in where.items():
        (notice,) = [n for n in notices(fake) if f"marker-{name}" in n.params["text"]]
        assert (notice.params["channel"], notice.params.get("thread_ts")) == (channel, thread)
    assert len(notices(fake)) == 3


async def test_with_reply_in_thread_off_a_channel_is_answered_at_its_top_level(
        tmp_path: Path, fake) -> None:
    config = slack_config(tmp_path / "home", fake, platforms__slack__reply_in_thread=False)
    async with slack_gateway(config) as gw:
        fake.user_message(channel=GENERAL, text="/bg sleep 0.3; echo marker-channel")
        await eventually(lambda: notices(fake), timeout=30, what="the notice")
        await settled(gw)
    assert all("thread_ts" not in p.params for p in fake.posts)
    assert [m.text for m in fake.messages(GENERAL)][-1].startswith("Job ")


async def test_only_allowed_people_in_allowed_channels_are_served_and_never_its_own_echo(
        tmp_path: Path, fake) -> None:
    fake.add_channel("C0ELSEWHERE")
    fake.add_channel("D0EVE", kind="im", user=EVE)
    config = slack_config(tmp_path / "home", fake,
                          platforms__slack__allowed_channels=[GENERAL])
    async with slack_gateway(config) as gw:
        fake.user_message(channel="C0ELSEWHERE", text="not here")
        fake.user_message(channel=GENERAL, text="who am I", user=EVE)
        fake.user_message(channel="D0EVE", text="let me in", user=EVE)
        fake.user_message(channel=GENERAL, text="and me?")
        await eventually(lambda: len(fake.posts) == 2, timeout=30, what="two answers")
        await settled(gw)
    pairing, reply = sorted(fake.posts, key=lambda p: p.params["channel"] != "D0EVE")
    assert pairing.params["channel"] == "D0EVE"
    assert "homing pairing approve slack" in pairing.params["text"]
    # the bot's own posts come back as events too: answering them would never end
    assert reply.params["channel"] == GENERAL and first_line(reply) == "Received: and me?"
    assert len(fake.posts) == 2


# ---------------------------------------------------------------------- text

async def test_a_reply_is_slack_mrkdwn_and_mentions_nobody(tmp_path: Path, fake,
                                                           model: FakeOpenAI) -> None:
    model.brain = lambda req: Say(
        "**Build** done & `a<b` — see [the log](https://ci.example/run?id=1&x=2).\n\n"
        "@here @channel <!everyone> <@U0123ABCD>")
    config = slack_config(tmp_path / "home", fake, agent__stream=False,
                          **model_settings(model))
    async with slack_gateway(config) as gw:
        fake.user_message(channel=DM, text="report")
        (reply,) = await fake.wait_for_posts(1)
        await settled(gw)
    text = reply.params["text"]
    assert text == ("*Build* done &amp; `a&lt;b` — see "
                    "<https://ci.example/run?id=1&amp;x=2|the log>.\n\n"
                    "@\u200bhere @\u200bchannel &lt;!everyone&gt; &lt;@U0123ABCD&gt;")
    assert reply.params.get("link_names") in (False, "0", 0)


async def test_a_long_output_arrives_in_parts_of_at_most_4000_with_code_blocks_closed(
        gateway, fake) -> None:
    ts = fake.user_message(channel=GENERAL, text="/run for i in $(seq 1 45); do "
                           "printf 'row %02d %0190d\\n' $i 0; done")
    await eventually(lambda: len(fake.posts) >= 2, timeout=30, what="the parts")
    await settled(gateway)
    parts = [p.params["text"] for p in fake.posts]
    assert sum(len(p) for p in parts) > 4000 and all(len(p) <= 4000 for p in parts)
    for part in parts:
        assert len([ln for ln in part.splitlines() if ln.startswith("```")]) % 2 == 0
    assert parts[0].startswith("$ for i") and "row 45" in parts[-1]
    assert all(p.params["thread_ts"] == ts for p in fake.posts)


# ---------------------------------------------------------------------- streaming

async def test_a_streamed_reply_grows_in_its_thread_and_ends_as_one_message(
        tmp_path: Path, fake, model: FakeOpenAI) -> None:
    answer = " ".join(f"word-{i}" for i in range(40))
    model.chunk_delay = 0.05
    model.brain = lambda req: Say(answer)
    config = slack_config(tmp_path / "home", fake, **model_settings(model),
                          platforms__slack__stream_edit_interval_seconds=0.2)
    async with slack_gateway(config) as gw:
        fake.fail_next("chat.update", status=429, retry_after=1, count=1)
        ts = fake.user_message(channel=GENERAL, text="tell me")
        await eventually(lambda: [m.text for m in fake.messages(GENERAL, ts)] == [answer],
                         timeout=30, what="one final message")
        await settled(gw)
    (message,) = fake.messages(GENERAL, ts)
    assert len(fake.posts) == 1 and fake.posts[0].params["thread_ts"] == ts
    assert len(fake.updates) >= 2 and message.edits  # a preview that grew, then the answer
    assert all(u.params["ts"] == message.ts for u in fake.updates)
    assert fake.deletes == []


# ---------------------------------------------------------------------- approvals

async def test_an_approval_is_decided_once_by_its_button_and_shows_its_outcome(
        tmp_path: Path, fake, model: FakeOpenAI, marker: Path) -> None:
    model.brain = runner_brain(marker)
    config = slack_config(tmp_path / "home", fake, **model_settings(model))
    async with slack_gateway(config) as gw:
        ts = fake.user_message(channel=GENERAL, text="clean up")
        (request,) = await eventually(
            lambda: [p for p in fake.posts if p.params.get("blocks")], timeout=30,
            what="the approval request")
        assert request.params["thread_ts"] == ts
        blocks = json.loads(request.params["blocks"]) if isinstance(
            request.params["blocks"], str) else request.params["blocks"]
        buttons = [(b["text"]["text"], b["action_id"]) for b in blocks[1]["elements"]]
        approval_id = buttons[0][1].split(":")[1]
        assert buttons == [("Approve once", f"ap:{approval_id}:o"),
                           ("Approve for this session", f"ap:{approval_id}:s"),
                           ("Deny", f"ap:{approval_id}:d")]
        message_ts = request_ts(fake, request)
        refused = fake.press_button(channel=GENERAL, message_ts=message_ts,
                                    action_id=f"ap:{approval_id}:o", value="x", user=EVE)
        await fake.wait_acked(refused)
        await eventually(lambda: [c for c in fake.calls if c.method == "chat.postEphemeral"],
                         timeout=30, what="the refusal, told to eve alone")
        assert runs(marker) == 0
        presses = [fake.press_button(channel=GENERAL, message_ts=message_ts,
                                     action_id=f"ap:{approval_id}:o", value="x")
                   for _ in range(2)]
        for press in presses:
            await fake.wait_acked(press)
        await eventually(lambda: [m for m in fake.messages(GENERAL, ts)
                                  if m.text.startswith("tool said: ")], timeout=30,
                         what="the command's result")
        await settled(gw)
    assert runs(marker) == 1
    (shown,) = [m for m in fake.messages(GENERAL, ts) if m.ts == message_ts]
    assert shown.text.endswith("Approved once by alice (run in the turn).")
    assert dangerous(marker).split(";")[0] in shown.text.replace("&gt;", ">")
    assert all(b["type"] != "actions" for b in shown.blocks or [])
    ephemeral = [c for c in fake.calls if c.method == "chat.postEphemeral"]
    assert [c.params["user"] for c in ephemeral] == [EVE, ALICE]  # then: already settled
    assert "Already settled" in ephemeral[1].params["text"]


def request_ts(fake: FakeSlack, request: Call) -> str:
    (message,) = [m for m in fake.messages(request.params["channel"],
                                           request.params.get("thread_ts"))
                  if m.blocks and any(b["type"] == "actions" for b in m.blocks)]
    return message.ts


# ---------------------------------------------------------------------- files

async def test_a_file_comes_in_with_the_bot_token_and_one_goes_out_into_the_thread(
        tmp_path: Path, fake) -> None:
    root = tmp_path / "out"
    root.mkdir()
    (root / "build.log").write_text("ok\n")
    config = slack_config(tmp_path / "home", fake, attachments__send_roots=[str(root)])
    async with slack_gateway(config) as gw:
        shared = fake.add_file(name="notes.txt", content=b"hello slack", mimetype="text/plain")
        ts = fake.user_message(channel=GENERAL, text="my notes", files=[shared])
        (reply,) = await fake.wait_for_posts(1)
        fake.user_message(channel=GENERAL, thread_ts=ts, text=f"/send {root / 'build.log'} "
                                                              f"the log")
        (upload,) = await fake.wait_for_uploads(1)
        await settled(gw)
    saved = list((tmp_path / "home" / "files").rglob("*notes.txt"))
    assert len(saved) == 1 and saved[0].read_bytes() == b"hello slack"
    assert str(saved[0]) in reply.params["text"] and reply.params["thread_ts"] == ts
    assert (upload.channel, upload.thread_ts, upload.filename, upload.content,
            upload.initial_comment) == (GENERAL, ts, "build.log", b"ok\n", "the log")


# ---------------------------------------------------------------------- delivery

async def test_rate_limits_and_server_errors_lose_and_reorder_nothing(gateway, fake) -> None:
    fake.fail_next("chat.postMessage", status=429, retry_after=1, count=2)
    fake.fail_next("chat.postMessage", status=500, error="internal_error", count=2)
    for i in range(5):
        fake.user_message(channel=DM, text=f"msg {i}")
    await eventually(lambda: len(fake.posts) >= 5, timeout=60, what="five replies")
    await settled(gateway)
    assert [first_line(p) for p in fake.posts] == [f"Received: msg {i}" for i in range(5)]
    failed = [c for c in fake.calls if c.method == "chat.postMessage"]
    assert len(failed) == 9  # four refused, each tried again, and five accepted


# ---------------------------------------------------------------------- the way in

async def test_an_envelope_is_acked_only_after_its_journal_commit(tmp_path: Path,
                                                                   fake) -> None:
    """While the store's write lock is held elsewhere the message cannot be journaled,
    so its envelope stays unacked and Slack delivers it again; once the lock goes, it is
    journaled, acked, and answered once."""
    fake.ack_deadline = 0.5
    config = slack_config(tmp_path / "home", fake)
    async with slack_gateway(config) as gw:
        async with write_lock_held(str(config.state_db)):
            fake.user_message(channel=DM, text="confirmed once written")
            (first,) = await eventually(lambda: fake.envelopes[:1], what="the envelope")
            await eventually(lambda: [e for e in fake.envelopes
                                      if e.get("retry_attempt", 0) >= 1], timeout=30,
                             what="the envelope delivered again, unacked")
            sent = [e["envelope_id"] for e in fake.envelopes]
            assert not fake.acked & set(sent), "acked before its journal commit"
        await fake.wait_for_posts(1)
        await eventually(lambda: not fake.unacked, what="every delivery acked")
        await settled(gw)
        rows = await gw.store.db.fetchall("SELECT platform_id FROM inbound")
    assert len(rows) == 1
    assert [first_line(p) for p in fake.posts] == ["Received: confirmed once written"]


async def test_a_redelivered_event_and_a_mention_sent_twice_are_taken_once(
        gateway, fake) -> None:
    fake.duplicate_next_event()
    fake.user_message(channel=DM, text="just once")
    ts = fake.user_message(channel=GENERAL, text="<@U0BOT> hi there")  # message + app_mention
    await eventually(lambda: len(fake.posts) >= 2, timeout=30, what="both answers")
    await eventually(lambda: not fake.unacked, what="every envelope acked")
    await settled(gateway)
    assert sorted(first_line(p) for p in fake.posts) == ["Received: hi there",
                                                         "Received: just once"]
    assert [m.text.split("\n")[0] for m in fake.messages(GENERAL, ts)] == [
        "Received: hi there"]


async def test_what_was_said_while_the_gateway_was_down_is_taken_in_once_after_it_starts(
        tmp_path: Path, fake) -> None:
    config = slack_config(tmp_path / "home", fake)
    async with slack_gateway(config):
        ts = fake.user_message(channel=GENERAL, text="start here")
        await fake.wait_for_posts(1)
    fake.user_message(channel=GENERAL, thread_ts=ts, text="missed in the thread")
    fake.user_message(channel=GENERAL, text="missed at the top")
    async with slack_gateway(config) as gw:
        await eventually(lambda: len(fake.posts) >= 3, timeout=30, what="both answered")
        await eventually(lambda: not fake.unacked, what="the queued events acked")
        await settled(gw)

        async def journaled() -> list:
            return await gw.store.db.fetchall("SELECT platform_id FROM inbound")

        rows = await eventually_async(journaled)
    texts = [first_line(p) for p in fake.posts]
    assert sorted(texts) == ["Received: missed at the top", "Received: missed in the thread",
                             "Received: start here"]
    assert len(rows) == 3
    read_back = [c for c in fake.calls if c.method == "conversations.replies"
                 and c.params.get("ts") == ts]
    assert read_back  # the thread's history was read, not only the queued events


async def test_a_message_said_long_after_the_workspace_came_up_is_answered_not_skipped_as_old(
        tmp_path: Path, fake) -> None:
    """A message's ts is the moment it was said, as on Slack: its age is counted from
    then, live and read back after a restart — never from when the workspace (here, the
    fake) came up. With inbound.max_age_seconds at 2, a workspace up for longer than
    that still gets its fresh messages run."""
    await asyncio.sleep(2.5)  # the workspace has been up longer than max_age_seconds
    config = slack_config(tmp_path / "home", fake, inbound__max_age_seconds=2)
    async with slack_gateway(config):
        ts = fake.user_message(channel=GENERAL, text="said just now")
        await fake.wait_for_posts(1)
    fake.user_message(channel=GENERAL, thread_ts=ts, text="said while it was down")
    async with slack_gateway(config) as gw:
        await fake.wait_for_posts(2)
        await settled(gw)
    assert [first_line(p) for p in fake.posts] == ["Received: said just now",
                                                   "Received: said while it was down"]


async def test_a_notice_due_while_the_socket_reconnects_is_delivered_once(
        gateway, fake) -> None:
    ts = fake.user_message(channel=GENERAL, text="/bg sleep 1; echo reconnect-marker")
    await fake.wait_for_posts(1)
    connections = fake.connections
    fake.disconnect_socket("refresh_requested")
    await eventually(lambda: fake.connections > connections, timeout=30,
                     what="a new connection")
    await eventually(lambda: notices(fake), timeout=30, what="the notice")
    await settled(gateway)
    (notice,) = notices(fake)
    assert "reconnect-marker" in notice.params["text"] and notice.params["thread_ts"] == ts


# ---------------------------------------------------------------------- status

async def test_where_the_app_has_agent_threads_the_turns_status_is_the_threads(
        tmp_path: Path) -> None:
    async with FakeSlack(assistant=True) as fake:
        async with slack_gateway(slack_config(tmp_path / "home", fake)) as gw:
            ts = fake.user_message(channel=GENERAL, text="/run echo status-marker")
            await fake.wait_for_posts(1)
            await settled(gw)
    shown = [(s.params.get("channel_id"), s.params.get("thread_ts"), s.params.get("status"))
             for s in fake.statuses]
    assert (GENERAL, ts, "is typing…") in shown and shown[-1] == (GENERAL, ts, "")


# ---------------------------------------------------------------------- setup, doctor

async def test_setup_checks_both_tokens_live_and_writes_the_section(fake) -> None:
    import argparse

    from gateway.platforms.questions import Prompter, SetupFailed
    from gateway.platforms.slack.setup import QUESTIONS

    parser = argparse.ArgumentParser()
    QUESTIONS.add_flags(parser)
    args = parser.parse_args(["--slack-bot-token-env", "BOT", "--slack-app-token-env", "APP",
                              "--slack-user-id", ALICE, "--slack-api-base", fake.api_base])
    environ = {"BOT": BOT_TOKEN, "APP": APP_TOKEN}
    answers = await _in_thread(QUESTIONS.ask, args, environ, Prompter(False))
    assert answers.section == {"enabled": True, "bot_token": "${SLACK_BOT_TOKEN}",
                               "app_token": "${SLACK_APP_TOKEN}", "allowed_users": [ALICE],
                               "api_base": fake.api_base}
    assert answers.secrets == {"SLACK_BOT_TOKEN": BOT_TOKEN, "SLACK_APP_TOKEN": APP_TOKEN}
    swapped = {"BOT": APP_TOKEN, "APP": BOT_TOKEN}
    with pytest.raises(SetupFailed, match="refused the token"):
        await _in_thread(QUESTIONS.ask, args, swapped, Prompter(False))
    with pytest.raises(SystemExit):
        parser.parse_args(["--slack-user-id", "12345"])  # Slack ids are not numbers


async def _in_thread(ask: Callable[..., PlatformAnswers], *args: object) -> PlatformAnswers:
    return await asyncio.to_thread(ask, *args)  # setup asks with asyncio.run of its own


async def test_doctor_names_the_scopes_the_bot_lacks_with_the_fix(tmp_path: Path) -> None:
    from gateway.platforms.checks import DoctorContext
    from gateway.platforms.slack.doctor import checks

    scopes = ("chat:write", "channels:history", "im:history", "files:read")
    async with FakeSlack(scopes=scopes) as fake:
        config = slack_config(tmp_path / "home", fake)
        found = {c.name: c for c in await checks(config.platforms.section("slack"),
                                                 DoctorContext(config))}
        bad = slack_config(tmp_path / "home", fake,
                           platforms__slack__app_token=APP_TOKEN[:-4] + "zzzz")
        refused = {c.name: c for c in await checks(bad.platforms.section("slack"),
                                                   DoctorContext(bad))}
    assert found["slack token"].status == "ok" and found["slack app token"].status == "ok"
    lacking = found["slack scopes"]
    assert lacking.status == "fail"
    assert all(s in lacking.detail for s in ("groups:history", "files:write",
                                             "app_mentions:read"))
    assert "OAuth & Permissions" in (lacking.fix or "") and "reinstall" in (lacking.fix or "")
    assert refused["slack app token"].status == "fail"
    assert "connections:write" in (refused["slack app token"].fix or "")
