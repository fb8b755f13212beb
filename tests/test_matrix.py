"""The Matrix adapter: the real matrix-nio against a real Synapse (tests/matrix_homeserver.py),
with the whole gateway running."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from gateway.config.settings import Config
from gateway.daemon.assembly import Gateway, running_gateway
from gateway.platforms.matrix.adapter import ENCRYPTED_NOTICE, MatrixAdapter
from gateway.platforms.preview import WRITING
from gateway.words.events import MessageEvent
from tests.approval_support import runner_brain, runs
from tests.conftest import make_config
from tests.fakes.openai_server import FakeOpenAI, Say
from tests.helpers import eventually_async, settled
from tests.matrix_homeserver import Account, Homeserver, HumanClient, MakeUser, Message
from tests.model_support import model_settings


def matrix_config(home: Path, bot: Account, *people: HumanClient, **overrides: object
                  ) -> Config:
    settings: dict[str, object] = {
        "platforms__matrix__enabled": True, "platforms__matrix__homeserver": _url(bot),
        "platforms__matrix__user_id": bot.user_id,
        "platforms__matrix__access_token": bot.access_token,
        "platforms__matrix__device_id": bot.device_id,
        "platforms__matrix__allowed_users": [p.user_id for p in people]}
    return make_config(home, **{**settings, **overrides})


_URLS: dict[str, str] = {}


def _url(bot: Account) -> str:
    return _URLS[bot.user_id]


async def new_bot(homeserver: Homeserver, name: str = "homing") -> Account:
    import uuid

    bot = await homeserver.register(f"{name}-{uuid.uuid4().hex[:8]}")
    _URLS[bot.user_id] = homeserver.url
    return bot


async def alice_and_a_bot(homeserver: Homeserver, matrix_user: MakeUser
                          ) -> tuple[HumanClient, Account, str]:
    """Alice, a bot of its own for the test, and a DM room between them (the bot
    invited; a gateway started on it joins)."""
    alice = await matrix_user("alice")
    bot = await new_bot(homeserver)
    room = await alice.create_room(invite=[bot.user_id], is_direct=True)
    return alice, bot, room


@asynccontextmanager
async def matrix_gateway(config: Config) -> AsyncIterator[Gateway]:
    async with running_gateway(config) as gw:
        adapter = gw.runner.adapters["matrix"].inner  # the platform's own, behind the fence
        assert isinstance(adapter, MatrixAdapter)
        await adapter.wait_connected(timeout=60)
        yield gw


async def joined(person: HumanClient, room: str, user_id: str) -> bool:
    events = await person.events(room)
    return any(e.get("type") == "m.room.member" and e.get("state_key") == user_id
               and e["content"].get("membership") == "join" for e in events)


async def bot_in(person: HumanClient, room: str, bot: Account) -> None:
    await eventually_async(lambda: joined(person, room, bot.user_id), 60, "the bot joined")


async def bot_messages(person: HumanClient, room: str, bot: Account) -> list[Message]:
    return [m for m in await person.messages(room) if m.sender == bot.user_id]


def first_line(message: Message) -> str:
    return message.body.split("\n")[0]


# ---------------------------------------------------------------------- routes

async def test_threads_the_room_and_the_dm_are_conversations_of_their_own_and_notices_stay(
        tmp_path: Path, homeserver: Homeserver, matrix_user: MakeUser) -> None:
    alice, carol = await matrix_user("alice"), await matrix_user("carol")
    bot = await new_bot(homeserver)
    room = await alice.create_room(invite=[bot.user_id, carol.user_id], name="team")
    await carol.join(room)
    dm = await alice.create_room(invite=[bot.user_id], is_direct=True)
    async with matrix_gateway(matrix_config(tmp_path / "home", bot, alice)) as gw:
        await bot_in(alice, room, bot)
        await bot_in(alice, dm, bot)
        root = await carol.send_text(room, "a thread starts here")
        await alice.reply_in_thread(room, root, "/bg sleep 0.3; echo marker-thread")
        await alice.send_text(room, "/bg sleep 0.3; echo marker-room")
        await alice.send_text(dm, "/bg sleep 0.3; echo marker-dm")

        async def notices() -> list[Message]:
            return [m for r in (room, dm) for m in await bot_messages(alice, r, bot)
                    if m.body.startswith("Job ")]

        await eventually_async(lambda: _count(notices, 3), 60, "every notice")
        await settled(gw)
        found = {name: [m for m in await notices() if f"marker-{name}" in m.body]
                 for name in ("thread", "room", "dm")}
        assert [len(v) for v in found.values()] == [1, 1, 1]
        assert found["thread"][0].thread_root == root
        assert found["room"][0].thread_root is None
        assert found["dm"][0].event_id in {m.event_id for m in await alice.messages(dm)}
        thread_replies = [m for m in await alice.thread(room, root) if m.sender == bot.user_id]
        assert all(m.thread_root == root for m in thread_replies) and len(thread_replies) == 2
        keys = {s.session_key for s in await gw.store.list_sessions("include", platform="matrix")}
        assert f"agent:main:matrix:thread:{room}:{root}" in keys
        assert any(k.startswith(f"agent:main:matrix:dm:{dm}") for k in keys)
        assert carol.user_id not in " ".join(keys)  # carol wrote nothing to the bot


async def _count(get: Any, n: int) -> bool:
    return len(await get()) >= n


async def test_invites_from_anyone_but_an_allowed_user_are_refused(
        tmp_path: Path, homeserver: Homeserver, matrix_user: MakeUser) -> None:
    alice, eve = await matrix_user("alice"), await matrix_user("eve")
    bot = await new_bot(homeserver)
    async with matrix_gateway(matrix_config(tmp_path / "home", bot, alice)) as gw:
        theirs = await eve.create_room(invite=[bot.user_id], name="eve's")
        ours = await alice.create_room(invite=[bot.user_id], name="alice's")
        await bot_in(alice, ours, bot)

        async def left() -> bool:
            return any(e.get("type") == "m.room.member" and e.get("state_key") == bot.user_id
                       and e["content"].get("membership") == "leave"
                       for e in await eve.events(theirs))

        await eventually_async(left, 60, "eve's invite rejected")
        await alice.send_text(ours, "hello")
        await alice.wait_for_message(ours, lambda m: m.sender == bot.user_id, timeout=60)
        await settled(gw)
    assert not await joined(eve, theirs, bot.user_id)


# ---------------------------------------------------------------------- text

async def test_a_reply_is_html_with_a_plain_body_and_mentions_nobody(
        tmp_path: Path, homeserver: Homeserver, matrix_user: MakeUser,
        model: FakeOpenAI) -> None:
    alice, bot, room = await alice_and_a_bot(homeserver, matrix_user)
    model.brain = lambda req: Say("**Build** done & `a<b` — see [the log](https://ci.example/"
                                  "run?id=1&x=2) and [no](javascript:alert(1)).\n\n@room "
                                  "<b>raw</b>")
    config = matrix_config(tmp_path / "home", bot, alice, agent__stream=False,
                           **model_settings(model))
    async with matrix_gateway(config) as gw:
        await bot_in(alice, room, bot)
        await alice.send_text(room, "report")
        reply = await alice.wait_for_message(room, lambda m: m.sender == bot.user_id,
                                             timeout=60)
        await settled(gw)
    content = reply.content
    assert content["format"] == "org.matrix.custom.html"
    assert content["formatted_body"] == (
        "<p><b>Build</b> done &amp; <code>a&lt;b</code> — see "
        '<a href="https://ci.example/run?id=1&amp;x=2">the log</a> and '
        "[no](javascript:alert(1)).</p><p>@\u200broom &lt;b&gt;raw&lt;/b&gt;</p>")
    assert content["body"].startswith("**Build** done & `a<b`")
    assert "@\u200broom" in content["body"] and content["m.mentions"] == {}


async def test_a_long_output_arrives_in_parts_each_within_the_limit_code_blocks_closed(
        tmp_path: Path, homeserver: Homeserver, matrix_user: MakeUser) -> None:
    alice, bot, room = await alice_and_a_bot(homeserver, matrix_user)
    async with matrix_gateway(matrix_config(tmp_path / "home", bot, alice)) as gw:
        await bot_in(alice, room, bot)
        await alice.send_text(room, "/run for i in $(seq 1 70); do printf 'row %02d %0190d\\n'"
                                    " $i 0; done")
        await eventually_async(lambda: _has_row(alice, room, bot), 60, "the last part")
        await settled(gw)
        parts = [m.body for m in await bot_messages(alice, room, bot)]
    assert len(parts) >= 2 and sum(len(p) for p in parts) > 6000
    assert all(len(p) <= 6000 for p in parts)
    for part in parts:
        assert len([ln for ln in part.splitlines() if ln.startswith("```")]) % 2 == 0
    assert parts[0].startswith("$ for i") and "row 70" in parts[-1]


async def _has_row(alice: HumanClient, room: str, bot: Account) -> bool:
    return any("row 70" in m.body for m in await bot_messages(alice, room, bot))


# ---------------------------------------------------------------------- streaming

async def test_a_streamed_reply_is_edited_as_it_grows_and_ends_as_one_message(
        tmp_path: Path, homeserver: Homeserver, matrix_user: MakeUser,
        model: FakeOpenAI) -> None:
    alice, bot, room = await alice_and_a_bot(homeserver, matrix_user)
    answer = " ".join(f"word-{i}" for i in range(40))
    model.chunk_delay = 0.05
    model.brain = lambda req: Say(answer)
    config = matrix_config(tmp_path / "home", bot, alice, **model_settings(model),
                           platforms__matrix__stream_edit_interval_seconds=0.2)
    async with matrix_gateway(config) as gw:
        await bot_in(alice, room, bot)
        await alice.send_text(room, "tell me")
        await alice.wait_for_message(room, lambda m: m.sender == bot.user_id
                                     and m.body == answer, timeout=60)
        await settled(gw)
        (message,) = await bot_messages(alice, room, bot)
        edits = [e for e in await alice.events(room)
                 if (e["content"].get("m.relates_to") or {}).get("rel_type") == "m.replace"]
    assert message.edited and message.body == answer
    assert message.event["content"]["body"].endswith(WRITING)  # it began as a preview
    assert len(edits) >= 2 and all(e["content"]["m.relates_to"]["event_id"] == message.event_id
                                   for e in edits)
    finals = [e for e in edits if e["content"]["m.new_content"]["body"] == answer]
    assert len(finals) == 1 and edits[-1] is finals[0]


# ---------------------------------------------------------------------- approvals

async def _approval_request(alice: HumanClient, room: str, bot: Account) -> Message:
    return await alice.wait_for_message(
        room, lambda m: m.sender == bot.user_id and "Approval needed" in m.body, timeout=60)


async def test_an_approval_is_decided_once_by_a_reaction_from_an_approver(
        tmp_path: Path, homeserver: Homeserver, matrix_user: MakeUser,
        model: FakeOpenAI, marker: Path) -> None:
    alice, carol = await matrix_user("alice"), await matrix_user("carol")
    bot = await new_bot(homeserver)
    model.brain = runner_brain(marker)
    room = await alice.create_room(invite=[bot.user_id, carol.user_id], name="ops")
    await carol.join(room)
    async with matrix_gateway(matrix_config(tmp_path / "home", bot, alice,
                                            **model_settings(model))) as gw:
        await bot_in(alice, room, bot)
        await alice.send_text(room, "clean up")
        request = await _approval_request(alice, room, bot)
        assert "\u2705" in request.body and "/approve" in request.body
        await carol.react(room, request.event_id, "\u2705")  # not an approver: nothing
        await alice.react(room, request.event_id, "\u2705")
        await alice.react(room, request.event_id, "\u274c")  # too late: decided once
        await alice.wait_for_message(room, lambda m: m.sender == bot.user_id
                                     and m.body.startswith("tool said: "), timeout=60)
        await alice.wait_for_message(room, lambda m: m.event_id == request.event_id
                                     and m.edited, timeout=60)
        await settled(gw)
        shown = next(m for m in await alice.messages(room) if m.event_id == request.event_id)
    assert runs(marker) == 1
    assert "Approved once" in shown.body and carol.user_id not in shown.body


async def test_an_approval_is_decided_by_approve_without_buttons(
        tmp_path: Path, homeserver: Homeserver, matrix_user: MakeUser,
        model: FakeOpenAI, marker: Path) -> None:
    alice, bot, room = await alice_and_a_bot(homeserver, matrix_user)
    model.brain = runner_brain(marker)
    async with matrix_gateway(matrix_config(tmp_path / "home", bot, alice,
                                            **model_settings(model))) as gw:
        await bot_in(alice, room, bot)
        await alice.send_text(room, "clean up")
        request = await _approval_request(alice, room, bot)
        approval_id = request.body.split("(")[1].split(")")[0]
        await alice.send_text(room, f"/approve {approval_id}")
        await alice.wait_for_message(room, lambda m: m.sender == bot.user_id
                                     and m.body.startswith("tool said: "), timeout=60)
        await settled(gw)
    assert runs(marker) == 1


# ---------------------------------------------------------------------- files

async def test_a_file_comes_in_through_the_media_api_and_one_goes_out_into_the_thread(
        tmp_path: Path, homeserver: Homeserver, matrix_user: MakeUser) -> None:
    alice = await matrix_user("alice")
    bot = await new_bot(homeserver)
    root_dir = tmp_path / "out"
    root_dir.mkdir()
    (root_dir / "build.log").write_text("ok\n")
    room = await alice.create_room(invite=[bot.user_id], name="files")
    config = matrix_config(tmp_path / "home", bot, alice,
                           attachments__send_roots=[str(root_dir)])
    async with matrix_gateway(config) as gw:
        await bot_in(alice, room, bot)
        await alice.send_file(room, b"hello matrix", filename="notes.txt",
                              content_type="text/plain")
        reply = await alice.wait_for_message(room, lambda m: m.sender == bot.user_id,
                                             timeout=60)
        root = await alice.send_text(room, "files go here")
        await alice.reply_in_thread(room, root, f"/send {root_dir / 'build.log'} the log")
        sent = await alice.wait_for_message(room, lambda m: m.sender == bot.user_id
                                            and m.msgtype == "m.file", timeout=60)
        await settled(gw)
        data = await alice.download(str(sent.url))
    saved = list((tmp_path / "home" / "files").rglob("*notes.txt"))
    assert len(saved) == 1 and saved[0].read_bytes() == b"hello matrix"
    assert str(saved[0]) in reply.body
    assert (sent.thread_root, sent.content["filename"], sent.body, data) == (
        root, "build.log", "the log", b"ok\n")


# ---------------------------------------------------------------------- delivery

async def test_m_limit_exceeded_is_waited_out_and_nothing_is_lost_doubled_or_reordered(
        tmp_path: Path, homeserver: Homeserver, matrix_user: MakeUser) -> None:
    alice, bot, room = await alice_and_a_bot(homeserver, matrix_user)
    async with matrix_gateway(matrix_config(tmp_path / "home", bot, alice)) as gw:
        await bot_in(alice, room, bot)
        await homeserver.limit_messages(bot.user_id, per_second=1, burst_count=1)
        for i in range(5):
            await alice.send_text(room, f"msg {i}")

        async def replies() -> list[str]:
            return [first_line(m) for m in await bot_messages(alice, room, bot)]

        await eventually_async(lambda: _len_at_least(replies, 5), 90, "five replies")
        await settled(gw)
        assert await replies() == [f"Received: msg {i}" for i in range(5)]


async def _len_at_least(get: Any, n: int) -> bool:
    return len(await get()) >= n


async def test_what_was_said_while_stopped_is_handled_once_after_the_start(
        tmp_path: Path, homeserver: Homeserver, matrix_user: MakeUser) -> None:
    alice, bot, room = await alice_and_a_bot(homeserver, matrix_user)
    config = matrix_config(tmp_path / "home", bot, alice)
    async with matrix_gateway(config) as gw:
        await bot_in(alice, room, bot)
        await alice.send_text(room, "before")
        await alice.wait_for_message(room, lambda m: m.sender == bot.user_id, timeout=60)
        await settled(gw)
    for i in range(3):
        await alice.send_text(room, f"while away {i}")
    async with matrix_gateway(config) as gw:
        await eventually_async(
            lambda: _len_at_least(lambda: bot_messages(alice, room, bot), 4), 60,
            "the missed messages answered")
        await settled(gw)
        replies = [first_line(m) for m in await bot_messages(alice, room, bot)]
    assert replies == ["Received: before"] + [f"Received: while away {i}" for i in range(3)]


async def test_more_said_while_stopped_than_a_sync_brings_is_read_back_and_answered_once(
        tmp_path: Path, homeserver: Homeserver, matrix_user: MakeUser,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A sync brings a room's last few events and says ``limited``; the rest, back to the
    saved token, is read with ``/messages`` (here a sync brings 3 of 8)."""
    from gateway.platforms.matrix import adapter as matrix_adapter

    alice, bot, room = await alice_and_a_bot(homeserver, matrix_user)
    config = matrix_config(tmp_path / "home", bot, alice)
    async with matrix_gateway(config) as gw:
        await bot_in(alice, room, bot)
        await alice.send_text(room, "before")
        await alice.wait_for_message(room, lambda m: m.sender == bot.user_id, timeout=60)
        await settled(gw)
    said = [f"while away {i}" for i in range(8)]
    for text in said:
        await alice.send_text(room, text)
    short = {**matrix_adapter._LIVE_FILTER, "room": {
        **matrix_adapter._LIVE_FILTER["room"], "timeline": {"limit": 3}}}
    monkeypatch.setattr(matrix_adapter, "_LIVE_FILTER", short)
    read_back = matrix_adapter.MatrixAdapter._read_back
    gaps: list[int] = []

    async def counted(self: MatrixAdapter, *args: Any) -> list[dict[str, Any]]:
        events = await read_back(self, *args)
        gaps.append(len(events))
        return events

    monkeypatch.setattr(matrix_adapter.MatrixAdapter, "_read_back", counted)
    async with matrix_gateway(config) as gw:
        await eventually_async(
            lambda: _len_at_least(lambda: bot_messages(alice, room, bot), 9), 60,
            "the missed messages answered")
        await settled(gw)
        replies = [first_line(m) for m in await bot_messages(alice, room, bot)]
    assert gaps and gaps[0] >= 5  # the sync was cut short, and the gap read back
    assert replies == ["Received: before"] + [f"Received: {text}" for text in said]


async def test_the_first_start_ever_does_not_replay_the_rooms_history(
        tmp_path: Path, homeserver: Homeserver, matrix_user: MakeUser) -> None:
    alice, bot, room = await alice_and_a_bot(homeserver, matrix_user)
    await alice.send_text(room, "said before the bot ever ran")
    async with matrix_gateway(matrix_config(tmp_path / "home", bot, alice)) as gw:
        await bot_in(alice, room, bot)
        await alice.send_text(room, "now")
        await alice.wait_for_message(room, lambda m: m.sender == bot.user_id, timeout=60)
        await settled(gw)
        replies = [first_line(m) for m in await bot_messages(alice, room, bot)]
    assert replies == ["Received: now"]


async def test_the_sync_token_is_saved_only_after_its_batch_is_journaled(
        tmp_path: Path, homeserver: Homeserver, matrix_user: MakeUser, monkeypatch) -> None:
    alice, bot, room = await alice_and_a_bot(homeserver, matrix_user)
    config = matrix_config(tmp_path / "home", bot, alice)
    text = "confirmed once written"
    async with matrix_gateway(config) as gw:
        await bot_in(alice, room, bot)
        inbound = gw.runner.inbound
        journal = inbound.record
        saved_at: list[tuple[str, str | None]] = []

        async def record(event: MessageEvent, *args: Any, **kwargs: Any) -> Any:
            if event.text != text:
                return await journal(event, *args, **kwargs)
            if not saved_at:  # the first write never commits
                saved_at.append(("failed", await gw.runner.cursors.get(
                    "matrix", f"since:{bot.user_id}")))
                raise sqlite3.OperationalError("disk I/O error")
            entry = await journal(event, *args, **kwargs)
            saved_at.append(("committed", await gw.runner.cursors.get(
                "matrix", f"since:{bot.user_id}")))
            return entry

        before = await gw.runner.cursors.get("matrix", f"since:{bot.user_id}")
        monkeypatch.setattr(inbound, "record", record)
        await alice.send_text(room, text)
        await alice.wait_for_message(room, lambda m: m.sender == bot.user_id
                                     and m.body.startswith("Received: "), timeout=60)
        await settled(gw)
        after = await gw.runner.cursors.get("matrix", f"since:{bot.user_id}")
        replies = [first_line(m) for m in await bot_messages(alice, room, bot)
                   if m.body.startswith("Received: ")]
    assert [s for s, _ in saved_at[:2]] == ["failed", "committed"]
    # neither at the failed write nor at the commit was the batch's token saved yet: a
    # sync from the token saved then still brings the message
    token = saved_at[0][1]
    assert token is not None and saved_at[1][1] == token and after not in (token, before)
    as_bot = HumanClient(alice.http, homeserver.url, bot)
    brought = (await as_bot.sync(token)).timeline.get(room, [])
    assert text in [e["content"].get("body") for e in brought]
    assert text not in [e["content"].get("body")
                        for e in (await as_bot.sync(after)).timeline.get(room, [])]
    assert replies == [f"Received: {text}"]


# ---------------------------------------------------------------------- encryption

async def test_an_encrypted_room_is_told_once_that_it_is_not_supported_and_never_read(
        tmp_path: Path, homeserver: Homeserver, matrix_user: MakeUser) -> None:
    alice = await matrix_user("alice")
    bot = await new_bot(homeserver)
    room = await alice.create_room(invite=[bot.user_id], name="secret")
    await alice._request("PUT", f"/_matrix/client/v3/rooms/{quote(room, safe='')}/state/"
                                "m.room.encryption/", json={"algorithm": "m.megolm.v1.aes-sha2"})
    config = matrix_config(tmp_path / "home", bot, alice)
    async with matrix_gateway(config) as gw:
        await bot_in(alice, room, bot)
        await alice.send_event(room, "m.room.encrypted", {
            "algorithm": "m.megolm.v1.aes-sha2", "ciphertext": "AwgAEnAC", "sender_key": "x",
            "device_id": "D", "session_id": "s"})
        await alice.wait_for_message(room, lambda m: m.body == ENCRYPTED_NOTICE, timeout=60)
        await settled(gw)
    async with matrix_gateway(config) as gw:
        await alice.send_text(room, "plain text in an encrypted room")
        await settled(gw)
        await gw.runner.adapters["matrix"].wait_connected()
    said = [m.body for m in await bot_messages(alice, room, bot)]
    assert said == [ENCRYPTED_NOTICE]


async def test_setup_logs_in_once_and_doctor_checks_the_token_the_server_and_the_rooms(
        tmp_path: Path, homeserver: Homeserver, matrix_user: MakeUser) -> None:
    """``homing setup`` with the bot's password: only the access token is kept (in
    homing.env), the device id in the config; ``homing doctor`` then asks the homeserver
    with it and names an encrypted room the bot is in."""
    import json

    from gateway.config.env_file import read_env_file
    from tests.real_daemon import home_env, run_cli

    alice = await matrix_user("alice")
    bot = await new_bot(homeserver, "setup")
    home = tmp_path / "home"
    env = {**home_env(home), "BOT_PASSWORD": bot.password}
    code, out, err = await run_cli(
        "setup", "--yes", "--platforms", "web,matrix", "--matrix-homeserver", homeserver.url,
        "--matrix-user-id", bot.user_id, "--matrix-password-env", "BOT_PASSWORD",
        "--matrix-user", alice.user_id, "--no-service", env=env)
    assert code == 0, err
    assert f"ok: logged in as {bot.user_id}" in out
    secrets = read_env_file(home / "homing.env")
    assert set(secrets) == {"MATRIX_ACCESS_TOKEN"} and bot.password not in (
        home / "config.yaml").read_text() + (home / "homing.env").read_text()
    room = await alice.create_room(invite=[bot.user_id], name="secret")
    await alice._request("PUT", f"/_matrix/client/v3/rooms/{quote(room, safe='')}/state/"
                                "m.room.encryption/", json={"algorithm": "m.megolm.v1.aes-sha2"})
    as_bot = HumanClient(alice.http, homeserver.url, Account(
        bot.user_id, secrets["MATRIX_ACCESS_TOKEN"], "", ""))
    await as_bot.join(room)  # as the daemon would on alice's invite
    code, out, err = await run_cli("doctor", "--json", env=home_env(home))
    checks = {c["name"]: c for c in json.loads(out)}
    assert checks["matrix homeserver"]["status"] == "ok", checks
    assert checks["matrix token"]["status"] == "ok"
    assert bot.user_id in checks["matrix token"]["detail"]
    assert checks["matrix rooms"]["status"] == "ok"
    assert checks["matrix encrypted rooms"]["status"] == "warn"
    assert room in checks["matrix encrypted rooms"]["detail"]
