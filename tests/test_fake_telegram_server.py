"""The fake Bot API server against the real python-telegram-bot library."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta

import pytest
from telegram import Bot, BotCommand, Message, ReplyParameters, Update
from telegram.error import BadRequest, Conflict, InvalidToken, NetworkError, RetryAfter
from telegram.ext import (
    Application,
    ApplicationBuilder,
    CommandHandler,
    ContextTypes,
    MessageHandler,
    filters,
)

from tests.fakes.telegram_server import FakeTelegram
from tests.helpers import eventually

FORUM = -1001234567890


@pytest.fixture
async def fake() -> AsyncIterator[FakeTelegram]:
    async with FakeTelegram() as server:
        yield server


def make_app(fake: FakeTelegram, token: str | None = None) -> Application:
    return (ApplicationBuilder().token(token or fake.token)
            .base_url(fake.base_url).base_file_url(fake.base_file_url).build())


@pytest.fixture
async def polling(fake: FakeTelegram) -> AsyncIterator[tuple[Application, list[Message]]]:
    """A started PTB application, long-polling the fake; received messages land in a list."""
    received: list[Message] = []

    async def record(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        assert update.message is not None
        received.append(update.message)

    app = make_app(fake)
    app.add_handler(CommandHandler("bg", record))
    app.add_handler(MessageHandler(filters.TEXT & ~filters.COMMAND, record))
    async with app:
        await app.start()
        await app.updater.start_polling(poll_interval=0, timeout=1)
        yield app, received
        async with asyncio.timeout(10):  # a hang guard: the fake must let PTB stop
            await app.updater.stop()
            await app.stop()


@pytest.fixture
async def bot(fake: FakeTelegram) -> AsyncIterator[Bot]:
    async with Bot(fake.token, base_url=fake.base_url,
                   base_file_url=fake.base_file_url) as b:
        yield b


async def test_dm_message_reaches_handler(fake: FakeTelegram, polling) -> None:
    app, received = polling
    sent = fake.user_message(chat_id=555, text="hello there", user_id=555)
    await eventually(lambda: received, timeout=3, what="DM delivered")
    msg = received[0]
    assert (msg.chat.id, msg.chat.type, msg.text) == (555, "private", "hello there")
    assert msg.message_id == sent["message_id"] == 1
    assert msg.from_user is not None and msg.from_user.username == "alice"
    assert msg.message_thread_id is None
    assert app.bot.username == "homing_bot"
    # acknowledged by the next poll's offset, so not delivered twice
    await eventually(lambda: not fake.pending_updates, timeout=3, what="offset ack")
    assert len(received) == 1


async def test_forum_topic_message_and_command(fake: FakeTelegram, polling) -> None:
    _, received = polling
    fake.user_message(chat_id=FORUM, text="chatter in 42", chat_type="supergroup",
                      is_forum=True, thread_id=42, is_topic_message=True)
    fake.user_message(chat_id=FORUM, text="/bg@homing_bot sleep 1", chat_type="supergroup",
                      is_forum=True, thread_id=17, is_topic_message=True)
    await eventually(lambda: len(received) == 2, timeout=3, what="topic messages")
    chatter, command = received
    assert chatter.chat.is_forum and chatter.chat.type == "supergroup"
    assert (chatter.message_thread_id, chatter.is_topic_message) == (42, True)
    assert chatter.reply_to_message is not None
    assert chatter.reply_to_message.forum_topic_created is not None  # the topic anchor
    assert (command.message_thread_id, command.text) == (17, "/bg@homing_bot sleep 1")
    assert command.entities[0].type == "bot_command" and command.entities[0].length == 14


async def test_malformed_update_does_not_stop_polling(fake: FakeTelegram, polling) -> None:
    _, received = polling
    fake.raw_update({"update_id": 5, "something_new": {"x": 1}})
    fake.user_message(chat_id=9, text="after the odd one")
    await eventually(lambda: received, timeout=3, what="message after malformed update")
    assert received[0].text == "after the odd one"


async def test_send_message_is_recorded(fake: FakeTelegram, bot: Bot) -> None:
    msg = await bot.send_message(FORUM, "notice", message_thread_id=42,
                                 reply_parameters=ReplyParameters(message_id=5))
    await bot.send_message(FORUM, "<b>second</b>", parse_mode="HTML")
    await bot.send_message(555, "dm")
    first, second, dm = await fake.wait_for_sent(3, timeout=2)
    assert (first.chat_id, first.text, first.message_thread_id) == (FORUM, "notice", 42)
    assert first.reply_to_message_id == 5 and first.parse_mode is None
    assert (second.message_id, second.parse_mode, second.message_thread_id) == (2, "HTML", None)
    assert (dm.chat_id, dm.message_id) == (555, 1)  # message ids count per chat
    assert msg.message_id == first.message_id == 1 and msg.message_thread_id == 42
    assert msg.chat.id == FORUM and msg.reply_to_message.message_id == 5


@pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning")
async def test_scripted_failures(fake: FakeTelegram, bot: Bot) -> None:
    fake.fail_next_send(chat_id=1, retry_after=3)
    fake.fail_next_send(status=502, description="Bad Gateway")
    with pytest.raises(RetryAfter) as flood:
        await bot.send_message(1, "a")
    assert flood.value._retry_after == timedelta(seconds=3)
    with pytest.raises(NetworkError) as gateway:
        await bot.send_message(2, "b")
    assert not isinstance(gateway.value, BadRequest | RetryAfter)
    await bot.send_message(1, "a again")
    assert [r.text for r in await fake.wait_for_sent(1)] == ["a again"]


async def test_deleted_and_general_threads_are_rejected(fake: FakeTelegram, bot: Bot) -> None:
    fake.deleted_threads.add((FORUM, 17))
    with pytest.raises(BadRequest, match="thread not found"):
        await bot.send_message(FORUM, "x", message_thread_id=17)
    with pytest.raises(BadRequest, match="thread not found"):
        await bot.send_message(FORUM, "x", message_thread_id=1)
    with pytest.raises(BadRequest, match="too long"):
        await bot.send_message(FORUM, "y" * 4097)
    await bot.send_message(FORUM, "é" * 4096)
    assert len(fake.sent) == 1


async def test_commands_and_misc_methods(fake: FakeTelegram, bot: Bot) -> None:
    assert await bot.set_my_commands([BotCommand("bg", "run in background")])
    assert fake.commands == [{"command": "bg", "description": "run in background"}]
    assert [c.command for c in await bot.get_my_commands()] == ["bg"]
    assert await bot.send_chat_action(1, "typing")
    assert await bot.delete_my_commands() and fake.commands == []


async def test_wrong_token_is_invalid(fake: FakeTelegram) -> None:
    with pytest.raises(InvalidToken):
        async with Bot("999:WRONG", base_url=fake.base_url):
            pass


async def test_long_poll_holds_and_wakes(fake: FakeTelegram, bot: Bot) -> None:
    assert await bot.get_updates(timeout=1) == ()  # held, then empty

    async def queue_later() -> None:
        await asyncio.sleep(0.2)
        fake.user_message(chat_id=3, text="late")

    waker = asyncio.create_task(queue_later())
    async with asyncio.timeout(10):  # a 30 s hold that ends only if the update wakes it
        updates = await bot.get_updates(timeout=30)
    await waker
    assert [u.message.text for u in updates] == ["late"]
    assert await bot.get_updates(offset=updates[-1].update_id + 1, timeout=0) == ()

    fake.fail_next_poll()
    with pytest.raises(Conflict):
        await bot.get_updates(timeout=0)


async def test_stop_releases_a_held_poll(fake: FakeTelegram, bot: Bot) -> None:
    poll = asyncio.create_task(bot.get_updates(timeout=30))
    await eventually(lambda: any(m == "getUpdates" for m, _ in fake.calls), timeout=2)
    await fake.stop()
    async with asyncio.timeout(10):  # released, not held for its 30 s
        assert await poll == ()


async def test_a_held_send_whose_bot_is_gone_is_never_posted(fake: FakeTelegram) -> None:
    fake.hold_sends()
    async with Bot(fake.token, base_url=fake.base_url) as gone, \
            Bot(fake.token, base_url=fake.base_url) as alive:
        abandoned = asyncio.ensure_future(gone.send_message(chat_id=42, text="never arrives"))
        kept = asyncio.ensure_future(alive.send_message(chat_id=42, text="arrives"))
        await eventually(lambda: sum(m == "sendMessage" for m, _ in fake.calls) == 2)
        abandoned.cancel()
        with pytest.raises(asyncio.CancelledError):
            await abandoned
        await gone.shutdown()  # its connection closes, as a killed process's would
        await asyncio.sleep(0.2)
        fake.release_sends()
        assert (await kept).text == "arrives"
    assert [m.text for m in fake.sent] == ["arrives"]


async def test_chat_actions_are_checked_as_the_bot_api_does(fake: FakeTelegram, bot: Bot) -> None:
    assert await bot.send_chat_action(FORUM, "typing", message_thread_id=42) is True
    with pytest.raises(BadRequest, match="(?i)wrong parameter action"):
        await bot.send_chat_action(FORUM, "dancing")


async def test_an_edit_changes_what_the_user_sees(fake: FakeTelegram, bot: Bot) -> None:
    fake.user_message(chat_id=FORUM, text="ask", chat_type="supergroup", is_forum=True,
                      thread_id=42, is_topic_message=True)
    preview = await bot.send_message(FORUM, "thinking…", message_thread_id=42)
    await bot.send_message(FORUM, "outside the topic")
    edited = await bot.edit_message_text("the answer", chat_id=FORUM,
                                         message_id=preview.message_id)
    assert isinstance(edited, Message)
    assert (edited.message_id, edited.text) == (preview.message_id, "the answer")
    assert (edited.message_thread_id, edited.is_topic_message) == (42, True)
    assert edited.edit_date is not None and edited.date == preview.date
    [edit] = await fake.wait_for_edits(1)
    assert (edit.chat_id, edit.message_id, edit.text) == (FORUM, preview.message_id, "the answer")
    assert (edit.message_thread_id, edit.parse_mode) == (42, None)
    assert fake.visible(FORUM, thread_id=42) == ["the answer"]
    assert fake.visible(FORUM) == ["outside the topic"]
    assert fake.message_text(FORUM, preview.message_id) == "the answer"
    assert [r.text for r in fake.sent] == ["thinking…", "outside the topic"]  # sends only


async def test_edits_are_refused_as_the_bot_api_refuses_them(fake: FakeTelegram,
                                                            bot: Bot) -> None:
    sent = await bot.send_message(555, "<b>same</b>", parse_mode="HTML")
    mine = sent.message_id
    with pytest.raises(BadRequest, match="(?i)message is not modified: specified new"):
        await bot.edit_message_text("<b>same</b>", chat_id=555, message_id=mine,
                                    parse_mode="HTML")
    with pytest.raises(BadRequest, match="(?i)message to edit not found"):
        await bot.edit_message_text("x", chat_id=555, message_id=mine + 10)
    with pytest.raises(BadRequest, match="(?i)message text is empty"):
        await bot.edit_message_text(" ", chat_id=555, message_id=mine)
    with pytest.raises(BadRequest, match="(?i)message_too_long"):
        await bot.edit_message_text("y" * 4097, chat_id=555, message_id=mine)
    inbound = fake.user_message(chat_id=555, text="from the user")
    with pytest.raises(BadRequest, match="(?i)message can't be edited"):
        await bot.edit_message_text("x", chat_id=555, message_id=inbound["message_id"])
    with pytest.raises(BadRequest):
        await bot.edit_message_text("x", inline_message_id="AAAA")
    assert fake.edits == []

    # the markup renders differently without its parse mode, so this is a change
    await bot.edit_message_text("<b>same</b>", chat_id=555, message_id=mine)
    # 4096 visible characters inside HTML tags fit, as for sendMessage
    await bot.edit_message_text(f"<i>{'é' * 4096}</i>", chat_id=555, message_id=mine,
                                parse_mode="HTML")
    assert [e.parse_mode for e in fake.edits] == [None, "HTML"]


async def test_a_deleted_message_can_be_neither_edited_nor_deleted(fake: FakeTelegram,
                                                                   bot: Bot) -> None:
    kept = await bot.send_message(555, "kept")
    preview = await bot.send_message(555, "preview")
    assert await bot.delete_message(555, preview.message_id) is True
    assert fake.deleted == {(555, preview.message_id)}
    assert fake.message_text(555, preview.message_id) is None
    assert fake.visible(555) == ["kept"]
    with pytest.raises(BadRequest, match="(?i)message to edit not found"):
        await bot.edit_message_text("final", chat_id=555, message_id=preview.message_id)
    with pytest.raises(BadRequest, match="(?i)message to delete not found"):
        await bot.delete_message(555, preview.message_id)
    with pytest.raises(BadRequest, match="(?i)message to delete not found"):
        await bot.delete_message(555, kept.message_id + 10)
    assert fake.edits == [] and fake.visible(555) == ["kept"]


@pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning")
async def test_scripted_edit_failures_hit_edits_only(fake: FakeTelegram, bot: Bot) -> None:
    preview = await bot.send_message(555, "draft")
    fake.fail_next_send()
    fake.fail_next_edit(chat_id=777)  # another chat: not this one's
    await bot.edit_message_text("draft 2", chat_id=555, message_id=preview.message_id)
    with pytest.raises(RetryAfter):  # the send failure was still waiting for a send
        await bot.send_message(555, "x")

    fake.fail_next_edit(chat_id=555, retry_after=2)
    fake.fail_next_edit()
    with pytest.raises(RetryAfter) as flood:
        await bot.edit_message_text("draft 3", chat_id=555, message_id=preview.message_id)
    assert flood.value._retry_after == timedelta(seconds=2)
    with pytest.raises(RetryAfter) as default:  # any chat's, with Telegram's retry_after 1
        await bot.edit_message_text("draft 3", chat_id=555, message_id=preview.message_id)
    assert default.value._retry_after == timedelta(seconds=1)
    await bot.edit_message_text("draft 3", chat_id=555, message_id=preview.message_id)
    assert [e.text for e in await fake.wait_for_edits(2)] == ["draft 2", "draft 3"]
    assert fake.visible(555) == ["draft 3"] and [r.text for r in fake.sent] == ["draft"]
