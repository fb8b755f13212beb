"""Under a flood limit the model's answers to notices go out together.

With the model agent a job's notice gives the model a turn, and its answer is what is
posted. Ten jobs end at once into one topic of a forum group that takes four messages
a minute: each notice still gets its own turn, in order (the session's history has
each), and once the group cannot take the answers one by one they go out joined — each
answer once, whole and in order, headed by its notice's facts — in a few messages,
each row recorded delivered by the one send that carried it. A merged message of
answers that dies before its record goes again whole after the restart, as its
notices: the model is not asked a second time, and no notice goes on its own as well.
"""

from __future__ import annotations

import asyncio
import math
import re
from pathlib import Path

import pytest

from agent.history import History
from gateway.config.settings import Config
from gateway.daemon.assembly import running_gateway
from gateway.delivery.notifications import NewNotification
from gateway.words.return_address import ReturnAddress
from gateway.words.route import Route
from tests.conftest import make_config
from tests.fakes.openai_server import ChatRequest, FakeOpenAI, Say
from tests.fakes.telegram_server import FakeTelegram
from tests.helpers import eventually_async
from tests.memory_platform import MemoryAdapter
from tests.model_support import is_notice, model_settings
from tests.test_notice_floods import addresses_in, all_delivered, crash_at_the_merged_record
from tests.test_telegram import FORUM

JOBS = 10
PER_MINUTE = 4
TOPIC = Route("telegram", "group", str(FORUM), thread_id="42")


def answers(req: ChatRequest) -> Say:
    """The model's answer to a notice names the job it read about."""
    (job,) = re.findall(r"\bJob (j\d+) finished", req.last["content"])
    return Say(f"answer-{job}: the build is done.")


def answered(text: str) -> list[str]:
    return re.findall(r"\banswer-(j\d+):", text)


def limited_telegram_with_model(home: Path, fake: FakeTelegram, model: FakeOpenAI) -> Config:
    return make_config(
        home, platforms__telegram__enabled=True, platforms__telegram__token=fake.token,
        platforms__telegram__base_url=fake.base_url,
        platforms__telegram__group_messages_per_minute=PER_MINUTE, **model_settings(model))


async def test_a_flood_of_model_notices_into_a_limited_topic_goes_out_in_few_messages(
        tmp_path: Path, model: FakeOpenAI) -> None:
    model.brain = answers
    async with FakeTelegram() as fake:
        fake.limit_group(FORUM, messages=PER_MINUTE, per=60.0)
        async with running_gateway(limited_telegram_with_model(tmp_path / "home", fake,
                                                               model)) as gw:
            await gw.runner.adapters["telegram"].wait_connected()
            (address,) = (await addresses_in(gw, {42: TOPIC})).values()
            jobs = [f"j{i}" for i in range(1, JOBS + 1)]
            # the jobs end at once, each end its own commit
            for job in jobs:
                await gw.outbox.produce([NewNotification(
                    f"{job}:completion:0", "completion", address,
                    f"Job {job} finished: exit code 0 after 2 s.", job_id=job)])
            await all_delivered(gw, JOBS)
            rows = sorted(await gw.outbox.list(), key=lambda n: n.id)
            history = await History(gw.store.db).load(address.session_id)
            said = "\n".join(line.text for line in await gw.store.messages(address.session_id))
        sent = [s for s in fake.sent if s.chat_id == FORUM and "answer-" in s.text]

    # each notice had its own turn of the model, in order, kept in the session's history
    asked = [re.findall(r"\bJob (j\d+) finished", r.last["content"])[0]
             for r in model.requests if is_notice(r)]
    assert asked == jobs
    notices = [m for m in history if m["role"] == "user"]
    assert [re.findall(r"\bJob (j\d+)", m["content"])[0] for m in notices] == jobs
    assert [answered(m["content"])[0] for m in history
            if m["role"] == "assistant" and m.get("content")] == jobs

    # every answer arrived once, in order, with its notice's facts, in a few messages
    assert [job for s in sent for job in answered(s.text)] == jobs
    assert {s.message_thread_id for s in sent} == {42}
    for s in sent:
        assert re.findall(r"\bJob (j\d+) finished: exit code 0", s.text) == answered(s.text)
    later = JOBS - PER_MINUTE  # after the minute's room, a message for three at most
    assert len(sent) <= PER_MINUTE + math.ceil(later / 3) and len(sent) < JOBS
    assert any(s.text.startswith(f"{len(answered(s.text))} notices at once") for s in sent)

    # each row delivered once, by the send that carried it; the transcript has each once
    assert {n.state for n in rows} == {"delivered"} and {n.attempts for n in rows} == {1}
    by_message: dict[str | None, list[str | None]] = {}
    for n in rows:
        by_message.setdefault(n.sent_message_id, []).append(n.job_id)
    assert None not in by_message and len(by_message) == len(sent)
    assert answered(said) == jobs


async def test_a_merged_message_of_answers_that_died_before_its_record_goes_again_whole(
        tmp_path: Path, model: FakeOpenAI, monkeypatch: pytest.MonkeyPatch) -> None:
    model.brain = answers
    chat = Route("memory", "dm", "1", user_id="1")
    config = make_config(tmp_path / "home", platforms__web__enabled=False,
                         **model_settings(model))
    adapter = MemoryAdapter("memory")
    adapter.room = 0  # the chat takes nothing more now: what waits goes together
    async with running_gateway(config, [adapter]) as gw:
        session = await gw.store.get_or_create("agent:main:memory:dm:1", chat)
        crash = crash_at_the_merged_record(gw, monkeypatch)
        address = ReturnAddress(session.session_key, session.id, chat)
        # all four queued behind a turn under way, so they are in the lane together
        busy = asyncio.Event()
        lane = gw.runner.run_in_lane(session.session_key, busy.wait)
        await gw.outbox.produce([
            NewNotification(f"j{i}:completion:0", "completion", address,
                            f"Job j{i} finished: exit code {i} after {i} s.", job_id=f"j{i}")
            for i in range(1, 5)])

        async def queued() -> bool:
            return gw.runner.lanes.waiting(session.session_key) == 4

        await eventually_async(queued, what="the four notices queued")
        busy.set()
        await lane
        await crash.wait()
    (merged,) = [m for m in adapter.sent if m.kind == "notification"]
    assert answered(merged.text) == ["j1", "j2", "j3", "j4"]
    turns = len([r for r in model.requests if is_notice(r)])
    assert turns == 4
    first_life = len(adapter.sent)
    adapter.room = None  # a new life's limiter knows of no limit yet

    async with running_gateway(config, [adapter]) as gw:
        async def delivered() -> bool:
            rows = await gw.outbox.list()
            return len(rows) == 4 and {n.state for n in rows} == {"delivered"}

        await eventually_async(delivered, what="the notices delivered after the restart")
        await gw.router.wait_idle()
        rows = await gw.outbox.list()
    # the same message once more, whole, under its name — as its notices (the model had
    # its turns), none of them on its own as well
    (again,) = adapter.sent[first_life:]
    assert again.dedupe_key == merged.dedupe_key is not None
    assert re.findall(r"\bJob (j\d) finished", again.text) == ["j1", "j2", "j3", "j4"]
    assert len([r for r in model.requests if is_notice(r)]) == turns
    assert len({n.sent_message_id for n in rows}) == 1 and {n.attempts for n in rows} == {1}
