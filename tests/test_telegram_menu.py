"""Telegram's command menu, per scope, and /start: what a new user sees first."""

from __future__ import annotations

import json
from pathlib import Path

from gateway.daemon.assembly import running_gateway
from tests.fakes.telegram_server import FakeTelegram
from tests.test_telegram import ALICE, telegram_config


async def test_private_chats_and_groups_each_get_their_menu_and_start_welcomes(
        tmp_path: Path) -> None:
    async with FakeTelegram() as telegram:
        async with running_gateway(telegram_config(tmp_path / "home", telegram)) as gw:
            await gw.runner.adapters["telegram"].wait_connected()
            telegram.user_message(chat_id=ALICE, text="/start")
            (welcome,) = await telegram.wait_for_sent(1, timeout=30)
    menus = {json.loads(p["scope"])["type"]: [c["command"] for c in json.loads(p["commands"])]
             for m, p in telegram.calls if m == "setMyCommands"}
    assert set(menus) == {"all_private_chats", "all_group_chats"}
    assert "start" in menus["all_private_chats"] and "start" not in menus["all_group_chats"]
    assert {"help", "stop", "bg"} <= set(menus["all_group_chats"])
    assert f"Your telegram user id is {ALICE}." in welcome.text and "/help" in welcome.text
