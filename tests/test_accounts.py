"""Several bots of one platform in one daemon (``platforms.<name>.accounts``): each its
own token, allowed users and routes, its conversations keyed apart — and the one-bot
form unchanged (its account is ``default``, its keys as they always were).

The end-to-end case with two bots in one forum group is tests/test_telegram_accounts.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.config.file import ConfigError
from gateway.config.platform import account_platform, platform_of
from gateway.config.settings import parse_config
from gateway.daemon.assembly import running_gateway
from gateway.messages.auth import authorize
from gateway.platforms.discord.adapter import DiscordAdapter
from gateway.words.events import MessageEvent
from gateway.words.route import Route
from gateway.words.session_key import parse_session_key
from tests.conftest import make_config
from tests.fakes.discord_server import FakeDiscord
from tests.helpers import eventually
from tests.test_discord import ALICE, CHANNEL, fake  # noqa: F401  (fixture)

TG_A = "123456789:AAEabcdefghijklmnopqrstuvwxyz0123456"
TG_B = "987654321:AAEabcdefghijklmnopqrstuvwxyz0123456"


def _telegram(**section: object) -> dict[str, object]:
    return {"platforms": {"telegram": {"enabled": True, **section}}}


def test_accounts_take_the_sections_settings_and_their_own() -> None:
    config = parse_config(_telegram(
        allowed_chats=["-1"], messages_per_second=5, accounts=[
            {"name": "personal", "token": TG_A, "allowed_users": [123]},
            {"name": "team", "token": TG_B, "allowed_chats": [-1001234]}]), {})
    bots = dict(config.platforms.bots("telegram"))
    assert list(bots) == ["telegram/personal", "telegram/team"]
    personal, team = bots["telegram/personal"], bots["telegram/team"]
    assert personal.allowed_users == ["123"] and personal.allowed_chats == ["-1"]
    assert team.allowed_chats == ["-1001234"] and team.allowed_users == []
    assert personal.messages_per_second == team.messages_per_second == 5
    assert config.platforms.settings_for("telegram/team") is team
    assert config.platforms.settings_for("telegram/nobody") is None


def test_the_one_bot_form_is_the_account_default_with_the_keys_it_always_had() -> None:
    config = parse_config(_telegram(token=TG_A, allowed_users=[1]), {})
    ((key, bot),) = config.platforms.bots("telegram")
    assert key == "telegram" and bot.name == "default"
    assert account_platform("telegram", "default") == "telegram"
    assert account_platform("telegram", "team") == "telegram/team"
    assert platform_of("telegram/team") == "telegram"


@pytest.mark.parametrize("section, words", [
    ({"token": TG_A, "accounts": [{"name": "a", "token": TG_B}]}, "not both"),
    ({"accounts": [{"name": "a", "token": TG_A}, {"name": "a", "token": TG_B}]},
     "each name once"),
    ({"accounts": [{"name": "Team X", "token": TG_A}]}, "account name is lower-case"),
    ({"accounts": [{"name": "a", "token": TG_A, "colour": "red"}]},
     "accounts[0] (a): colour: Extra inputs are not permitted"),
    ({"accounts": [{"token": TG_A}]}, "each account needs a name"),
    ({"accounts": [{"name": "a", "token": TG_A}, {"name": "b", "token": TG_A}]},
     "accounts a and b have the same token: a bot can be one account only"),
])
def test_a_wrong_account_is_refused_by_name(section: dict[str, object], words: str) -> None:
    with pytest.raises(ConfigError, match="platforms.telegram") as caught:
        parse_config(_telegram(**section), {})
    assert words in str(caught.value)


def test_a_token_of_the_wrong_shape_is_named_with_its_account_and_every_token_masked(
        ) -> None:
    from gateway.config.registry import platforms

    with pytest.raises(ConfigError, match=r"platforms\.telegram\.accounts\.1\.token: does "
                                          r"not look like a Telegram bot token"):
        parse_config(_telegram(accounts=[{"name": "a", "token": TG_A},
                                         {"name": "b", "token": "bot" + TG_B}]), {})
    config = parse_config(_telegram(accounts=[{"name": "a", "token": TG_A},
                                              {"name": "b", "token": TG_B}]), {})
    section = config.platforms.section("telegram")
    assert set(platforms()["telegram"].secret_values(section)) == {TG_A, TG_B}


def test_who_may_talk_is_each_bots_own_list() -> None:
    config = parse_config(_telegram(accounts=[
        {"name": "personal", "token": TG_A, "allowed_users": [123]},
        {"name": "team", "token": TG_B, "allowed_users": [456]}]), {})

    def allowed(platform: str, user: str) -> bool:
        route = Route(platform, "dm", user, user_id=user)
        return authorize(MessageEvent(text="hi", route=route), config, vouched=False).allowed

    assert allowed("telegram/personal", "123") and not allowed("telegram/personal", "456")
    assert allowed("telegram/team", "456") and not allowed("telegram/team", "123")


async def test_a_named_discord_bot_keys_its_conversations_with_its_account(
        tmp_path: Path, fake: FakeDiscord) -> None:  # noqa: F811
    config = make_config(
        tmp_path / "home", platforms__discord__enabled=True,
        platforms__discord__api_base=fake.api_base,
        platforms__discord__gateway_url=fake.gateway_url,
        platforms__discord__guild_ready_timeout_seconds=fake.guild_ready_timeout,
        platforms__discord__accounts=[{"name": "ops", "token": fake.token,
                                       "allowed_users": [str(ALICE)]}])
    async with running_gateway(config) as gw:
        assert "discord" not in gw.runner.adapters
        adapter = gw.runner.adapters["discord/ops"].inner
        assert isinstance(adapter, DiscordAdapter)
        await adapter.wait_connected(timeout=30)
        await fake.user_message(channel_id=CHANNEL, content="/bg echo from-ops",
                                author_id=ALICE)
        await eventually(lambda: any("from-ops" in s.content and s.content.startswith("Job ")
                                     for s in fake.sent), timeout=30, what="the job's notice")
        (session,) = [s for s in await gw.store.list_sessions()
                      if s.route.chat_id == str(CHANNEL)]
    assert session.session_key.startswith("agent:main:discord/ops:group:")
    assert parse_session_key(session.session_key).platform == "discord/ops"
    assert session.route.platform == "discord/ops"
