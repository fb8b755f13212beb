"""A Slack send carries its dedupe key, so that after a crash the next life can tell from
the channel whether it went out — and does not post it a second time.

Slack does not deduplicate a post; it keeps the metadata an app attaches to its message.
Each part the gateway posts with a dedupe key carries a digest of it (and of the part)
in its metadata, a streamed reply's final edit too, and ``SlackAdapter.delivered`` reads
the bot's messages after the route's anchor for it. The real slack-sdk against the fake
Slack, which keeps and shows metadata as Slack does.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import structlog
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

import gateway.platforms.slack.sends as sends_module
from gateway.config.settings import Config
from gateway.daemon.assembly import Gateway
from gateway.delivery.notifications import INTERRUPTED, NewNotification
from gateway.platforms.slack.adapter import SlackAdapter
from gateway.platforms.slack.sends import SEND_EVENT, send_key
from gateway.words.events import reply_key
from gateway.words.return_address import ReturnAddress
from gateway.words.route import Route
from tests.fakes.openai_server import FakeOpenAI, Say
from tests.fakes.slack_server import BOT_TOKEN, FakeSlack, SlackMessage
from tests.helpers import eventually, eventually_async, settled
from tests.model_support import model_settings
from tests.test_matrix_replay import STOPPED, crash_at_the_reply_record, journal_states
from tests.test_slack import DM, GENERAL, slack_config, slack_gateway


@pytest.fixture
async def fake() -> AsyncIterator[FakeSlack]:
    async with FakeSlack() as server:  # (five messages a page: a read follows the cursor)
        yield server


@pytest.fixture
async def gateway(tmp_path: Path, fake: FakeSlack) -> AsyncIterator[Gateway]:
    async with slack_gateway(slack_config(tmp_path / "home", fake)) as gw:
        yield gw


def slack(gw: Gateway) -> SlackAdapter:
    adapter = gw.runner.adapters["slack"].inner
    assert isinstance(adapter, SlackAdapter)
    return adapter


async def conversation(gw: Gateway, fake: FakeSlack, channel: str) -> Route:
    """The stored route of the conversation a person starts in ``channel`` (a thread
    under their message, in a channel; the DM itself), once their message is answered."""
    posts = len(fake.posts)
    ts = fake.user_message(channel=channel, text="hello")
    await fake.wait_for_posts(posts + 1)
    await settled(gw)
    key = (f"agent:main:slack:dm:{channel}" if channel == DM
           else f"agent:main:slack:thread:{channel}:{ts}")
    session = await gw.store.live_session(key)
    assert session is not None and session.route.message_id == ts
    return session.route


def carried(fake: FakeSlack, text: str, channel: str = DM) -> list[dict[str, Any] | None]:
    """The metadata of each of the bot's messages in ``channel`` holding ``text``, as
    Slack keeps it."""
    return [m.metadata for m in fake.messages(channel) if text in m.text]


def keyed(dedupe_key: str, part: int = 0) -> dict[str, Any]:
    return {"event_type": SEND_EVENT, "event_payload": {"key": send_key(dedupe_key, part)}}


# ---------------------------------------------------------------------- what a send carries

async def test_each_part_of_a_keyed_send_carries_the_key_and_its_index(gateway, fake) -> None:
    route = await conversation(gateway, fake, DM)
    long = "marker-long " + "word " * 1000  # more than one Slack message
    result = await slack(gateway).send(route, long, kind="notification", dedupe_key="k-long")
    assert result.ok
    parts = [m.metadata for m in fake.messages(DM)][-2:]
    assert parts == [keyed("k-long", 0), keyed("k-long", 1)]
    await slack(gateway).send(route, "marker-plain", kind="system")
    assert carried(fake, "marker-plain") == [None]  # no key, nothing to find it by


async def test_a_jobs_notice_carries_its_notifications_key(gateway, fake) -> None:
    parent = fake.user_message(channel=GENERAL, text="/bg sleep 0.2; echo marker-job")

    def notices() -> list[SlackMessage]:
        return [m for m in fake.messages(GENERAL, parent) if m.text.startswith("Job ")]

    await eventually(notices, timeout=30, what="the job's notice")
    await settled(gateway)
    (notification,) = [n for n in await gateway.outbox.list() if n.job_id]
    key = reply_key(notification.idempotency_key, 0)
    assert [m.metadata for m in notices()] == [keyed(key)]
    session = await gateway.store.live_session(f"agent:main:slack:thread:{GENERAL}:{parent}")
    assert session is not None
    assert await slack(gateway).delivered(session.route, key) is True


async def test_a_streamed_replys_final_edit_puts_its_key_on_the_preview(gateway, fake) -> None:
    route = await conversation(gateway, fake, DM)
    adapter = slack(gateway)
    preview = adapter.live_reply(route, None)
    posts = len(fake.posts)
    await preview.show("marker-stream so far")
    await fake.wait_for_posts(posts + 1)
    assert carried(fake, "marker-stream") == [None]  # a draft: not the reply yet
    result = await preview.finish("marker-stream, the whole reply", kind="reply",
                                  session_id=None, dedupe_key="k-stream")
    assert result.ok and len(fake.posts) == posts + 1  # the preview became the reply
    assert carried(fake, "marker-stream") == [keyed("k-stream")]
    assert await adapter.delivered(route, "k-stream") is True


# ---------------------------------------------------------------------- delivered

async def test_delivered_finds_a_key_sent_after_the_anchor_and_not_one_never_sent(
        gateway, fake) -> None:
    route = await conversation(gateway, fake, DM)
    adapter = slack(gateway)
    assert await adapter.delivered(route, "k-sent") is False
    assert (await adapter.send(route, "marker-sent", kind="notification",
                               dedupe_key="k-sent")).ok
    for n in range(7):  # newer messages: the send is on the history's second page
        await adapter.send(route, f"later {n}", kind="notification", dedupe_key=f"k-{n}")
    assert await adapter.delivered(route, "k-sent") is True
    assert await adapter.delivered(route, "k-never") is False


async def test_delivered_reads_the_routes_thread_and_only_it(gateway, fake) -> None:
    thread = await conversation(gateway, fake, GENERAL)
    top = Route("slack", "group", GENERAL, user_id=thread.user_id,
                message_id=thread.message_id)
    adapter = slack(gateway)
    assert (await adapter.send(thread, "marker-in-thread", kind="notification",
                               dedupe_key="k-thread")).ok
    for n in range(6):  # more replies than a page holds
        await adapter.send(thread, f"reply {n}", kind="notification", dedupe_key=f"k-{n}")
    assert (await adapter.send(top, "marker-at-top", kind="notification",
                               dedupe_key="k-top")).ok
    assert fake.messages(GENERAL, thread.thread_id)[1].text == "marker-in-thread"
    assert await adapter.delivered(thread, "k-thread") is True
    assert await adapter.delivered(thread, "k-top") is False  # said at the top, not here
    assert await adapter.delivered(top, "k-thread") is False  # a reply is not the top's
    assert await adapter.delivered(top, "k-top") is True


async def test_delivered_cannot_tell_without_an_anchor_or_a_read(gateway, fake) -> None:
    route = await conversation(gateway, fake, DM)
    adapter = slack(gateway)
    await adapter.send(route, "marker-sent", kind="notification", dedupe_key="k-sent")
    unanchored = Route("slack", "dm", DM, user_id=route.user_id)
    assert await adapter.delivered(unanchored, "k-sent") is None
    fake.fail_next("conversations.history", status=503, error="service_unavailable",
                   count=10)  # every try of the read: Slack is down
    assert await adapter.delivered(route, "k-sent") is None
    fake._failures.clear()
    fake.scopes = tuple(s for s in fake.scopes if s != "im:history")  # missing_scope
    assert await adapter.delivered(route, "k-sent") is None


async def test_delivered_cannot_tell_when_more_came_after_the_anchor_than_it_reads(
        gateway, fake, monkeypatch: pytest.MonkeyPatch) -> None:
    route = await conversation(gateway, fake, DM)
    adapter = slack(gateway)
    await adapter.send(route, "marker-sent", kind="notification", dedupe_key="k-sent")
    for n in range(8):  # newer than it, on the pages before its own
        await adapter.send(route, f"later {n}", kind="notification")
    monkeypatch.setattr(sends_module, "READ_BACK_LIMIT", 4)
    assert await adapter.delivered(route, "k-sent") is None  # not read: not "never sent"
    assert await adapter.delivered(route, "k-never") is None


# ---------------------------------------------------------------------- after a kill -9

async def interrupted_notice(config: Config, fake: FakeSlack, *, went_out: bool
                             ) -> tuple[str, Route]:
    """A notice of a DM conversation as a kill -9 between its send and its record leaves
    it, once the next life's start-up has settled the dead router's claims: pending,
    marked interrupted, nothing of its send recorded — and, when ``went_out``, its
    message in the DM, as that send made it. Its text and route.

    It waits for Slack (``not_before``), as a notice does while its platform is down: it
    is tried once the next life's Slack is connected (:func:`after_the_restart`)."""
    text = "Job k1 finished: exit code 0 after 1 s."
    async with slack_gateway(config) as gw:
        route = await conversation(gw, fake, DM)
        session = await gw.store.live_session(f"agent:main:slack:dm:{DM}")
        assert session is not None
        await gw.router.stop()  # (nothing delivers it in this life)
        await gw.outbox.produce([NewNotification(
            "k1:completion:0", "completion",
            ReturnAddress(session.session_key, session.id, route), text, job_id="k1")])
        (notice,) = await gw.outbox.list()
        if went_out:
            sent = await slack(gw).send(route, text, kind="notification",
                                        dedupe_key=reply_key(notice.idempotency_key, 0))
            assert sent.ok
    with sqlite3.connect(config.state_db) as db:
        db.execute("UPDATE notifications SET state = 'pending', last_error = ?, "
                   "not_before = ? WHERE id = ?",
                   (INTERRUPTED, time.time() + 3600, notice.id))
    return text, route


async def after_the_restart(config: Config) -> list[dict[str, Any]]:
    with structlog.testing.capture_logs() as logs:
        async with slack_gateway(config) as gw:  # (Slack connected)
            # what the router does as a platform comes back, said here: it may have
            # started listening only after Slack's hello
            await gw.outbox.make_due("agent:main:slack:")
            gw.router.wake()

            async def delivered() -> bool:
                return {n.state for n in await gw.outbox.list()} == {"delivered"}

            await eventually_async(delivered, timeout=60,
                                   what="the notice delivered after the restart")
            await settled(gw)
    return logs


async def test_a_notice_that_went_out_before_the_kill_is_not_posted_again(
        tmp_path: Path, fake) -> None:
    config = slack_config(tmp_path / "home", fake)
    text, _ = await interrupted_notice(config, fake, went_out=True)
    logs = await after_the_restart(config)
    assert [m.text for m in fake.messages(DM)].count(text) == 1
    assert any(e["event"] == "notification_sent_before_stop" for e in logs)
    assert not any(e["event"] == "maybe_repeated" for e in logs)


async def test_a_notice_the_kill_stopped_before_it_went_out_is_posted_once(
        tmp_path: Path, fake) -> None:
    config = slack_config(tmp_path / "home", fake)
    text, _ = await interrupted_notice(config, fake, went_out=False)
    logs = await after_the_restart(config)
    assert [m.text for m in fake.messages(DM)].count(text) == 1
    assert not any(e["event"] == "maybe_repeated" for e in logs)


# ---------------------------------------------------------------------- the fake, as Slack

async def test_the_fake_refuses_malformed_metadata_as_slack_does(fake) -> None:
    web = AsyncWebClient(token=BOT_TOKEN, base_url=fake.api_base, retry_handlers=[])
    refused = {}
    for name, metadata in {"not json": "{event_type", "a list": "[1, 2]",
                           "no event_type": {"event_payload": {}},
                           "an empty event_type": {"event_type": " ", "event_payload": {}},
                           "a number for event_type": {"event_type": 5, "event_payload": {}},
                           "no event_payload": {"event_type": "homing_send"},
                           "a string payload": {"event_type": "homing_send",
                                                "event_payload": "x"},
                           "nothing in it": {}}.items():
        with pytest.raises(SlackApiError) as caught:
            await web.chat_postMessage(channel=GENERAL, text="hi", metadata=metadata)
        refused[name] = caught.value.response["error"]
    assert refused == {"not json": "invalid_metadata_format",
                       "a list": "invalid_metadata_format",
                       **{name: "invalid_metadata_schema" for name in list(refused)[2:]}}
    assert fake.posts == []


async def test_the_fake_shows_metadata_only_to_a_read_that_asks_for_it(fake) -> None:
    web = AsyncWebClient(token=BOT_TOKEN, base_url=fake.api_base, retry_handlers=[])
    parent = fake.user_message(channel=GENERAL, text="a person's message")
    metadata = {"event_type": "homing_send", "event_payload": {"key": "abc"}}
    top = (await web.chat_postMessage(channel=GENERAL, text="top", metadata=metadata))["ts"]
    reply = (await web.chat_postMessage(channel=GENERAL, text="reply", thread_ts=parent,
                                        metadata=metadata))["ts"]

    async def read(**asked: Any) -> dict[str, Any]:
        history = (await web.conversations_history(channel=GENERAL, **asked))["messages"]
        replies = (await web.conversations_replies(channel=GENERAL, ts=parent,
                                                   **asked))["messages"]
        return {m["ts"]: m.get("metadata") for m in [*history, *replies]}

    assert set((await read()).values()) == {None}
    assert await read(include_all_metadata=True) == {top: metadata, reply: metadata,
                                                     parent: None}
    await web.chat_update(channel=GENERAL, ts=top, text="top, edited")  # kept
    await web.chat_update(channel=GENERAL, ts=reply, text="reply, edited", metadata={})
    assert await read(include_all_metadata=True) == {top: metadata, reply: None,
                                                     parent: None}


# ---------------------------------------------------------------------- a reply, after a kill -9

async def test_a_command_answered_before_the_crash_is_neither_answered_again_nor_doubted(
        tmp_path: Path, fake, monkeypatch: pytest.MonkeyPatch) -> None:
    """The command ran and its reply went out; the kill came before either was recorded.
    The next life finds the reply in the thread and finishes the message as answered,
    instead of telling the thread it may not have finished."""
    config = slack_config(tmp_path / "home", fake)
    async with slack_gateway(config) as gw:
        crash = crash_at_the_reply_record(monkeypatch, gw)
        parent = fake.user_message(channel=GENERAL, text="/run echo answered-$((6*7))")
        await crash.wait(timeout=60)
        monkeypatch.undo()
    crash.restore()
    assert journal_states(crash.path) == ["acted"]  # the command ran; no answer recorded
    async with slack_gateway(config) as gw:  # the restart after the crash
        await settled(gw)
        assert await gw.runner.inbound.unfinished() == []
    said = [m.text for m in fake.messages(GENERAL, parent)]
    assert sum("answered-42" in text for text in said) == 1, said
    assert not any(text.startswith(STOPPED) for text in said), said


async def test_a_streamed_reply_out_before_the_crash_is_not_sent_again(
        tmp_path: Path, fake, monkeypatch: pytest.MonkeyPatch, model: FakeOpenAI) -> None:
    """The reply was a preview edited into its final text; the turn did nothing that
    lasts, so without a look at the DM it would run again and post a second copy."""
    answer = " ".join(f"streamed-{i}" for i in range(30))
    model.chunk_delay = 0.03
    model.brain = lambda req: Say(answer)
    config = slack_config(tmp_path / "home", fake, **model_settings(model),
                          platforms__slack__stream_edit_interval_seconds=0.2)
    async with slack_gateway(config) as gw:
        crash = crash_at_the_reply_record(monkeypatch, gw)
        fake.user_message(channel=DM, text="tell me")
        await crash.wait(timeout=60)
        monkeypatch.undo()
    crash.restore()
    assert journal_states(crash.path) == ["started"]
    asked = len(model.requests)
    async with slack_gateway(config) as gw:
        await settled(gw)
    assert [m.text for m in fake.messages(DM)] == [answer]  # the preview, made final
    assert fake.messages(DM)[0].edits  # (it was a preview)
    assert len(model.requests) == asked  # the model was not asked again
