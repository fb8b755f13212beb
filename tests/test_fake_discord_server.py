"""The fake Discord REST API and gateway against the real discord.py library."""

from __future__ import annotations

import asyncio
import io
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import aiohttp
import discord
import discord.gateway
import discord.http
import pytest
import yarl

from tests.fakes.discord_server import DEFAULT_UPLOAD_LIMIT, FakeDiscord
from tests.fakes.media import png
from tests.helpers import eventually

CHANNEL = 111
THREAD = 222
LOCKED = 333
GONE = 444
DM = 555
ROLE = 900


@pytest.fixture
async def fake(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[FakeDiscord]:
    """A started fake with a channel, a thread and a role; discord.py pointed at it.

    The two wiring settings are process-global class attributes; monkeypatch
    restores them after the test.
    """
    async with FakeDiscord() as server:
        server.add_channel(CHANNEL)
        server.add_channel(GONE, name="gone")
        server.add_thread(THREAD, parent_id=CHANNEL)
        server.add_thread(LOCKED, parent_id=CHANNEL)
        server.add_role(ROLE, "operators")
        monkeypatch.setattr(discord.http.Route, "BASE", server.api_base)
        monkeypatch.setattr(discord.gateway.DiscordWebSocket, "DEFAULT_GATEWAY",
                            yarl.URL(server.gateway_url))
        yield server


class Recorder(discord.Client):
    """A plain client that keeps every message it receives."""

    def __init__(self) -> None:
        intents = discord.Intents.default()
        intents.message_content = True
        super().__init__(intents=intents, guild_ready_timeout=0.1)
        self.received: list[discord.Message] = []
        self.resumed = asyncio.Event()

    async def on_message(self, message: discord.Message) -> None:
        self.received.append(message)

    async def on_resumed(self) -> None:
        self.resumed.set()

    def by_content(self, content: str) -> list[discord.Message]:
        return [m for m in self.received if m.content == content]


class NoIdentifyDelay(Recorder):
    """Skips discord.py's 5 s sleep before a repeated IDENTIFY (after op 9)."""

    async def before_identify_hook(self, shard_id: int | None, *, initial: bool = False) -> None:
        return None


@asynccontextmanager
async def running(fake: FakeDiscord, client_cls: type[Recorder] = Recorder
                  ) -> AsyncIterator[Recorder]:
    """Log in, connect in a task, wait for on_ready; close cleanly afterwards."""
    client = client_cls()
    await client.login(fake.token)
    task = asyncio.create_task(client.connect())
    try:
        async with asyncio.timeout(10):  # hang guard
            await client.wait_until_ready()
        yield client
    finally:
        async with asyncio.timeout(10):  # hang guard: the client must close cleanly
            await client.close()
            await task  # connect() returns without an exception after close()
    assert client.is_closed()


async def test_ready_and_inbound_channel_thread_and_dm(fake: FakeDiscord) -> None:
    async with running(fake) as client:
        assert fake.identify_count == 1 and fake.resume_count == 0
        assert client.user is not None and client.user.id == fake.bot_id and client.user.bot
        guild = client.get_guild(fake.guild_id)
        assert guild is not None and guild.me is not None
        assert isinstance(guild.get_channel(CHANNEL), discord.TextChannel)

        in_channel = await fake.user_message(channel_id=CHANNEL, content="in channel",
                                             roles=[ROLE])
        await fake.user_message(channel_id=THREAD, content="in thread", mentions_bot=True)
        await fake.user_message(channel_id=DM, content="in dm", guild=False, author_id=7)
        await eventually(lambda: len(client.received) == 3, 5, "three messages")

        channel_msg, thread_msg, dm_msg = client.received
        assert channel_msg.id == int(in_channel["id"])
        assert isinstance(channel_msg.channel, discord.TextChannel)
        assert channel_msg.channel.id == CHANNEL and channel_msg.guild == guild
        assert isinstance(channel_msg.author, discord.Member)
        assert [r.id for r in channel_msg.author.roles if r.id != guild.id] == [ROLE]

        assert isinstance(thread_msg.channel, discord.Thread)
        assert thread_msg.channel.id == THREAD and thread_msg.channel.parent_id == CHANNEL
        assert client.user in thread_msg.mentions

        assert isinstance(dm_msg.channel, discord.DMChannel)
        assert dm_msg.guild is None and dm_msg.channel.id == DM and dm_msg.author.id == 7


async def test_send_with_reference_is_recorded(fake: FakeDiscord) -> None:
    async with running(fake) as client:
        anchor = await fake.user_message(channel_id=THREAD, content="start a job")
        channel = client.get_partial_messageable(THREAD)
        sent = await channel.send("done", reference=discord.MessageReference(
            message_id=int(anchor["id"]), channel_id=THREAD, fail_if_not_exists=False))
        await fake.user_message(channel_id=DM, content="hi", guild=False)
        await client.get_partial_messageable(DM).send("dm reply")

    record, dm_record = await fake.wait_for_sent(2)
    assert (record.channel_id, record.content, record.message_reference) == \
        (THREAD, "done", int(anchor["id"]))
    assert record.message_id == sent.id and record.nonce is not None
    assert sent.reference is not None and sent.reference.message_id == int(anchor["id"])
    assert sent.author.id == fake.bot_id
    assert dm_record.channel_id == DM and dm_record.message_reference is None


async def test_rate_limit_is_retried_by_discord_py(fake: FakeDiscord) -> None:
    fake.fail_next_post(channel_id=CHANNEL, retry_after=0.05)
    async with running(fake) as client:
        await client.get_partial_messageable(CHANNEL).send("after 429")
        posts = [status for method, path, status in fake.requests
                 if method == "POST" and path.endswith(f"/channels/{CHANNEL}/messages")]
    assert posts == [429, 200]
    assert [r.content for r in await fake.wait_for_sent(1)] == ["after 429"]


async def test_errors_locked_deleted_archived_too_long(fake: FakeDiscord) -> None:
    async with running(fake) as client:
        fake.lock_thread(LOCKED)
        with pytest.raises(discord.Forbidden) as locked:
            await client.get_partial_messageable(LOCKED).send("x")
        assert locked.value.status == 403 and locked.value.code == 50083

        fake.delete_channel(GONE)
        with pytest.raises(discord.NotFound) as gone:
            await client.get_partial_messageable(GONE).send("x")
        assert gone.value.code == 10003

        with pytest.raises(discord.NotFound):
            await client.get_partial_messageable(987654).send("never existed")

        with pytest.raises(discord.HTTPException) as too_long:
            await client.get_partial_messageable(CHANNEL).send("y" * 2001)
        assert too_long.value.status == 400 and too_long.value.code == 50035

        with pytest.raises(discord.HTTPException) as unknown_ref:
            await client.get_partial_messageable(CHANNEL).send(
                "z", reference=discord.MessageReference(message_id=42, channel_id=CHANNEL))
        assert unknown_ref.value.code == 50035

        fake.archive_thread(THREAD)
        await client.get_partial_messageable(THREAD).send("reopens")
        thread = fake.channel(THREAD)
        assert thread is not None and thread["thread_metadata"]["archived"] is False

    assert [(r.channel_id, r.content) for r in fake.sent] == [(THREAD, "reopens")]


async def test_drop_connection_resumes_and_replays_missed_event_once(fake: FakeDiscord) -> None:
    async with running(fake) as client:
        fake.set_gateway_down(True)  # the client keeps retrying until we let it in
        await fake.drop_connection()
        assert not fake.connected
        await eventually(lambda: fake.refused_count >= 1, 5, "a refused reconnect")
        await fake.user_message(channel_id=CHANNEL, content="while away")
        assert client.by_content("while away") == []
        fake.set_gateway_down(False)

        await fake.wait_until_ready()
        async with asyncio.timeout(10):
            await client.resumed.wait()
        await eventually(lambda: client.by_content("while away"), 5, "the missed message")
        # a later live message proves the stream went on without a duplicate
        await fake.user_message(channel_id=CHANNEL, content="after resume")
        await eventually(lambda: client.by_content("after resume"), 5, "the live message")
        assert [m.content for m in client.received] == ["while away", "after resume"]
        assert (fake.identify_count, fake.resume_count) == (1, 1)

        # a plain close 4000 without op 7 resumes too
        client.resumed.clear()
        await fake.drop_connection(reconnect_op=False)
        async with asyncio.timeout(10):
            await client.resumed.wait()
        assert (fake.identify_count, fake.resume_count) == (1, 2)


async def test_invalid_session(fake: FakeDiscord) -> None:
    async with running(fake, NoIdentifyDelay) as client:
        client.resumed.clear()
        await fake.invalidate_session(resumable=True)
        async with asyncio.timeout(10):
            await client.resumed.wait()
        assert (fake.identify_count, fake.resume_count) == (1, 1)

        first_session = fake.session_id
        await fake.invalidate_session(resumable=False)
        await fake.wait_until_ready()
        assert (fake.identify_count, fake.resume_count) == (2, 1)
        assert fake.session_id != first_session
        await fake.user_message(channel_id=CHANNEL, content="new session")
        await eventually(lambda: client.by_content("new session"), 5, "a message")


async def test_wrong_token_and_raw_http(fake: FakeDiscord) -> None:
    client = discord.Client(intents=discord.Intents.default())
    with pytest.raises(discord.LoginFailure):
        await client.login("wrong-token")
    await client.close()

    headers = {"Authorization": f"Bot {fake.token}"}
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{fake.api_base}/users/@me", headers=headers) as response:
            assert response.status == 200
            assert response.headers["Content-Type"] == "application/json"
        async with http.get(f"{fake.api_base}/nowhere", headers=headers) as response:
            assert response.status == 404
            assert await response.json() == {"code": 0, "message": "404: Not Found"}
        async with http.get(f"{fake.api_base}/gateway/bot", headers=headers) as response:
            assert (await response.json())["url"] == fake.gateway_url
        async with http.get(f"{fake.api_base}/users/@me") as response:
            assert response.status == 401


async def test_an_edit_changes_what_the_user_sees(fake: FakeDiscord) -> None:
    async with running(fake) as client:
        await fake.user_message(channel_id=CHANNEL, content="a question")
        preview = await client.get_partial_messageable(CHANNEL).send("thinking…")
        await client.get_partial_messageable(THREAD).send("elsewhere")
        edited = await client.get_partial_messageable(CHANNEL).get_partial_message(
            preview.id).edit(content="the answer")
        assert (edited.id, edited.content) == (preview.id, "the answer")
        assert edited.edited_at is not None and preview.edited_at is None

    [edit] = await fake.wait_for_edits(1)
    assert (edit.channel_id, edit.message_id, edit.content) == (CHANNEL, preview.id, "the answer")
    assert edit.payload["content"] == "the answer"
    assert fake.visible(CHANNEL) == ["the answer"]  # the bot's messages only
    assert fake.visible(THREAD) == ["elsewhere"]
    assert fake.message_content(CHANNEL, preview.id) == "the answer"
    assert fake.message_content(THREAD, preview.id) is None
    assert [r.content for r in fake.sent] == ["thinking…", "elsewhere"]  # posts only


async def test_edits_are_refused_as_discord_refuses_them(fake: FakeDiscord) -> None:
    async with running(fake) as client:
        channel = client.get_partial_messageable(CHANNEL)
        mine = channel.get_partial_message((await channel.send("draft")).id)
        theirs = await fake.user_message(channel_id=CHANNEL, content="a user's")

        with pytest.raises(discord.NotFound) as unknown:
            await channel.get_partial_message(42).edit(content="x")  # no such message
        assert unknown.value.code == 10008
        with pytest.raises(discord.NotFound) as elsewhere:  # a message of another channel
            await client.get_partial_messageable(THREAD).get_partial_message(mine.id).edit(
                content="x")
        assert elsewhere.value.code == 10008
        with pytest.raises(discord.NotFound) as no_channel:
            await client.get_partial_messageable(987654).get_partial_message(mine.id).edit(
                content="x")
        assert no_channel.value.code == 10003
        with pytest.raises(discord.Forbidden) as not_mine:
            await channel.get_partial_message(int(theirs["id"])).edit(content="x")
        assert not_mine.value.code == 50005
        with pytest.raises(discord.HTTPException) as too_long:
            await mine.edit(content="y" * 2001)
        assert (too_long.value.status, too_long.value.code) == (400, 50035)
        assert "2000 or fewer" in too_long.value.text
        with pytest.raises(discord.HTTPException) as empty:
            await mine.edit(content="")
        assert (empty.value.status, empty.value.code) == (400, 50006)

        in_locked = await client.get_partial_messageable(LOCKED).send("before the lock")
        fake.lock_thread(LOCKED)
        with pytest.raises(discord.Forbidden) as locked:
            await in_locked.edit(content="after")
        assert locked.value.code == 50083
        in_thread = await client.get_partial_messageable(THREAD).send("before archiving")
        fake.archive_thread(THREAD)
        await in_thread.edit(content="reopens")
        thread = fake.channel(THREAD)
        assert thread is not None and thread["thread_metadata"]["archived"] is False

    assert [e.content for e in fake.edits] == ["reopens"]
    assert fake.visible(CHANNEL) == ["draft"]


async def test_a_deleted_message_can_be_neither_edited_nor_deleted(fake: FakeDiscord) -> None:
    async with running(fake) as client:
        channel = client.get_partial_messageable(CHANNEL)
        await channel.send("kept")
        preview = await channel.send("preview")
        await client.http.delete_message(CHANNEL, preview.id)  # as the gateway deletes
        assert fake.deleted == {(CHANNEL, preview.id)}
        assert fake.visible(CHANNEL) == ["kept"]
        assert fake.message_content(CHANNEL, preview.id) is None
        with pytest.raises(discord.NotFound) as edit_gone:
            await preview.edit(content="final")
        assert edit_gone.value.code == 10008
        with pytest.raises(discord.NotFound) as delete_again:
            await client.http.delete_message(CHANNEL, preview.id)
        assert delete_again.value.code == 10008

        dm = await fake.user_message(channel_id=DM, content="hi", guild=False)
        with pytest.raises(discord.Forbidden) as in_dm:  # a user's DM is theirs to delete
            await client.http.delete_message(DM, int(dm["id"]))
        assert in_dm.value.code == 50003
    deletes = [status for method, _, status in fake.requests if method == "DELETE"]
    assert deletes == [204, 404, 403] and fake.edits == []


async def test_a_rate_limited_edit_is_retried_by_discord_py(fake: FakeDiscord) -> None:
    async with running(fake) as client:
        preview = await client.get_partial_messageable(CHANNEL).send("draft")
        fake.fail_next_post(channel_id=CHANNEL, retry_after=0.05)  # for the next post only
        fake.fail_next_edit(channel_id=CHANNEL, retry_after=0.05)
        await preview.edit(content="final")
        await client.get_partial_messageable(CHANNEL).send("follow-up")

    path = f"/api/v10/channels/{CHANNEL}/messages"
    assert [status for method, p, status in fake.requests
            if method == "PATCH" and p == f"{path}/{preview.id}"] == [429, 200]
    assert [status for method, p, status in fake.requests
            if method == "POST" and p == path] == [200, 429, 200]
    assert [(e.message_id, e.content) for e in await fake.wait_for_edits(1)] == \
        [(preview.id, "final")]
    assert fake.visible(CHANNEL) == ["final", "follow-up"]


# ---------------------------------------------------------------------- files

async def test_a_users_attachments_download_through_discord_py(fake: FakeDiscord) -> None:
    picture = png(10, 20)
    async with running(fake) as client:
        await fake.user_message(channel_id=THREAD, content="", attachments=[
            {"filename": "chart.png", "data": picture},
            {"filename": "notes.txt", "data": b"hello", "description": "my notes"}])
        await eventually(lambda: client.received, 5, "the message with files")
        image, notes = client.received[0].attachments
        assert (image.filename, image.content_type, image.size) == ("chart.png", "image/png",
                                                                    len(picture))
        assert (image.width, image.height) == (10, 20)
        assert (notes.content_type, notes.description) == ("text/plain; charset=utf-8",
                                                           "my notes")
        assert await image.read() == picture and await notes.read() == b"hello"
        async with aiohttp.ClientSession() as http:
            async with http.get(notes.proxy_url) as proxied:
                assert (proxied.status, await proxied.read()) == (200, b"hello")
            async with http.get(notes.url.split("?")[0]) as unsigned:  # Discord signs links
                assert unsigned.status == 404
        fake.expire_attachment_links()
        with pytest.raises(discord.NotFound):
            await image.read()
        assert fake.attachment_data(notes.url) == b"hello"


async def test_files_sent_with_discord_py_are_recorded_with_their_bytes(
        fake: FakeDiscord) -> None:
    async with running(fake) as client:
        channel = client.get_channel(CHANNEL)
        assert isinstance(channel, discord.TextChannel)
        sent = await channel.send("the log", file=discord.File(io.BytesIO(b"line 1\n"), "a.txt"))
        thread = client.get_channel(THREAD)
        assert isinstance(thread, discord.Thread)
        await thread.send(files=[discord.File(io.BytesIO(png()), "p.png", description="alt"),
                                 discord.File(io.BytesIO(b"two"), "b.txt")])
        await channel.send("plain JSON still")
        with_file, two_files, plain = await fake.wait_for_sent(3)
        assert (with_file.content, with_file.files) == ("the log", ["a.txt"])
        assert [(f.filename, f.data) for f in with_file.attachments] == [("a.txt", b"line 1\n")]
        assert two_files.channel_id == THREAD and two_files.content is None
        assert [(f.filename, f.description) for f in two_files.attachments] == [
            ("p.png", "alt"), ("b.txt", None)]
        assert plain.attachments == [] and plain.content == "plain JSON still"
        assert [a.filename for a in sent.attachments] == ["a.txt"]
        assert await sent.attachments[0].read() == b"line 1\n"
        edited = await sent.edit(attachments=[*sent.attachments,
                                              discord.File(io.BytesIO(b"more"), "c.txt")])
        assert [a.filename for a in edited.attachments] == ["a.txt", "c.txt"]


async def test_uploads_over_the_limit_are_refused_with_413(fake: FakeDiscord) -> None:
    too_big = b"\0" * (DEFAULT_UPLOAD_LIMIT + 1)
    async with running(fake) as client:
        channel = client.get_channel(CHANNEL)
        assert isinstance(channel, discord.TextChannel)
        with pytest.raises(discord.HTTPException) as refused:
            await channel.send(file=discord.File(io.BytesIO(too_big), "big.bin"))
        assert (refused.value.status, refused.value.code) == (413, 40005)
        assert refused.value.text == "Request entity too large"
        halves = [discord.File(io.BytesIO(too_big[:len(too_big) // 2 + 1]), f"{n}.bin")
                  for n in "ab"]
        with pytest.raises(discord.HTTPException, match="entity too large"):  # all files count
            await channel.send(files=halves)
        assert fake.sent == []
        fake.upload_limit = 50 * 1024 * 1024  # a guild at boost level 2
        await channel.send(file=discord.File(io.BytesIO(too_big), "big.bin"))
        assert fake.sent[0].attachments[0].size == len(too_big)


async def test_the_application_flags_say_which_privileged_intents_are_on(
        fake: FakeDiscord) -> None:
    client = discord.Client(intents=discord.Intents.none())
    await client.login(fake.token)
    try:
        flags = (await client.application_info()).flags
        assert flags.gateway_message_content_limited and not flags.gateway_message_content
        fake.verified_application = True
        flags = (await client.application_info()).flags
        assert flags.gateway_message_content and not flags.gateway_message_content_limited
        fake.allowed_privileged_intents = 0
        assert (await client.application_info()).flags.value == 0
    finally:
        await client.close()
    headers = {"Authorization": f"Bot {fake.token}"}
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{fake.api_base}/applications/@me", headers=headers) as response:
            application = await response.json()
        assert application["id"] == str(fake.bot_id) and application["flags"] == 0
        async with http.get(f"{fake.api_base}/applications/@me") as response:
            assert response.status == 401
            assert await response.json() == {"code": 0, "message": "401: Unauthorized"}


async def test_the_bots_permissions_come_from_its_roles_and_the_overwrites(
        fake: FakeDiscord) -> None:
    from tests.fakes.discord_guild import SEND_MESSAGES, SEND_MESSAGES_IN_THREADS, VIEW_CHANNEL

    fake.add_role(901, "bots", permissions=0)
    fake.give_bot_role(901)
    fake.set_overwrite(CHANNEL, fake.guild_id, deny=SEND_MESSAGES | SEND_MESSAGES_IN_THREADS)
    fake.set_overwrite(GONE, fake.guild_id, deny=VIEW_CHANNEL)
    async with running(fake) as client:
        with pytest.raises(discord.Forbidden) as refused:
            await client.get_partial_messageable(CHANNEL).send("not here")
        assert refused.value.code == 50013
        with pytest.raises(discord.Forbidden) as refused:
            await client.get_partial_messageable(THREAD).send("nor in its thread")
        assert refused.value.code == 50013
        with pytest.raises(discord.Forbidden) as refused:
            await client.fetch_channel(GONE)
        assert refused.value.code == 50001
        fake.set_overwrite(CHANNEL, 901, allow=SEND_MESSAGES)  # the bot's role may
        await client.get_partial_messageable(CHANNEL).send("now it may")
        assert [s.content for s in fake.sent] == ["now it may"]
        member = await client.http.get_member(fake.guild_id, fake.bot_id)
        assert member["roles"] == ["901"]
        guild = await client.fetch_guild(fake.guild_id)
        assert guild.owner_id == 1 and guild.get_role(901) is not None
        with pytest.raises(discord.NotFound) as unknown:
            await client.http.get_member(fake.guild_id, 4242)
        assert unknown.value.code == 10007
