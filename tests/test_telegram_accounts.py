"""Two Telegram bots in one daemon (``platforms.telegram.accounts``), both members of one
forum group: each bot's conversations are its own, and a job started through bot A is
reported through bot A, in its topic — never through bot B, which serves the same
group and topic — through the real python-telegram-bot against two fake Bot APIs."""

from __future__ import annotations

from pathlib import Path

from gateway.daemon.assembly import running_gateway
from gateway.platforms.telegram.adapter import TelegramAdapter
from tests.conftest import make_config
from tests.fakes.telegram_server import FakeTelegram
from tests.helpers import eventually, settled
from tests.test_telegram import ALICE, FORUM

TOPIC = 42
TOKEN_A = "111111111:AAEabcdefghijklmnopqrstuvwxyz0123456"
TOKEN_B = "222222222:AAEabcdefghijklmnopqrstuvwxyz0123456"


def _in_topic(fake: FakeTelegram, text: str) -> None:
    fake.user_message(chat_id=FORUM, chat_type="supergroup", is_forum=True, thread_id=TOPIC,
                      is_topic_message=True, user_id=ALICE, text=text)


def _said(fake: FakeTelegram) -> list[tuple[int, int | None, str]]:
    return [(s.chat_id, s.message_thread_id, s.text) for s in fake.sent]


async def test_a_job_started_through_one_bot_reports_through_that_bot_in_its_topic(
        tmp_path: Path) -> None:
    async with FakeTelegram(TOKEN_A, "personal_bot") as bot_a, \
            FakeTelegram(TOKEN_B, "team_bot") as bot_b:
        config = make_config(
            tmp_path / "home", platforms__telegram__enabled=True,
            platforms__telegram__messages_per_second=1000,
            platforms__telegram__group_messages_per_minute=1000,
            platforms__telegram__accounts=[
                {"name": "personal", "token": TOKEN_A, "base_url": bot_a.base_url,
                 "base_file_url": bot_a.base_file_url, "allowed_users": [str(ALICE)]},
                {"name": "team", "token": TOKEN_B, "base_url": bot_b.base_url,
                 "base_file_url": bot_b.base_file_url, "allowed_users": [str(ALICE)]}])
        async with running_gateway(config) as gw:
            for key in ("telegram/personal", "telegram/team"):
                adapter = gw.runner.adapters[key].inner
                assert isinstance(adapter, TelegramAdapter) and adapter.platform == key
                await adapter.wait_connected(timeout=30)
            _in_topic(bot_a, "/bg sleep 0.3; echo reported-by-a")
            _in_topic(bot_b, "hello team bot")
            await eventually(lambda: any("reported-by-a" in t and t.startswith("Job ")
                                         for _, _, t in _said(bot_a)),
                             timeout=30, what="the job's notice through bot A")
            await eventually(lambda: any(t.startswith("Received: hello team bot")
                                         for _, _, t in _said(bot_b)),
                             timeout=30, what="bot B's answer")
            await settled(gw)
            keys = sorted({s.session_key for s in await gw.store.list_sessions()})
        notices_a = [(c, th) for c, th, t in _said(bot_a) if t.startswith("Job ")]
    assert notices_a == [(FORUM, TOPIC)]  # once, in the topic that started it
    assert not any("reported-by-a" in t for _, _, t in _said(bot_b))  # never through B
    assert keys == [f"agent:main:telegram/personal:group:{FORUM}:{TOPIC}",
                    f"agent:main:telegram/team:group:{FORUM}:{TOPIC}"]
