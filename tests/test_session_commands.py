"""Sessions from the chat: ``/sessions``, ``/resume``, ``/title``, ``/archive``, and the
model's title after a first exchange — through the real runner, store, outbox and
router, on the in-memory platform (and the fake model endpoint for the model's part).

``/resume`` keeps ownership the one rule: the resumed session owns its own outstanding
work again (its job's notice arrives as live), the session it replaced ended with
reason ``resume`` (its job's notice arrives labelled as a closed session's), and the
resumed session's parked notices are offered again.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

import gateway.delivery.router as router_module
from gateway.config.settings import Config
from gateway.daemon.assembly import Gateway, running_gateway
from gateway.delivery.notifications import NewNotification
from gateway.messages.conversations import list_conversations
from gateway.words.return_address import ReturnAddress
from gateway.words.route import Route
from tests.conftest import make_config
from tests.fakes.openai_server import FakeOpenAI, Say
from tests.faults import Gate
from tests.helpers import eventually, settled
from tests.memory_platform import MemoryAdapter
from tests.model_support import is_summary, model_settings

CHAT = Route("memory", "dm", "1", user_id="1")
KEY = "agent:main:memory:dm:1"
LATE = "[from an ended session"


@pytest.fixture(autouse=True)
def hour_long_polls(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(router_module, "IDLE_POLL_SECONDS", 3600.0)


def _config(tmp_path: Path, **settings: object) -> Config:
    return make_config(tmp_path / "home", platforms__web__enabled=False,
                       jobs__watch__cooldown_seconds=0, **settings)


@asynccontextmanager
async def _gateway(config: Config, adapter: MemoryAdapter) -> AsyncIterator[Gateway]:
    async with running_gateway(config, [adapter]) as gw:
        yield gw


async def _say(adapter: MemoryAdapter, text: str) -> str:
    """What the gateway answered (its last message in the chat)."""
    assert await adapter.receive(text, CHAT) == "handled"
    return adapter.sent_to(CHAT)[-1].text


async def _new(adapter: MemoryAdapter) -> None:
    assert (await _say(adapter, "/new")).startswith("Started a new session")


async def test_sessions_lists_this_conversations_sessions_newest_first_with_the_current_marked(
        tmp_path: Path) -> None:
    adapter = MemoryAdapter("memory", send_delay=0.001)
    async with _gateway(_config(tmp_path), adapter) as gw:
        await _say(adapter, "first topic: the build")
        await _new(adapter)
        await _say(adapter, "second topic: the deploy")
        await _say(adapter, "more on the deploy")
        second = await gw.store.live_session(KEY)
        await _new(adapter)
        await _say(adapter, "/title Release day")
        listed = await _say(adapter, "/sessions")
        searched = await _say(adapter, "/sessions build")
        await settled(gw)
        in_second = len(await gw.store.messages(second.id))
    lines = listed.splitlines()
    assert lines[0] == "Sessions here, newest first:"
    # newest first: 3 (current, named), 2, 1; each with its first words as its title
    assert lines[1].startswith("● 3. Release day — current")
    assert lines[3].startswith("2. second topic: the deploy")
    assert lines[5].startswith("1. first topic: the build")
    assert f"{in_second} messages" in lines[4] and in_second >= 4  # said and answered
    assert "1. first topic: the build" in searched and "2. second" not in searched


async def test_resume_brings_an_earlier_session_back_and_ownership_follows(
        tmp_path: Path) -> None:
    """A job of the resumed session reports as live; a job of the session it replaced
    reports labelled as a closed session's — each once, in this chat."""
    adapter = MemoryAdapter("memory", send_delay=0.001)
    gate_1, gate_2 = Gate(tmp_path / "g1"), Gate(tmp_path / "g2")
    async with _gateway(_config(tmp_path), adapter) as gw:
        started_1 = await _say(adapter, f"/bg {gate_1.wait}; echo from-the-first")
        first = await gw.store.live_session(KEY)
        await _new(adapter)
        started_2 = await _say(adapter, f"/bg {gate_2.wait}; echo from-the-second")
        second = await gw.store.live_session(KEY)
        answer = await _say(adapter, "/resume 1")
        live = await gw.store.live_session(KEY)
        ended = await gw.store.get(second.id)
        await gate_1.open()
        await gate_2.open()
        await eventually(lambda: len(_notices(adapter)) >= 2, what="both jobs' notices")
        await settled(gw)
    assert answer.startswith("Resumed session 1") and first.id in answer
    assert live is not None and live.id == first.id
    assert ended is not None and ended.end_reason == "resume"
    job_1, job_2 = started_1.split()[2].rstrip(";"), started_2.split()[2].rstrip(";")
    notices = {n.split("Job ")[1].split()[0].rstrip(":"): n for n in _notices(adapter)}
    assert set(notices) == {job_1, job_2}
    assert not notices[job_1].startswith(LATE)  # live again: its own work is its own
    assert notices[job_2].startswith(LATE)  # replaced: reported as a closed session's


def _notices(adapter: MemoryAdapter) -> list[str]:
    return [m.text for m in adapter.sent_to(CHAT) if m.kind == "notification"]


async def test_a_resumed_sessions_parked_notice_is_offered_again_and_delivered_live(
        tmp_path: Path) -> None:
    adapter = MemoryAdapter("memory", send_delay=0.001)
    async with _gateway(_config(tmp_path), adapter) as gw:
        await _say(adapter, "hello")
        first = await gw.store.live_session(KEY)
        await _new(adapter)
        # a delegation's result for the first session, which has ended: parked
        await gw.outbox.produce([NewNotification(
            "d1:result:0", "async_delegation", ReturnAddress(KEY, first.id, CHAT),
            "Delegation d1 finished: the answer is 42", job_id="d1")])
        await settled(gw)
        (parked,) = await gw.outbox.list("parked")
        assert parked.reason == "owner_ended"
        await _say(adapter, "/resume 1")
        await settled(gw)
        (row,) = [n for n in await gw.outbox.list() if n.job_id == "d1"]
    assert row.state == "delivered"
    assert [t for t in _notices(adapter)] == ["Delegation d1 finished: the answer is 42"]


async def test_resume_refuses_what_it_cannot_resume_and_changes_nothing(
        tmp_path: Path) -> None:
    adapter = MemoryAdapter("memory", send_delay=0.001)
    async with _gateway(_config(tmp_path), adapter) as gw:
        await _say(adapter, "hello")
        live = await gw.store.live_session(KEY)
        here = await _say(adapter, "/resume 1")
        missing = await _say(adapter, "/resume 7")
        usage = await _say(adapter, "/resume")
        # another conversation's session is not this one's to resume
        other = Route("memory", "dm", "2", user_id="2")
        assert await adapter.receive("elsewhere", other) == "handled"
        theirs = await gw.store.live_session("agent:main:memory:dm:2")
        foreign = await _say(adapter, f"/resume {theirs.id}")
        still = await gw.store.live_session(KEY)
        await settled(gw)
    assert here == "That is the session you are in."
    assert missing.startswith("No session 7 in this conversation")
    assert usage.startswith("Which one?")
    assert foreign.startswith(f"No session {theirs.id} in this conversation")
    assert still is not None and still.id == live.id


async def test_title_names_the_conversation_and_archive_takes_it_off_the_list(
        tmp_path: Path) -> None:
    adapter = MemoryAdapter("memory", send_delay=0.001)
    async with _gateway(_config(tmp_path), adapter) as gw:
        await _say(adapter, "hello")
        assert (await _say(adapter, "/title  The   weekly report ")) == (
            "This conversation is now called “The weekly report”.")
        first = await gw.store.live_session(KEY)
        await _new(adapter)  # the name stays the conversation's
        named = [c.title for c in await list_conversations(gw.store, "memory")]
        await _say(adapter, "/archive")
        shown = await list_conversations(gw.store, "memory")
        archived = await list_conversations(gw.store, "memory", "only")
        await gw.store.update_session(first.id, archived=True)  # an old one, from the page
        hidden = await _say(adapter, "/sessions")
        everything = await _say(adapter, "/sessions all")
        await settled(gw)
    assert named == ["The weekly report"]
    assert shown == [] and [c.title for c in archived] == ["The weekly report"]
    assert "● 2. The weekly report — current" in hidden  # the current one always shows
    assert "1. The weekly report" not in hidden.replace("2. The weekly report", "")
    assert everything.startswith("Sessions here, newest first (archived ones too):")
    assert "1. The weekly report\n" in everything and "archived" in everything


async def test_the_model_names_a_conversation_after_its_first_exchange_never_over_a_persons(
        tmp_path: Path, model: FakeOpenAI) -> None:
    def brain(req) -> Say:
        if req.messages[0]["content"].startswith("You name conversations"):
            assert req.messages[1]["content"].startswith("User: my build fails")
            return Say('"Fixing the failing build."')
        return Say("Let us look at the log.")

    model.brain = brain
    adapter = MemoryAdapter("memory", send_delay=0.001)
    config = _config(tmp_path, sessions__auto_title=True, **model_settings(model))
    async with _gateway(config, adapter) as gw:
        await _say(adapter, "my build fails")
        await settled(gw)
        named = (await gw.store.live_session(KEY)).title
        await _say(adapter, "and now?")  # not a first exchange: no second request
        await _new(adapter)
        await _say(adapter, "/title Mine")
        asked = sum(1 for r in model.requests
                    if r.messages[0]["content"].startswith("You name conversations"))
        await _say(adapter, "a fresh start")
        await settled(gw)
        kept = (await gw.store.live_session(KEY)).title
    assert named == "Fixing the failing build"
    assert asked == 1
    assert kept == "Mine"  # the person's name stays


async def test_resume_gives_the_model_the_resumed_sessions_history(
        tmp_path: Path, model: FakeOpenAI) -> None:
    model.brain = lambda req: Say("noted")
    adapter = MemoryAdapter("memory", send_delay=0.001)
    async with _gateway(_config(tmp_path, **model_settings(model)), adapter) as gw:
        await _say(adapter, "my name is Ada")
        await _new(adapter)
        await _say(adapter, "my name is Grace")
        await _say(adapter, "/resume 1")
        await _say(adapter, "what is my name?")
        await settled(gw)
    said = [m["content"] for m in model.requests[-1].messages if m["role"] == "user"]
    assert not any(is_summary(r) for r in model.requests)
    assert said == ["my name is Ada", "what is my name?"]


async def test_on_telegram_resume_in_a_topic_reports_the_resumed_sessions_job_live(
        tmp_path: Path) -> None:
    """Through python-telegram-bot against the fake Bot API, in a forum topic: a job of
    the resumed session reports live there, one of the replaced session labelled."""
    from tests.fakes.telegram_server import FakeTelegram
    from tests.test_telegram import ALICE, FORUM, telegram_config

    topic = dict(chat_id=FORUM, chat_type="supergroup", is_forum=True, thread_id=7,
                 is_topic_message=True, user_id=ALICE)
    gate_1, gate_2 = Gate(tmp_path / "g1"), Gate(tmp_path / "g2")
    async with FakeTelegram() as fake:
        async with running_gateway(telegram_config(tmp_path / "home", fake)) as gw:
            await gw.runner.adapters["telegram"].wait_connected(timeout=30)

            async def say(text: str, answers: int) -> None:
                fake.user_message(text=text, **topic)
                await eventually(lambda: len(fake.sent) >= answers, timeout=30, what=text)

            await say(f"/bg {gate_1.wait}; echo first-session-job", 1)
            await say("/new", 2)
            await say(f"/bg {gate_2.wait}; echo second-session-job", 3)
            await say("/resume 1", 4)
            assert fake.sent[-1].text.startswith("Resumed session 1")
            await gate_1.open()
            await gate_2.open()
            await eventually(lambda: sum(s.text.startswith(("Job ", LATE))
                                         for s in fake.sent) >= 2,
                             timeout=30, what="both jobs' notices")
            await settled(gw)
    notices = {("first" if "first-session-job" in s.text else "second"): s
               for s in fake.sent if "session-job" in s.text and "Started job" not in s.text}
    assert set(notices) == {"first", "second"}
    assert all((s.chat_id, s.message_thread_id) == (FORUM, 7) for s in notices.values())
    assert not notices["first"].text.startswith(LATE)
    assert notices["second"].text.startswith(LATE)
