"""Inline keyboards, taps and callback answers of the fake Bot API, against the real PTB."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from telegram import Bot, CallbackQuery, InlineKeyboardButton, InlineKeyboardMarkup, Update
from telegram.error import BadRequest

from tests.fakes.telegram_buttons import BUTTON_DATA_INVALID
from tests.fakes.telegram_server import CallbackAnswer, FakeTelegram

FORUM = -1001234567890
TOPIC = 5


@pytest.fixture
async def fake() -> AsyncIterator[FakeTelegram]:
    async with FakeTelegram() as server:
        yield server


@pytest.fixture
async def bot(fake: FakeTelegram) -> AsyncIterator[Bot]:
    async with Bot(fake.token, base_url=fake.base_url,
                   base_file_url=fake.base_file_url) as b:
        yield b


def approve_deny(job: str) -> InlineKeyboardMarkup:
    return InlineKeyboardMarkup([[
        InlineKeyboardButton("Approve", callback_data=f"approve:{job}"),
        InlineKeyboardButton("Deny", callback_data=f"deny:{job}")]])


async def next_updates(bot: Bot, offset: int | None = None) -> list[Update]:
    return list(await bot.get_updates(offset=offset, timeout=0))


async def test_a_tap_on_a_topic_messages_button_arrives_as_a_callback_query(
        fake: FakeTelegram, bot: Bot) -> None:
    fake.user_message(chat_id=FORUM, text="run it", chat_type="supergroup", is_forum=True,
                      thread_id=TOPIC, is_topic_message=True)
    (inbound,) = await next_updates(bot)
    sent = await bot.send_message(FORUM, "Run job 42?", message_thread_id=TOPIC,
                                  reply_markup=approve_deny("42"))
    assert sent.reply_markup == approve_deny("42")
    markup = fake.message_markup(FORUM, sent.message_id)
    assert markup is not None
    assert [b["callback_data"] for b in markup["inline_keyboard"][0]] == [
        "approve:42", "deny:42"]

    query_id = fake.press(FORUM, sent.message_id, "approve:42", user_id=77, username="bob")
    (update,) = await next_updates(bot, offset=inbound.update_id + 1)
    query = update.callback_query
    assert isinstance(query, CallbackQuery)
    assert query.id == query_id and query.data == "approve:42" and query.chat_instance
    assert query.from_user.id == 77 and query.from_user.username == "bob"
    assert query.message is not None and query.message.message_id == sent.message_id
    assert query.message.chat.id == FORUM
    assert query.message.message_thread_id == TOPIC and query.message.is_topic_message
    assert query.message.reply_markup == approve_deny("42")

    assert await bot.answer_callback_query(query_id, text="Approved", show_alert=True)
    assert fake.callback_answers == [CallbackAnswer(id=query_id, text="Approved",
                                                    show_alert=True)]
    with pytest.raises(BadRequest, match="(?i)query is too old"):
        await bot.answer_callback_query(query_id, text="again")
    assert len(fake.callback_answers) == 1

    edited = await bot.edit_message_text("Job 42 approved", chat_id=FORUM,
                                         message_id=sent.message_id)
    assert not isinstance(edited, bool) and edited.reply_markup is None
    assert fake.message_markup(FORUM, sent.message_id) is None
    assert fake.visible(FORUM, TOPIC) == ["Job 42 approved"]


async def test_stale_data_is_still_delivered_and_unknown_queries_are_refused(
        fake: FakeTelegram, bot: Bot) -> None:
    sent = await bot.send_message(7, "Run job 1?", reply_markup=approve_deny("1"))
    await bot.edit_message_text("Run job 1 (again)?", chat_id=7, message_id=sent.message_id,
                                reply_markup=approve_deny("2"))
    assert fake.message_markup(7, sent.message_id) == approve_deny("2").to_dict()

    fake.press(7, sent.message_id, "approve:1")  # an old client's keyboard
    (update,) = await next_updates(bot)
    assert update.callback_query is not None and update.callback_query.data == "approve:1"
    assert update.callback_query.message is not None
    assert update.callback_query.message.chat.type == "private"

    with pytest.raises(BadRequest, match="(?i)query id is invalid"):
        await bot.answer_callback_query("123456")
    assert fake.callback_answers == []
    with pytest.raises(KeyError):
        fake.press(7, 99, "approve:1")  # no such message to tap on


async def test_edit_message_reply_markup_swaps_and_removes_the_keyboard(
        fake: FakeTelegram, bot: Bot) -> None:
    sent = await bot.send_message(7, "Run job 3?", reply_markup=approve_deny("3"))
    with pytest.raises(BadRequest, match="(?i)not modified"):
        await bot.edit_message_reply_markup(7, sent.message_id, reply_markup=approve_deny("3"))
    swapped = await bot.edit_message_reply_markup(7, sent.message_id,
                                                  reply_markup=approve_deny("4"))
    assert not isinstance(swapped, bool) and swapped.reply_markup == approve_deny("4")
    removed = await bot.edit_message_reply_markup(7, sent.message_id)
    assert not isinstance(removed, bool) and removed.reply_markup is None
    assert fake.message_markup(7, sent.message_id) is None
    assert fake.message_text(7, sent.message_id) == "Run job 3?" and fake.edits == []
    with pytest.raises(BadRequest, match="(?i)not modified"):
        await bot.edit_message_reply_markup(7, sent.message_id)
    with pytest.raises(BadRequest, match="(?i)message to edit not found"):
        await bot.edit_message_reply_markup(7, 99, reply_markup=approve_deny("3"))


@pytest.mark.parametrize(("button", "error"), [
    (InlineKeyboardButton("Too long", callback_data="x" * 65), BUTTON_DATA_INVALID),
    (InlineKeyboardButton("Empty", callback_data=""), BUTTON_DATA_INVALID),
    (InlineKeyboardButton("Both", callback_data="a", url="https://example.com"),
     "can't parse inline keyboard button"),
    (InlineKeyboardButton("Neither"), "can't parse inline keyboard button"),
    (InlineKeyboardButton("Bad link", url="example"), "BUTTON_URL_INVALID"),
])
async def test_bad_buttons_are_refused_as_the_bot_api_refuses_them(
        fake: FakeTelegram, bot: Bot, button: InlineKeyboardButton, error: str) -> None:
    keyboard = InlineKeyboardMarkup([[button]])
    with pytest.raises(BadRequest) as refused:
        await bot.send_message(7, "Run it?", reply_markup=keyboard)
    assert error.removeprefix("Bad Request: ").lower() in refused.value.message.lower()
    assert fake.sent == []

    ok = await bot.send_message(7, "Run it?", reply_markup=approve_deny("5"))
    with pytest.raises(BadRequest):
        await bot.edit_message_text("Run it now?", chat_id=7, message_id=ok.message_id,
                                    reply_markup=keyboard)
    assert fake.message_markup(7, ok.message_id) == approve_deny("5").to_dict()
    assert fake.message_text(7, ok.message_id) == "Run it?"


async def test_taps_reach_only_a_bot_that_asked_for_callback_queries(
        fake: FakeTelegram, bot: Bot) -> None:
    sent = await bot.send_message(FORUM, "Run job 7?", reply_markup=approve_deny("7"))
    fake.press(FORUM, sent.message_id, "approve:7")
    # as on Telegram: allowed_updates is kept, and a type not in it is not handed out
    assert await bot.get_updates(timeout=0, allowed_updates=["message"]) == ()
    fake.press(FORUM, sent.message_id, "deny:7")
    fake.user_message(chat_id=FORUM, text="hello", chat_type="supergroup")
    (update,) = await bot.get_updates(timeout=0)
    assert update.message is not None and update.message.text == "hello"
    fake.press(FORUM, sent.message_id, "deny:7")
    (tap,) = await bot.get_updates(offset=update.update_id + 1, timeout=0,
                                   allowed_updates=["message", "callback_query"])
    assert tap.callback_query is not None and tap.callback_query.data == "deny:7"
