"""The throwaway Synapse (tests/matrix_homeserver.py) as the people in its rooms notice
it, and what Synapse really does with the things the Matrix adapter leans on: one
event per transaction ID, rate limits with a time to wait, threads, edits, ``since``."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import aiohttp
import pytest

import tests.matrix_homeserver as homeserver_module
from tests.fakes.media import png
from tests.matrix_homeserver import (
    MISSING,
    Homeserver,
    HumanClient,
    MakeUser,
    MatrixError,
    start_homeserver,
)


async def _pair(matrix_user: MakeUser) -> tuple[HumanClient, HumanClient, str]:
    """Alice and Bob in a room of their own (Alice's, Bob joined)."""
    alice, bob = await matrix_user("alice"), await matrix_user("bob")
    room = await alice.create_room(invite=[bob.user_id])
    await bob.join(room)
    return alice, bob, room


async def test_two_users_in_a_dm_see_each_others_messages(matrix_user: MakeUser) -> None:
    alice, bob = await matrix_user("alice"), await matrix_user("bob")
    room = await alice.create_room(invite=[bob.user_id], is_direct=True)

    invite = await bob.sync()
    assert room in invite.invited
    (membership,) = [event for event in
                     invite.raw["rooms"]["invite"][room]["invite_state"]["events"]
                     if event["type"] == "m.room.member" and event["state_key"] == bob.user_id]
    assert membership["content"]["is_direct"] is True
    await bob.join(room)

    sent = await alice.send_text(room, "hello bob")
    heard = await bob.wait_for_message(room, lambda m: m.sender == alice.user_id)
    assert (heard.event_id, heard.body, heard.msgtype) == (sent, "hello bob", "m.text")
    await bob.send_text(room, "hello alice")
    answer = await alice.wait_for_message(room, lambda m: m.sender == bob.user_id)
    assert answer.body == "hello alice"
    assert [m.body for m in await alice.messages(room)] == ["hello bob", "hello alice"]
    assert [m.body for m in await bob.messages(room, direction="b")] == ["hello alice",
                                                                         "hello bob"]


async def test_reading_a_room_goes_through_every_page(matrix_user: MakeUser) -> None:
    alice, bob, room = await _pair(matrix_user)
    for n in range(12):
        await alice.send_text(room, f"line {n}")
    read = await bob.events(room, page_size=5)
    assert [e["content"]["body"] for e in read if e["type"] == "m.room.message"] == [
        f"line {n}" for n in range(12)]


async def test_a_thread_reply_is_in_the_thread_and_falls_back_to_a_reply(
        matrix_user: MakeUser) -> None:
    alice, bob, room = await _pair(matrix_user)
    root = await alice.send_text(room, "deploy?")
    first = await bob.reply_in_thread(room, root, "on it")
    second = await alice.reply_in_thread(room, root, "thanks")

    assert [(m.event_id, m.body) for m in await alice.thread(room, root)] == [
        (first, "on it"), (second, "thanks")]
    by_id = {m.event_id: m for m in await bob.messages(room)}
    assert by_id[first].thread_root == by_id[second].thread_root == root
    assert by_id[root].thread_root is None
    # for clients without threads, a reply to the thread's latest message
    assert (by_id[first].reply_to, by_id[second].reply_to) == (root, first)
    assert by_id[second].event["content"]["m.relates_to"]["is_falling_back"] is True
    summary = by_id[root].event["unsigned"]["m.relations"]["m.thread"]
    assert (summary["count"], summary["latest_event"]["event_id"]) == (2, second)


async def test_an_edit_replaces_the_message_for_every_reader(matrix_user: MakeUser) -> None:
    alice, bob, room = await _pair(matrix_user)
    original = await alice.send_text(room, "teh answer")
    await alice.edit(room, original, "the answer")
    await alice.edit(room, original, "the answer: 42")

    (seen,) = await bob.messages(room)
    assert (seen.event_id, seen.body, seen.edited) == (original, "the answer: 42", True)
    # the server keeps the original's content: applying the edit is the reader's work
    assert seen.event["content"]["body"] == "teh answer"


async def test_a_reaction_is_recorded_on_the_message(matrix_user: MakeUser) -> None:
    alice, bob, room = await _pair(matrix_user)
    message = await alice.send_text(room, "ship it?")
    reaction = await bob.react(room, message, "👍")

    assert [(r.event_id, r.sender, r.key) for r in await alice.reactions(room, message)] == [
        (reaction, bob.user_id, "👍")]
    assert [m.body for m in await alice.messages(room)] == ["ship it?"]


async def test_media_round_trips_as_image_and_file(matrix_user: MakeUser) -> None:
    alice, bob, room = await _pair(matrix_user)
    picture, notes = png(8, 6), b"line one\nline two\n" * 1000
    await alice.send_file(room, picture, filename="plot.png", content_type="image/png")
    await alice.send_file(room, notes, filename="notes.txt", content_type="text/plain")

    image, file = await bob.messages(room)
    assert (image.msgtype, image.body, file.msgtype, file.body) == (
        "m.image", "plot.png", "m.file", "notes.txt")
    assert image.url is not None and image.url.startswith("mxc://homing.test/")
    assert file.url is not None
    assert await bob.download(image.url) == picture
    assert await bob.download(file.url) == notes


async def test_a_rate_limited_user_is_told_how_long_to_wait_and_then_sends_once(
        homeserver: Homeserver, matrix_user: MakeUser) -> None:
    alice, bob, room = await _pair(matrix_user)
    await homeserver.limit_messages(alice.user_id, per_second=1, burst_count=1)

    # sent together, all but at most one are over the limit of one at a time (what
    # she did before it counts too: Synapse may refuse all three). Each refusal comes
    # after a pause of Synapse's (0.5 s), and the wait it gives is about a second
    attempts = await asyncio.gather(
        *[alice.send_text(room, f"burst {n}", txn_id=f"burst-{n}") for n in range(3)],
        return_exceptions=True)
    refused = [a for a in attempts if isinstance(a, MatrixError)]
    assert len(refused) >= 2 and len(refused) + sum(isinstance(a, str) for a in attempts) == 3
    for error in refused:
        assert (error.status, error.errcode) == (429, "M_LIMIT_EXCEEDED")
        assert error.retry_after_ms is not None and error.retry_after_ms > 0

    # a refused send is not remembered under its transaction ID: sent again after
    # the wait it was given, each lands, once
    for n, attempt in enumerate(attempts):
        if isinstance(attempt, MatrixError):
            await _send_waiting_as_told(alice, room, f"burst {n}", f"burst-{n}")
    bodies = [m.body for m in await bob.messages(room)]
    assert sorted(bodies) == [f"burst {n}" for n in range(3)]


async def _send_waiting_as_told(client: HumanClient, room: str, body: str, txn_id: str
                                ) -> str:
    for _ in range(20):
        try:
            return await client.send_text(room, body, txn_id=txn_id)
        except MatrixError as exc:
            if exc.errcode != "M_LIMIT_EXCEEDED" or exc.retry_after_ms is None:
                raise
            await asyncio.sleep(exc.retry_after_ms / 1000)
    raise AssertionError(f"{body!r} still refused after 20 waits")


async def test_a_repeated_txn_id_from_the_same_device_is_one_event(
        matrix_user: MakeUser) -> None:
    alice, bob, room = await _pair(matrix_user)
    first = await alice.send_text(room, "exactly once", txn_id="send-1")
    again = await alice.send_text(room, "exactly once", txn_id="send-1")
    # the answer is the first send's, whatever the repeat carries
    changed = await alice.send_text(room, "something else", txn_id="send-1")
    together = await asyncio.gather(
        *[alice.send_text(room, "in flight twice", txn_id="send-2") for _ in range(3)])

    assert again == changed == first
    assert len(set(together)) == 1
    assert [m.body for m in await bob.messages(room)] == ["exactly once", "in flight twice"]


async def test_a_txn_id_belongs_to_the_device_not_the_access_token(
        homeserver: Homeserver, matrix_user: MakeUser, http: aiohttp.ClientSession) -> None:
    alice, bob, room = await _pair(matrix_user)
    first = await alice.send_text(room, "exactly once", txn_id="send-1")

    same_device = await homeserver.login(alice.account, device_id=alice.account.device_id)
    assert same_device.access_token != alice.account.access_token
    again = await HumanClient(http, homeserver.url, same_device).send_text(
        room, "exactly once", txn_id="send-1")
    other_device = await homeserver.login(alice.account)
    assert other_device.device_id != alice.account.device_id
    other = await HumanClient(http, homeserver.url, other_device).send_text(
        room, "exactly once", txn_id="send-1")

    assert again == first and other != first
    assert [m.body for m in await bob.messages(room)] == ["exactly once", "exactly once"]


async def test_the_sending_device_finds_its_txn_id_on_its_event(
        homeserver: Homeserver, matrix_user: MakeUser, http: aiohttp.ClientSession) -> None:
    """How a sender that lost track (a crash after the send) can tell its own event."""
    alice, bob, room = await _pair(matrix_user)
    event_id = await alice.send_text(room, "mine", txn_id="send-1")
    same_device = HumanClient(http, homeserver.url, await homeserver.login(
        alice.account, device_id=alice.account.device_id))
    other_device = HumanClient(http, homeserver.url, await homeserver.login(alice.account))

    async def txn_id_seen_by(reader: HumanClient) -> str | None:
        (message,) = await reader.messages(room)
        assert message.event_id == event_id
        txn_id = message.event.get("unsigned", {}).get("transaction_id")
        return str(txn_id) if txn_id is not None else None

    assert await txn_id_seen_by(same_device) == "send-1"
    assert await txn_id_seen_by(other_device) is None
    assert await txn_id_seen_by(bob) is None


async def test_a_txn_id_is_per_room_but_not_per_event_type(matrix_user: MakeUser) -> None:
    alice, bob, room = await _pair(matrix_user)
    elsewhere = await alice.create_room()
    text = await alice.send_text(room, "hello", txn_id="send-1")
    other_room = await alice.send_text(elsewhere, "hello", txn_id="send-1")
    # Synapse keeps (room, user, device, txn ID) -> event: a reaction under a text's
    # transaction ID is answered with the text's event and never sent
    reaction = await alice.send_event(room, "m.reaction", {
        "m.relates_to": {"rel_type": "m.annotation", "event_id": text, "key": "👍"}},
        txn_id="send-1")

    assert other_room != text
    assert reaction == text
    assert await bob.reactions(room, text) == []


async def test_a_txn_id_still_dedupes_after_the_homeserver_restarts(
        homeserver: Homeserver, matrix_user: MakeUser) -> None:
    alice, bob, room = await _pair(matrix_user)
    first = await alice.send_text(room, "before the restart", txn_id="send-1")

    await asyncio.to_thread(homeserver.restart)
    again = await alice.send_text(room, "before the restart", txn_id="send-1")

    assert again == first
    assert [m.body for m in await bob.messages(room)] == ["before the restart"]


async def test_a_since_token_resumes_with_only_later_events(matrix_user: MakeUser) -> None:
    alice, bob, room = await _pair(matrix_user)
    await alice.send_text(room, "before")
    position = await bob.sync()
    assert "before" in _bodies(position.timeline.get(room, []))

    later = [await alice.send_text(room, text) for text in ("after 1", "after 2")]
    resumed: list[Mapping[str, Any]] = []
    since = position.next_batch
    for _ in range(10):  # the two may come in one sync or in two
        step = await bob.sync(since, timeout_ms=10_000)
        resumed += step.timeline.get(room, [])
        since = step.next_batch
        if len(_bodies(resumed)) >= 2:
            break

    assert [e["event_id"] for e in resumed if e["type"] == "m.room.message"] == later
    assert _bodies(resumed) == ["after 1", "after 2"]


def _bodies(events: list[Mapping[str, Any]]) -> list[str]:
    return [e["content"]["body"] for e in events if e["type"] == "m.room.message"]


async def test_typing_is_seen_by_the_other_user(matrix_user: MakeUser) -> None:
    alice, bob, room = await _pair(matrix_user)
    await alice.set_typing(room, True)
    assert alice.user_id in await bob.wait_for_typing(room, lambda who: alice.user_id in who)
    await alice.set_typing(room, False)
    assert alice.user_id not in await bob.wait_for_typing(
        room, lambda who: alice.user_id not in who)


async def test_the_homeserver_is_local_and_does_not_federate(
        homeserver: Homeserver, http: aiohttp.ClientSession) -> None:
    assert homeserver.url.startswith("http://127.0.0.1:")
    async with http.get(f"{homeserver.url}/_matrix/federation/v1/version") as answer:
        assert answer.status == 404  # no federation resource on the listener
    async with http.post(f"{homeserver.url}/_matrix/client/v3/register",
                         json={"username": "walk-in", "password": "secret-enough"}) as answer:
        assert (answer.status, (await answer.json())["errcode"]) == (403, "M_FORBIDDEN")


def test_without_synapse_the_tests_skip_saying_how_to_install_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(homeserver_module, "find_python", lambda: None)
    monkeypatch.delenv("HOMING_REQUIRE_MATRIX", raising=False)
    with pytest.raises(pytest.skip.Exception, match="pip install matrix-synapse"):
        start_homeserver()


def test_ci_fails_instead_of_skipping_without_synapse(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(homeserver_module, "find_python", lambda: None)
    monkeypatch.setenv("HOMING_REQUIRE_MATRIX", "1")
    with pytest.raises(pytest.fail.Exception) as failed:
        start_homeserver()
    assert str(failed.value) == MISSING
