"""The fake Bot API server against the real python-telegram-bot library."""

from __future__ import annotations

import asyncio
import io
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import aiohttp
import pytest
from telegram import Bot, BotCommand, Message, ReplyParameters, Update
from telegram.error import (
    BadRequest,
    Conflict,
    Forbidden,
    InvalidToken,
    NetworkError,
    RetryAfter,
)
from telegram.ext import (
    Application,
    ApplicationBuilder,
    CommandHandler,
    ContextTypes,
    MessageHandler,
    filters,
)

from tests.fakes.media import png
from tests.fakes.telegram_server import FakeTelegram, utf16_len
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
    await eventually(lambda: received, timeout=30, what="DM delivered")
    msg = received[0]
    assert (msg.chat.id, msg.chat.type, msg.text) == (555, "private", "hello there")
    assert msg.message_id == sent["message_id"] == 1
    assert msg.from_user is not None and msg.from_user.username == "alice"
    assert msg.message_thread_id is None
    assert app.bot.username == "homing_bot"
    # acknowledged by the next poll's offset, so not delivered twice
    await eventually(lambda: not fake.pending_updates, timeout=30, what="offset ack")
    assert len(received) == 1


async def test_forum_topic_message_and_command(fake: FakeTelegram, polling) -> None:
    _, received = polling
    fake.user_message(chat_id=FORUM, text="chatter in 42", chat_type="supergroup",
                      is_forum=True, thread_id=42, is_topic_message=True)
    fake.user_message(chat_id=FORUM, text="/bg@homing_bot sleep 1", chat_type="supergroup",
                      is_forum=True, thread_id=17, is_topic_message=True)
    await eventually(lambda: len(received) == 2, timeout=30, what="topic messages")
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
    await eventually(lambda: received, timeout=30, what="message after malformed update")
    assert received[0].text == "after the odd one"


async def test_send_message_is_recorded(fake: FakeTelegram, bot: Bot) -> None:
    msg = await bot.send_message(FORUM, "notice", message_thread_id=42,
                                 reply_parameters=ReplyParameters(message_id=5))
    await bot.send_message(FORUM, "<b>second</b>", parse_mode="HTML")
    await bot.send_message(555, "dm")
    first, second, dm = await fake.wait_for_sent(3, timeout=30)
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


async def test_a_wrong_token_is_unauthorized_and_a_tokenless_path_not_found(
        fake: FakeTelegram) -> None:
    wrong = "987654321:AAE" + "x" * 32
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{fake.base_url}{wrong}/getMe") as response:
            assert response.status == 401
            assert await response.json() == {"ok": False, "error_code": 401,
                                             "description": "Unauthorized"}
        async with http.post(f"{fake.base_url}not-a-token/getMe") as response:
            assert response.status == 404
    with pytest.raises(InvalidToken, match="rejected by the server"):
        async with Bot(wrong, base_url=fake.base_url):
            pass


async def test_get_me_tells_whether_privacy_mode_is_on(fake: FakeTelegram, bot: Bot) -> None:
    me = await bot.get_me()
    assert me.can_read_all_group_messages is False  # a new bot's privacy mode is on
    assert me.can_join_groups is True and me.supports_inline_queries is False
    fake.can_read_all_group_messages = True
    assert (await bot.get_me()).can_read_all_group_messages is True


async def test_a_webhook_refuses_polling_until_it_is_deleted(fake: FakeTelegram,
                                                             bot: Bot) -> None:
    assert (await bot.get_webhook_info()).url == ""
    with pytest.raises(BadRequest, match="(?i)https url must be provided"):
        await bot.set_webhook("http://example.org/hook")
    assert await bot.set_webhook("https://example.org/hook")
    assert (await bot.get_webhook_info()).url == "https://example.org/hook"
    with pytest.raises(Conflict, match="webhook is active"):
        await bot.get_updates(timeout=0)
    assert await bot.delete_webhook()
    assert (await bot.get_webhook_info()).url == ""
    assert await bot.get_updates(timeout=0) == ()


async def test_a_second_poller_is_a_conflict_in_the_bot_apis_words(bot: Bot,
                                                                    fake: FakeTelegram) -> None:
    fake.fail_next_poll()
    with pytest.raises(Conflict, match="terminated by other getUpdates request; make sure "
                                       "that only one bot instance is running"):
        await bot.get_updates(timeout=0)


async def test_a_newer_poll_ends_one_still_waiting_with_a_conflict(
        bot: Bot, fake: FakeTelegram) -> None:
    """Two processes polling one token: Telegram ends the waiting poll with 409."""
    from tests.helpers import eventually

    waiting = asyncio.ensure_future(bot.get_updates(timeout=5, read_timeout=10))
    await eventually(lambda: fake.polls >= 1, what="the first poll waiting")
    async with Bot(fake.token, base_url=fake.base_url) as other:  # another process
        newer = asyncio.ensure_future(other.get_updates(timeout=2, read_timeout=30))
        with pytest.raises(Conflict, match="terminated by other getUpdates request"):
            await waiting
        fake.user_message(chat_id=1, text="for the newer poll")
        (update,) = await newer
    assert update.message.text == "for the newer poll" and fake.conflicts == 1


async def test_get_chat_and_the_bots_standing_in_a_group(fake: FakeTelegram, bot: Bot) -> None:
    from telegram import ChatMemberAdministrator, ChatMemberMember, ChatMemberRestricted
    from telegram.error import Forbidden

    fake.add_chat(FORUM, is_forum=True, title="Ops", bot_status="administrator",
                  can_manage_topics=True)
    fake.add_chat(-1002, bot_status="restricted", can_send_messages=False)
    fake.add_chat(-1003, chat_type="group")
    fake.add_chat(-1004, bot_status="kicked")
    chat = await bot.get_chat(FORUM)
    assert chat.is_forum is True and chat.title == "Ops" and chat.type == "supergroup"
    admin = await bot.get_chat_member(FORUM, fake.bot_id)
    assert isinstance(admin, ChatMemberAdministrator) and admin.can_manage_topics is True
    restricted = await bot.get_chat_member(-1002, fake.bot_id)
    assert isinstance(restricted, ChatMemberRestricted)
    assert restricted.is_member and not restricted.can_send_messages
    assert isinstance(await bot.get_chat_member(-1003, fake.bot_id), ChatMemberMember)
    assert not (await bot.get_chat(-1003)).is_forum
    with pytest.raises(BadRequest, match="Chat not found"):
        await bot.get_chat(-1009)
    with pytest.raises(Forbidden, match="bot was kicked from the supergroup chat"):
        await bot.get_chat(-1004)
    with pytest.raises(BadRequest, match="User not found"):
        await bot.get_chat_member(FORUM, 4242)


async def test_long_poll_holds_and_wakes(fake: FakeTelegram, bot: Bot) -> None:
    assert await bot.get_updates(timeout=1) == ()  # held, then empty
    polls = sum(m == "getUpdates" for m, _ in fake.calls)

    async def queue_while_held() -> None:
        # the fake holds a poll from the moment it has the call
        await eventually(lambda: sum(m == "getUpdates" for m, _ in fake.calls) > polls,
                         what="the next poll held")
        fake.user_message(chat_id=3, text="late")

    waker = asyncio.create_task(queue_while_held())
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
    await eventually(lambda: any(m == "getUpdates" for m, _ in fake.calls), timeout=30)
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
        connections = fake.open_connections
        await gone.shutdown()  # its connection closes, as a killed process's would
        await eventually(lambda: fake.open_connections < connections,
                         what="the fake seeing the connection close")
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


# ---------------------------------------------------------------------- HTML parse mode

async def raw_call(fake: FakeTelegram, method: str, **fields: Any) -> tuple[int, dict[str, Any]]:
    """A Bot API call outside PTB, whose error text PTB would re-case."""
    form = aiohttp.FormData()
    for name, value in fields.items():
        if isinstance(value, bytes):
            form.add_field(name, value, filename="upload.bin")
        else:
            form.add_field(name, str(value))
    async with aiohttp.ClientSession() as http, \
            http.post(f"{fake.base_url}{fake.token}/{method}", data=form) as response:
        return response.status, await response.json()


async def test_html_telegram_accepts_is_shown_rendered(fake: FakeTelegram, bot: Bot) -> None:
    markup = ('<b>bold <i>both</i></b> &lt;tag&gt; &amp; &quot;q&quot; &#128512; '
              '<pre><code class="language-python">x = 1 &lt; 2</code></pre>'
              '<a href="https://example.com">link</a> <tg-spoiler>secret</tg-spoiler> '
              '<blockquote expandable>quote</blockquote> AT&T')
    sent = await bot.send_message(FORUM, markup, parse_mode="HTML", message_thread_id=42)
    visible = 'bold both <tag> & "q" 😀 x = 1 < 2link secret quote AT&T'
    assert sent.text == visible

    def at(part: str) -> tuple[int, int]:  # (offset, length) in UTF-16 units, as Telegram
        return utf16_len(visible[:visible.index(part)]), utf16_len(part)

    kinds = {(e.type, e.offset, e.length, e.language, e.url) for e in sent.entities}
    assert kinds == {("bold", *at("bold both"), None, None), ("italic", *at("both"), None, None),
                     ("pre", *at("x = 1 < 2"), "python", None),
                     ("text_link", *at("link"), None, "https://example.com/"),
                     ("spoiler", *at("secret"), None, None),
                     ("expandable_blockquote", *at("quote"), None, None)}
    assert fake.sent[-1].text == fake.message_text(FORUM, sent.message_id) == markup
    assert fake.visible_text(FORUM, sent.message_id) == visible
    assert fake.visible(FORUM, 42) == [visible]


@pytest.mark.parametrize(("markup", "reason"), [
    ("<h1>Title</h1>", 'Unsupported start tag "h1" at byte offset 0'),
    ("é <b>open", 'Can\'t find end tag corresponding to start tag "b"'),
    ("if a < b", 'Unsupported start tag "" at byte offset 5'),
    ("x<y", "Unclosed start tag at byte offset 1"),
    ("<b><i>x</b></i>", 'Unmatched end tag at byte offset 7, expected "</i>", found "</b>"'),
    ("x</b>", "Unexpected end tag at byte offset 1"),
    ('<span class="red">x</span>', 'Tag "span" must have class "tg-spoiler" at byte offset 0'),
])
async def test_html_telegram_refuses_is_a_bad_request(fake: FakeTelegram, bot: Bot,
                                                      markup: str, reason: str) -> None:
    assert await raw_call(fake, "sendMessage", chat_id=555, text=markup, parse_mode="HTML") \
        == (400, {"ok": False, "error_code": 400,
                  "description": f"Bad Request: can't parse entities: {reason}"})
    with pytest.raises(BadRequest, match="(?i)can't parse entities"):
        await bot.send_message(555, markup, parse_mode="HTML")
    await bot.send_message(555, markup)  # the same text without a parse mode is plain text
    assert [r.text for r in fake.sent] == [markup]


async def test_html_length_counts_what_the_user_sees(fake: FakeTelegram, bot: Bot) -> None:
    await bot.send_message(555, f"<b>{'é' * 4096}</b>", parse_mode="HTML")
    await bot.send_message(555, "&lt;" * 4096, parse_mode="HTML")  # 4096 visible "<"
    await bot.send_message(555, "😀" * 2048, parse_mode="HTML")  # 2 UTF-16 units each
    for too_long in ("&lt;" * 4097, "😀" * 2049):
        with pytest.raises(BadRequest, match="(?i)message is too long"):
            await bot.send_message(555, too_long, parse_mode="HTML")
    with pytest.raises(BadRequest, match="(?i)message text is empty"):
        await bot.send_message(555, "<b> </b>", parse_mode="HTML")
    with pytest.raises(BadRequest, match="(?i)unsupported parse_mode"):
        await bot.send_message(555, "x", parse_mode="BBCode")
    assert len(fake.sent) == 3


async def test_an_edit_with_bad_html_changes_nothing(fake: FakeTelegram, bot: Bot) -> None:
    sent = await bot.send_message(555, "<b>draft</b>", parse_mode="HTML")
    with pytest.raises(BadRequest, match="(?i)unsupported start tag"):
        await bot.edit_message_text("<h2>final</h2>", chat_id=555,
                                    message_id=sent.message_id, parse_mode="HTML")
    with pytest.raises(BadRequest, match="(?i)message is not modified"):  # same text, entities
        await bot.edit_message_text("<strong>draft</strong>", chat_id=555,
                                    message_id=sent.message_id, parse_mode="HTML")
    edited = await bot.edit_message_text("<i>final</i> &amp; done", chat_id=555,
                                         message_id=sent.message_id, parse_mode="HTML")
    assert edited.text == "final & done" and edited.entities[0].type == "italic"
    assert fake.message_text(555, sent.message_id) == "<i>final</i> &amp; done"
    assert fake.visible(555) == ["final & done"] and len(fake.edits) == 1


async def test_a_scripted_parse_error_fails_the_next_send(fake: FakeTelegram, bot: Bot) -> None:
    fake.fail_next_send(status=400, description="Bad Request: can't parse entities: "
                        "Unsupported start tag \"x\" at byte offset 0")
    with pytest.raises(BadRequest, match="(?i)can't parse entities"):
        await bot.send_message(555, "<b>fine</b>", parse_mode="HTML")
    await bot.send_message(555, "<b>fine</b>", parse_mode="HTML")
    assert fake.visible(555) == ["fine"]


# ---------------------------------------------------------------------- files in

async def test_a_users_photo_parses_and_downloads_through_ptb(fake: FakeTelegram,
                                                             bot: Bot) -> None:
    picture = png(1000, 500)
    fake.user_photo(chat_id=FORUM, data=picture, caption="/bg look @bob",
                    chat_type="supergroup", is_forum=True, thread_id=42, is_topic_message=True)
    update = Update.de_json(fake.pending_updates[0], bot)
    message = update.message
    assert (message.message_thread_id, message.is_topic_message) == (42, True)
    assert message.caption == "/bg look @bob"
    assert [e.type for e in message.caption_entities] == ["bot_command", "mention"]
    assert [(p.width, p.height) for p in message.photo] == [(90, 45), (320, 160), (800, 400),
                                                          (1000, 500)]
    largest = await bot.get_file(message.photo[-1].file_id)
    assert largest.file_size == len(picture) and largest.file_path.endswith(".jpg")
    assert bytes(await largest.download_as_bytearray()) == picture
    thumbnail = await (await bot.get_file(message.photo[0].file_id)).download_as_bytearray()
    assert bytes(thumbnail) != picture  # only photo[-1] is the photo


async def test_documents_voice_audio_and_video_arrive_as_on_telegram(fake: FakeTelegram,
                                                                     bot: Bot) -> None:
    fake.user_document(chat_id=555, data=b"%PDF-1.4 ...", file_name="report.pdf",
                       caption="the report")
    fake.user_voice(chat_id=555, data=b"OggS voice", duration=3)
    fake.user_audio(chat_id=555, data=b"ID3 song", duration=200, title="Song")
    fake.user_video(chat_id=555, data=b"mp4 video", duration=5, width=1280, height=720)
    document, voice, audio, video = [Update.de_json(u, bot).message
                                     for u in fake.pending_updates]
    assert (document.document.file_name, document.document.mime_type) == ("report.pdf",
                                                                          "application/pdf")
    assert document.caption == "the report" and document.document.file_size == 12
    assert voice.voice.mime_type == "audio/ogg"
    assert fake.pending_updates[1]["message"]["voice"]["duration"] == 3
    assert (audio.audio.title, audio.audio.mime_type) == ("Song", "audio/mpeg")
    assert (video.video.width, video.video.height, video.video.mime_type) == (1280, 720,
                                                                              "video/mp4")
    file = await document.document.get_file()
    assert file.file_path.endswith(".pdf")
    assert bytes(await file.download_as_bytearray()) == b"%PDF-1.4 ..."
    assert bytes(await (await voice.voice.get_file()).download_as_bytearray()) == b"OggS voice"


async def test_get_file_and_downloads_are_refused_as_on_telegram(fake: FakeTelegram,
                                                                bot: Bot) -> None:
    big = fake.user_document(chat_id=555, data=b"", file_name="big.iso",
                             size_override=25 * 1024 * 1024)["document"]
    with pytest.raises(BadRequest, match="(?i)file is too big"):
        await bot.get_file(big["file_id"])
    with pytest.raises(BadRequest, match="(?i)invalid file_id"):
        await bot.get_file("AgACAgNOPE")
    small = fake.user_document(chat_id=555, data=b"abc", file_name="a.txt")["document"]
    path = f"{fake.base_file_url}{fake.token}/documents/file_1.txt"
    async with aiohttp.ClientSession() as http:
        async with http.get(path) as before:  # a path getFile has not handed out yet
            assert before.status == 404
        issued = await bot.get_file(small["file_id"])
        assert issued.file_path == path
        async with http.get(path) as after:
            assert (after.status, await after.read()) == (200, b"abc")
        async with http.get(path.replace(fake.token, "999:WRONG")) as wrong_token:
            assert wrong_token.status == 404


# ---------------------------------------------------------------------- files out

async def test_photos_and_documents_sent_through_ptb_are_recorded(fake: FakeTelegram,
                                                                 bot: Bot) -> None:
    picture = png(40, 30)
    photo = await bot.send_photo(FORUM, picture, caption="<b>chart</b>", parse_mode="HTML",
                                 message_thread_id=42,
                                 reply_parameters=ReplyParameters(message_id=7))
    document = await bot.send_document(FORUM, io.BytesIO(b"col1,col2\n"), filename="data.csv",
                                       message_thread_id=42)
    first, second = await fake.wait_for_files(2)
    assert (first.method, first.chat_id, first.message_thread_id) == ("sendPhoto", FORUM, 42)
    assert (first.data, first.caption, first.reply_to_message_id) == (picture, "<b>chart</b>", 7)
    assert (photo.caption, photo.caption_entities[0].type) == ("chart", "bold")
    assert (photo.photo[-1].width, photo.photo[-1].height, photo.message_thread_id) == (40, 30,
                                                                                         42)
    assert (second.method, second.filename, second.data) == ("sendDocument", "data.csv",
                                                             b"col1,col2\n")
    assert (document.document.file_name, document.document.mime_type) == ("data.csv",
                                                                          "text/csv")
    assert fake.file_data(document.document.file_id) == b"col1,col2\n"
    again = await bot.send_photo(555, photo.photo[-1].file_id)  # sent again by file_id
    assert again.photo[-1].file_id == photo.photo[-1].file_id
    assert fake.sent_files[-1].filename is None and fake.sent_files[-1].data == picture
    assert fake.visible(FORUM, 42) == []  # files are not text messages


async def test_file_sends_are_refused_as_the_bot_api_refuses_them(fake: FakeTelegram,
                                                                  bot: Bot) -> None:
    assert await raw_call(fake, "sendPhoto", chat_id=555) == (400, {
        "ok": False, "error_code": 400, "description": "Bad Request: there is no photo in the "
                                                        "request"})
    status, body = await raw_call(fake, "sendDocument", chat_id=555, caption="x")
    assert body["description"] == "Bad Request: there is no document in the request"
    refusals = [(b"not an image", "image_process_failed"),
                (png(9000, 2000), "photo_invalid_dimensions"),  # sides add up to over 10000
                (png(2100, 100), "photo_invalid_dimensions"),  # ratio over 20
                (png(2, 2) + b"\0" * (10 * 1024 * 1024), "photo_save_file_invalid")]
    for data, reason in refusals:
        with pytest.raises(BadRequest, match=f"(?i){reason}"):
            await bot.send_photo(555, data)
    fake.deleted_threads.add((FORUM, 17))
    for thread in (17, 1):
        with pytest.raises(BadRequest, match="(?i)message thread not found"):
            await bot.send_document(FORUM, b"x", filename="a.txt", message_thread_id=thread)
    with pytest.raises(BadRequest, match="(?i)message caption is too long"):
        await bot.send_document(555, b"x", filename="a.txt", caption="c" * 1025)
    with pytest.raises(BadRequest, match="(?i)can't parse entities"):
        await bot.send_document(555, b"x", filename="a.txt", caption="<h1>x</h1>",
                                parse_mode="HTML")
    with pytest.raises(BadRequest, match="(?i)wrong file identifier"):
        await bot.send_document(555, "BQACnot-a-file")
    with pytest.raises(NetworkError, match="Request Entity Too Large"):  # uploads: 50 MB
        await bot.send_document(555, b"\0" * (50 * 1024 * 1024 + 1), filename="big.bin")
    fake.fail_next_file(chat_id=555, status=403,
                        description="Forbidden: bot was blocked by the user")
    with pytest.raises(Forbidden):
        await bot.send_document(555, b"x", filename="a.txt")
    assert fake.sent_files == []
