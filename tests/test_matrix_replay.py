"""A crash between a reply's send and its record, on Matrix against a real Synapse: the
next life asks the homeserver whether the reply went out (the bot's own events carry the
transaction id made from the reply's dedupe key) and, when it did, finishes the message
as answered — no second answer, no word that it may not have finished. When the reply
never went out, the word is said, as before.

The crash is :class:`tests.faults.SimulatedCrash` at the point under test, and the state
database as it had committed at that instant is what the next gateway starts on: what the
dying gateway would still have written (its ``finally`` blocks, its stop) is not there,
as after a ``kill -9``.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from gateway.daemon.assembly import Gateway
from gateway.platforms.matrix.adapter import MatrixAdapter
from gateway.store.group_commit import Op
from tests.fakes.openai_server import FakeOpenAI, Say
from tests.faults import KilledAt
from tests.helpers import settled
from tests.matrix_homeserver import Homeserver, MakeUser, Message
from tests.model_support import model_settings
from tests.test_matrix import (
    alice_and_a_bot,
    bot_in,
    bot_messages,
    matrix_config,
    matrix_gateway,
)

STOPPED = "(The gateway stopped while it was handling"


def crash_at_the_reply_record(monkeypatch: pytest.MonkeyPatch, gw: Gateway) -> KilledAt:
    """Dies as the first reply's transcript line (and the journal's ``replied``) is
    written: after the reply went out, before anything of it was recorded."""
    point = KilledAt(gw.config.state_db)
    store = gw.runner.store
    real = store.record_sent

    async def record_sent(session_id: str, role: str, text: str, *,
                          with_ops: Sequence[Op], **kwargs: Any) -> None:
        if not point.happened.is_set() and any("'replied'" in sql for sql, _ in with_ops):
            point.crash("the reply went out; its record did not commit")
        await real(session_id, role, text, with_ops=with_ops, **kwargs)

    monkeypatch.setattr(store, "record_sent", record_sent)
    return point


def crash_at_the_send(monkeypatch: pytest.MonkeyPatch, gw: Gateway, marker: str
                      ) -> KilledAt:
    """Dies as the reply holding ``marker`` is about to be sent: it never goes out."""
    point = KilledAt(gw.config.state_db)
    adapter = gw.runner.adapters["matrix"].inner
    assert isinstance(adapter, MatrixAdapter)
    real = adapter.put_event

    async def put_event(room_id: str, event_type: str, body: dict[str, Any],
                        **kwargs: Any) -> str:
        said = str((body.get("m.new_content") or body).get("body", ""))
        if not point.happened.is_set() and marker in said:
            point.crash("died before the reply was sent")
        return await real(room_id, event_type, body, **kwargs)

    monkeypatch.setattr(adapter, "put_event", put_event)
    return point


def journal_states(path: Path) -> list[str]:
    with sqlite3.connect(path) as db:
        return [state for (state,) in db.execute("SELECT state FROM inbound ORDER BY id")]


def holding(messages: list[Message], text: str) -> list[str]:
    return [m.body for m in messages if text in m.body]


async def test_a_command_answered_before_the_crash_is_neither_answered_again_nor_doubted(
        tmp_path: Path, homeserver: Homeserver, matrix_user: MakeUser,
        monkeypatch: pytest.MonkeyPatch) -> None:
    alice, bot, room = await alice_and_a_bot(homeserver, matrix_user)
    config = matrix_config(tmp_path / "home", bot, alice)
    async with matrix_gateway(config) as gw:
        await bot_in(alice, room, bot)
        crash = crash_at_the_reply_record(monkeypatch, gw)
        await alice.send_text(room, "/run echo answered-$((6*7))")
        await crash.wait(timeout=60)
        monkeypatch.undo()
    crash.restore()
    assert journal_states(crash.path) == ["acted"]  # the command ran; no answer recorded
    async with matrix_gateway(config) as gw:  # the restart after the crash
        await settled(gw)
        assert await gw.runner.inbound.unfinished() == []
        said = await bot_messages(alice, room, bot)
    assert len(holding(said, "answered-42")) == 1, [m.body for m in said]
    assert holding(said, STOPPED) == []


async def test_a_streamed_reply_out_before_the_crash_is_not_sent_again(
        tmp_path: Path, homeserver: Homeserver, matrix_user: MakeUser,
        monkeypatch: pytest.MonkeyPatch, model: FakeOpenAI) -> None:
    """The reply was a preview edited into its final text; the turn did nothing that
    lasts, so without a look at the room it would run again and post a second copy."""
    alice, bot, room = await alice_and_a_bot(homeserver, matrix_user)
    answer = " ".join(f"streamed-{i}" for i in range(30))
    model.chunk_delay = 0.03
    model.brain = lambda req: Say(answer)
    config = matrix_config(tmp_path / "home", bot, alice, **model_settings(model),
                           platforms__matrix__stream_edit_interval_seconds=0.2)
    async with matrix_gateway(config) as gw:
        await bot_in(alice, room, bot)
        crash = crash_at_the_reply_record(monkeypatch, gw)
        await alice.send_text(room, "tell me")
        await crash.wait(timeout=60)
        monkeypatch.undo()
    crash.restore()
    assert journal_states(crash.path) == ["started"]
    asked = len(model.requests)
    async with matrix_gateway(config) as gw:
        await settled(gw)
        said = await bot_messages(alice, room, bot)
    assert [m.body for m in said] == [answer]  # one message: the preview, made final
    assert said[0].edited
    assert len(model.requests) == asked  # the model was not asked again


async def test_a_command_whose_reply_never_went_out_is_said_to_have_been_interrupted(
        tmp_path: Path, homeserver: Homeserver, matrix_user: MakeUser,
        monkeypatch: pytest.MonkeyPatch) -> None:
    alice, bot, room = await alice_and_a_bot(homeserver, matrix_user)
    config = matrix_config(tmp_path / "home", bot, alice)
    async with matrix_gateway(config) as gw:
        await bot_in(alice, room, bot)
        crash = crash_at_the_send(monkeypatch, gw, "unanswered-42")
        await alice.send_text(room, "/run echo unanswered-$((6*7))")
        await crash.wait(timeout=60)
        monkeypatch.undo()
    crash.restore()
    assert journal_states(crash.path) == ["acted"]
    async with matrix_gateway(config) as gw:
        await alice.wait_for_message(room, lambda m: m.body.startswith(STOPPED), timeout=60)
        await settled(gw)
        said = await bot_messages(alice, room, bot)
    notes = holding(said, STOPPED)
    assert len(notes) == 1 and "unanswered" in notes[0]
    assert [b for b in holding(said, "unanswered-42") if not b.startswith(STOPPED)] == []
