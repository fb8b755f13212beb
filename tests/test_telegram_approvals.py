"""Approvals on Telegram: the real python-telegram-bot against the fake Bot API and the
fake model. The model's dangerous command waits under the message that started the
turn, in its forum topic, with three buttons; a tap decides it once and is answered
once; the outcome is edited into the request and its keyboard goes."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

from gateway.contract.approval import CHOICES, button_data
from gateway.daemon.assembly import Gateway, running_gateway
from tests.approval_support import dangerous, runner_brain, runs
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.telegram_server import CallbackAnswer, FakeTelegram, SentRecord
from tests.helpers import eventually_async
from tests.model_support import model_settings
from tests.test_telegram import ALICE, FORUM, telegram_config

T = TypeVar("T")
TOPIC = dict(chat_id=FORUM, chat_type="supergroup", is_forum=True, is_topic_message=True,
             thread_id=42)
MALLORY, CAROL = 2, 3


@asynccontextmanager
async def telegram_gateway(tmp_path: Path, model: FakeOpenAI, marker: Path,
                           **overrides: object) -> AsyncIterator[tuple[Gateway, FakeTelegram]]:
    """The whole gateway, Telegram on the fake and the model running ``dangerous``."""
    model.brain = runner_brain(marker)
    async with FakeTelegram() as telegram:
        config = telegram_config(tmp_path / "home", telegram, **model_settings(model),
                                 **overrides)
        async with running_gateway(config) as gw:
            await gw.runner.adapters["telegram"].wait_connected()
            yield gw, telegram


async def until(check: Callable[[], T], what: str) -> T:
    async def probe() -> T:
        return check()
    return await eventually_async(probe, timeout=30, what=what)


def requests(telegram: FakeTelegram) -> list[SentRecord]:
    return [s for s in telegram.sent if "Approval needed" in s.text]


async def asked(telegram: FakeTelegram, count: int = 1) -> tuple[SentRecord, str]:
    """The ``count``-th approval request the bot posted, and its approval id."""
    request = (await until(lambda: requests(telegram)[count - 1:], "the request"))[0]
    match = re.search(r"\((a[0-9a-f]{7})\)", request.text)
    assert match is not None, request.text
    return request, match.group(1)


def tap(telegram: FakeTelegram, request: SentRecord, approval_id: str, decision: Any, *,
        user_id: int = ALICE, username: str = "alice") -> str:
    return telegram.press(FORUM, request.message_id, button_data(approval_id, decision),
                          user_id=user_id, username=username)


async def answer_to(telegram: FakeTelegram, query_id: str) -> CallbackAnswer:
    return (await until(lambda: [a for a in telegram.callback_answers if a.id == query_id],
                        f"the answer to tap {query_id}"))[0]


async def replies(telegram: FakeTelegram, count: int = 1) -> list[str]:
    """The model's replies in topic 42 ("tool said: <the tool result>"), once there are
    ``count`` of them."""
    def said() -> list[str]:
        return [t for t in telegram.visible(FORUM, 42) if t.startswith("tool said: ")]
    return await until(lambda: said() if len(said()) >= count else [], "the model's reply")


async def outcome_shown(telegram: FakeTelegram, request: SentRecord) -> str:
    """The request as the user sees it once its outcome is edited in (keyboard gone)."""
    await until(lambda: telegram.message_markup(FORUM, request.message_id) is None,
                "the outcome's edit")
    text = telegram.visible_text(FORUM, request.message_id)
    assert text is not None
    return text


def edits_of(telegram: FakeTelegram, request: SentRecord) -> list[str]:
    return [e.text for e in telegram.edits if e.message_id == request.message_id]


async def test_approve_once_in_a_forum_topic_runs_it_and_the_result_comes_back_there(
        tmp_path: Path, model: FakeOpenAI) -> None:
    marker = tmp_path / "marker"
    async with telegram_gateway(tmp_path, model, marker) as (_, telegram):
        start = telegram.user_message(text="clean up", **TOPIC)
        request, approval_id = await asked(telegram)
        assert (request.chat_id, request.message_thread_id, request.reply_to_message_id) == (
            FORUM, 42, start["message_id"])
        assert dangerous(marker) in telegram.visible_text(FORUM, request.message_id)
        markup = telegram.message_markup(FORUM, request.message_id)
        assert markup is not None
        buttons = [b for row in markup["inline_keyboard"] for b in row]
        assert [(b["text"], b["callback_data"]) for b in buttons] == [
            (label, button_data(approval_id, decision)) for decision, label in CHOICES]
        assert runs(marker) == 0  # the turn waits for the choice

        answer = await answer_to(telegram, tap(telegram, request, approval_id, "once"))
        assert not answer.show_alert and answer.text == (
            "Approved once by alice (run in the turn).")
        (reply,) = await replies(telegram)
        result = json.loads(reply.removeprefix("tool said: "))
        assert result["exit"] == "exit code 0" and "DROP TABLE demo" in result["output"]
        shown = await outcome_shown(telegram, request)
        assert shown.endswith("\n\nApproved once by alice (run in the turn).")
        assert dangerous(marker) in shown
        assert runs(marker) == 1
        assert len(telegram.callback_answers) == 1
        polls = [json.loads(params["allowed_updates"]) for method, params in telegram.calls
                 if method == "getUpdates" and "allowed_updates" in params]
        assert polls and all("callback_query" in p for p in polls)  # taps come when asked


async def test_deny_does_not_run_it_and_the_model_is_told(
        tmp_path: Path, model: FakeOpenAI) -> None:
    marker = tmp_path / "marker"
    async with telegram_gateway(tmp_path, model, marker) as (_, telegram):
        telegram.user_message(text="clean up", **TOPIC)
        request, approval_id = await asked(telegram)
        answer = await answer_to(telegram, tap(telegram, request, approval_id, "deny"))
        assert not answer.show_alert and answer.text == "Denied by alice: not run."
        (reply,) = await replies(telegram)
        told = model.requests[-1].last
        assert told["role"] == "tool" and "not run" in told["content"]
        assert "not run: alice denied it" in reply
        assert (await outcome_shown(telegram, request)).endswith("Denied by alice: not run.")
    assert runs(marker) == 0


async def test_only_the_requester_or_an_approver_decides(
        tmp_path: Path, model: FakeOpenAI) -> None:
    marker = tmp_path / "marker"
    async with telegram_gateway(tmp_path, model, marker,
                                approvals__approvers={"telegram": [str(CAROL)]}) as (
            gw, telegram):
        telegram.user_message(text="clean up", **TOPIC)
        request, approval_id = await asked(telegram)
        refused = await answer_to(telegram, tap(telegram, request, approval_id, "once",
                                                user_id=MALLORY, username="mallory"))
        assert refused.show_alert
        assert refused.text == "Only the person who asked, or an approver, can decide this."
        stale = await answer_to(telegram, telegram.press(FORUM, request.message_id, "old:1"))
        assert stale.text and not stale.show_alert  # an old button: told, nothing decided
        assert telegram.message_markup(FORUM, request.message_id) is not None
        record = await gw.runner.approvals.get(approval_id)
        assert record is not None and record.state == "pending" and runs(marker) == 0

        approved = await answer_to(telegram, tap(telegram, request, approval_id, "once",
                                                 user_id=CAROL, username="carol"))
        assert not approved.show_alert and approved.text.startswith("Approved once by carol")
        await replies(telegram)
        assert (await outcome_shown(telegram, request)).endswith(
            "Approved once by carol (run in the turn).")
        assert runs(marker) == 1


async def test_taps_and_a_deny_racing_decide_once_and_each_tap_is_answered_once(
        tmp_path: Path, model: FakeOpenAI) -> None:
    marker = tmp_path / "marker"
    async with telegram_gateway(tmp_path, model, marker) as (gw, telegram):
        telegram.user_message(text="clean up", **TOPIC)
        request, approval_id = await asked(telegram)
        # all queued before the bot polls again: one batch of updates
        taps = [tap(telegram, request, approval_id, "once"),
                tap(telegram, request, approval_id, "deny")]
        telegram.user_message(text=f"/deny {approval_id}", **TOPIC)
        taps.append(tap(telegram, request, approval_id, "session"))

        answers = [await answer_to(telegram, query_id) for query_id in taps]
        (typed,) = await until(lambda: [t for t in telegram.visible(FORUM, 42)
                                        if t.startswith(("Denied", "Already settled"))],
                               "the answer to /deny")
        (reply,) = await replies(telegram)
        shown = await outcome_shown(telegram, request)

        winners = [a.text for a in answers if not a.show_alert]
        winners += [] if typed.startswith("Already settled") else [typed]
        assert len(winners) == 1 and shown.endswith("\n\n" + winners[0])
        assert all(a.text and a.text.startswith("Already settled") for a in answers
                   if a.show_alert)
        assert sorted(a.id for a in telegram.callback_answers) == sorted(taps)
        assert len(edits_of(telegram, request)) == 1  # one outcome, shown once
        record = await gw.runner.approvals.get(approval_id)
        assert record is not None and record.state in ("approved", "denied")
        assert runs(marker) == (1 if record.state == "approved" else 0)
        assert ("not run" in reply) == (record.state == "denied")


async def test_approve_for_this_session_then_the_same_kind_runs_without_asking(
        tmp_path: Path, model: FakeOpenAI) -> None:
    marker = tmp_path / "marker"
    async with telegram_gateway(tmp_path, model, marker) as (_, telegram):
        telegram.user_message(text="clean up", **TOPIC)
        request, approval_id = await asked(telegram)
        answer = await answer_to(telegram, tap(telegram, request, approval_id, "session"))
        assert answer.text == "Approved for this session by alice (run in the turn)."
        await replies(telegram)

        telegram.user_message(text="clean up again", **TOPIC)
        second = json.loads((await replies(telegram, 2))[1].removeprefix("tool said: "))
        assert second["exit"] == "exit code 0"
        assert len(requests(telegram)) == 1 and runs(marker) == 2
        assert (await outcome_shown(telegram, request)).endswith(
            "Approved for this session by alice (run in the turn).")
