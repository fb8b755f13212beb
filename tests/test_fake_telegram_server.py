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
