"""Choice buttons on Telegram (``Adapter.send_choices``): the real python-telegram-bot
against the fake Bot API. ``/sessions`` in a forum topic answers with a button a
session; a tap is the one who tapped sending ``/resume <id>`` in that topic — so an
allowed user's tap resumes the session there (the next message goes to it), and a tap
by someone not allowed is refused as their message would be. A tap is answered once,
after it is journaled, and is asked for again while it cannot be."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from gateway.contract.choices import choice_data
from gateway.daemon.assembly import Gateway, running_gateway
from gateway.sessions.store import SessionEntry
from gateway.words.route import Route
from tests.fakes.telegram_server import CallbackAnswer, FakeTelegram, SentRecord
from tests.helpers import eventually, settled
from tests.test_telegram import (  # noqa: F401  (fixture)
    ALICE,
    FORUM,
    all_taken_and_settled,
    fake,
    telegram_config,
    to,
)

MALLORY = 2
TOPIC = dict(chat_id=FORUM, chat_type="supergroup", is_forum=True, thread_id=42,
             is_topic_message=True)


@pytest.fixture
async def gateway(tmp_path: Path, fake: FakeTelegram) -> AsyncIterator[Gateway]:  # noqa: F811
    async with running_gateway(telegram_config(tmp_path / "home", fake)) as gw:
        await gw.runner.adapters["telegram"].wait_connected()
        yield gw


async def say(fake: FakeTelegram, text: str) -> SentRecord:  # noqa: F811
    """Alice writes in topic 42; the bot's answer there."""
    before = len(to(fake, FORUM, 42))
    fake.user_message(text=text, **TOPIC)
    await eventually(lambda: len(to(fake, FORUM, 42)) > before, what=f"the answer to {text}")
    return to(fake, FORUM, 42)[before]


async def live(gw: Gateway) -> SessionEntry:
    """The topic's live session (Alice's conversation there)."""
    key = gw.runner.session_key_for(Route("telegram", "group", str(FORUM), thread_id="42",
                                          user_id=str(ALICE)))
    session = await gw.store.live_session(key)
    assert session is not None
    return session


async def answer_to(fake: FakeTelegram, query_id: str) -> CallbackAnswer:  # noqa: F811
    (answer,) = await eventually(
        lambda: [a for a in fake.callback_answers if a.id == query_id],
        what=f"the answer to tap {query_id}")
    return answer


async def two_sessions_listed(gw: Gateway, fake: FakeTelegram  # noqa: F811
                              ) -> tuple[SessionEntry, SentRecord, str]:
    """Two sessions in topic 42, the second live; ``/sessions``' answer and the first's
    button data."""
    await say(fake, "the build")
    first = await live(gw)
    assert (await say(fake, "/new")).text.startswith("Started a new session")
    await say(fake, "the deploy")
    listing = await say(fake, "/sessions")
    data = choice_data(f"/resume {first.id}")
    assert data is not None
    return first, listing, data


async def test_sessions_in_a_topic_has_a_button_each_and_a_tap_resumes_there(
        gateway: Gateway, fake: FakeTelegram) -> None:  # noqa: F811
    first, listing, data = await two_sessions_listed(gateway, fake)
    second = await live(gateway)
    assert listing.text.startswith("Sessions here, newest first:")
    assert listing.reply_to_message_id is not None  # under the /sessions it answers
    markup = fake.message_markup(FORUM, listing.message_id)
    assert markup is not None
    rows = markup["inline_keyboard"]
    assert [[(b["text"], b["callback_data"]) for b in row] for row in rows] == [
        [("1. the build", data)]]  # the live session has none; one button a row

    query_id = fake.press(FORUM, listing.message_id, data, user_id=ALICE, username="alice")
    answer = await answer_to(fake, query_id)
    assert answer.text is None and not answer.show_alert
    resumed = await eventually(lambda: [s for s in to(fake, FORUM, 42)
                                        if s.text.startswith("Resumed session 1")],
                               what="the resume's answer")
    assert resumed[0].reply_to_message_id == listing.message_id  # under the tapped message
    assert first.id in resumed[0].text
    assert (await live(gateway)).id == first.id
    ended = await gateway.store.get(second.id)
    assert ended is not None and ended.end_reason == "resume"

    await say(fake, "back on the build")  # the next message goes to the resumed session
    await all_taken_and_settled(gateway, fake)
    assert "back on the build" in [line.text for line in await gateway.store.messages(first.id)]
    assert len(fake.callback_answers) == 1
    journaled = [str(r[0]) for r in await gateway.store.db.fetchall(
        "SELECT platform_id FROM inbound")]
    assert f"callback:{query_id}" in journaled


async def test_a_tap_by_someone_not_allowed_is_not_acted_on(
        gateway: Gateway, fake: FakeTelegram) -> None:  # noqa: F811
    _, listing, data = await two_sessions_listed(gateway, fake)
    second = await live(gateway)
    sent_before = len(fake.sent)

    query_id = fake.press(FORUM, listing.message_id, data, user_id=MALLORY,
                          username="mallory")
    answer = await answer_to(fake, query_id)
    assert answer.text == "You may not use this bot here."
    await all_taken_and_settled(gateway, fake)
    assert (await live(gateway)).id == second.id  # nothing resumed
    assert len(fake.sent) == sent_before  # nothing said in the topic
    journaled = [str(r[0]) for r in await gateway.store.db.fetchall(
        "SELECT platform_id FROM inbound")]
    assert f"callback:{query_id}" not in journaled


async def test_a_tap_not_journaled_is_asked_for_again_and_taken_once(
        gateway: Gateway, fake: FakeTelegram,  # noqa: F811
        monkeypatch: pytest.MonkeyPatch) -> None:
    first, listing, data = await two_sessions_listed(gateway, fake)
    await settled(gateway)
    inbound = gateway.runner.inbound
    record = inbound.record
    #: how many answers the tap had when its write failed, and when it committed
    answered_at: list[int] = []

    async def failing_once(*args: Any, **kwargs: Any) -> Any:
        if not answered_at:  # the tap's first write never commits
            answered_at.append(len(fake.callback_answers))
            raise sqlite3.OperationalError("disk I/O error")
        entry = await record(*args, **kwargs)
        answered_at.append(len(fake.callback_answers))
        return entry

    monkeypatch.setattr(inbound, "record", failing_once)
    handed_out = fake.handed_out
    query_id = fake.press(FORUM, listing.message_id, data, user_id=ALICE, username="alice")
    await answer_to(fake, query_id)
    await all_taken_and_settled(gateway, fake)
    assert fake.handed_out >= handed_out + 2  # handed out again
    assert answered_at == [0, 0]  # not answered before its journal commit
    assert len(fake.callback_answers) == 1
    assert len([s for s in fake.sent if s.text.startswith("Resumed session 1")]) == 1
    assert (await live(gateway)).id == first.id


async def test_approval_buttons_and_choices_are_told_apart() -> None:
    from telegram import CallbackQuery, User

    from gateway.contract.approval import button_data
    from gateway.platforms.telegram.choices import choice_keyboard, is_choice
    from gateway.words.events import Choice

    person = User(ALICE, "Alice", False)
    approval = button_data("a1234567", "once")
    choice = choice_data("/resume s1")
    assert choice is not None
    assert not is_choice(CallbackQuery("1", person, "chat", data=approval))
    assert is_choice(CallbackQuery("2", person, "chat", data=choice))
    # a command over a button's 64 bytes gets no button (the text says how to type it)
    keyboard = choice_keyboard([Choice("long", "/resume " + "x" * 60),
                                Choice("short", "/resume s1")])
    assert keyboard is not None
    assert [[b.text for b in row] for row in keyboard.inline_keyboard] == [["short"]]
    assert choice_keyboard([Choice("long", "/resume " + "x" * 60)]) is None
