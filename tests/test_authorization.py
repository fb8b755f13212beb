"""Who may talk, decided in one place: Discord role members are let in as documented,
a chat outside allowed_chats is not served, and an @username entry belongs to the
first user id seen with it. The real discord.py and python-telegram-bot against their
fakes."""

from __future__ import annotations

from pathlib import Path

from gateway.config.warnings import config_warnings
from gateway.daemon.assembly import running_gateway
from tests.conftest import make_config
from tests.fakes.telegram_server import TOKEN, FakeTelegram
from tests.test_discord import CHANNEL

DEPLOYERS = 900


async def test_a_discord_role_member_is_answered_and_a_stranger_is_not(
        tmp_path: Path, discord_endpoints) -> None:
    from tests.fakes.discord_server import FakeDiscord

    async with FakeDiscord() as fake:
        fake.add_channel(CHANNEL, "builds")
        fake.add_role(DEPLOYERS, "deployers")
        config = make_config(
            tmp_path / "home", platforms__discord__enabled=True,
            platforms__discord__token=fake.token, platforms__discord__api_base=fake.api_base,
            platforms__discord__gateway_url=fake.gateway_url,
            platforms__discord__guild_ready_timeout_seconds=fake.guild_ready_timeout,
            platforms__discord__allowed_users=["1"],
            platforms__discord__allowed_roles=[str(DEPLOYERS)])
        async with running_gateway(config) as gw:
            await gw.runner.adapters["discord"].wait_connected(timeout=30)
            await fake.user_message(content="stranger here", channel_id=CHANNEL,
                                    author_id=77, username="stranger")
            await fake.user_message(content="role member here", channel_id=CHANNEL,
                                    author_id=55, username="bob", roles=[DEPLOYERS])
            (answer,) = await fake.wait_for_sent(1, timeout=30)
    assert "role member here" in (answer.content or "")
    assert not [s for s in fake.sent if "stranger" in (s.content or "")]


async def test_a_chat_outside_allowed_chats_is_not_served(tmp_path: Path) -> None:
    from tests.test_telegram import ALICE, GROUP, OTHER_FORUM, telegram_config

    async with FakeTelegram() as telegram:
        config = telegram_config(tmp_path / "home", telegram,
                                 platforms__telegram__allowed_chats=[str(GROUP)])
        async with running_gateway(config) as gw:
            await gw.runner.adapters["telegram"].wait_connected()
            telegram.user_message(chat_id=OTHER_FORUM, chat_type="supergroup",
                                  text="not here", user_id=ALICE)
            telegram.user_message(chat_id=GROUP, chat_type="supergroup", text="here",
                                  user_id=ALICE)
            (answer,) = await telegram.wait_for_sent(1, timeout=30)
    assert answer.chat_id == GROUP
    assert [s.chat_id for s in telegram.sent] == [GROUP]


async def test_a_username_entry_is_pinned_to_the_first_user_seen_with_it(
        tmp_path: Path) -> None:
    async with FakeTelegram() as telegram:
        config = make_config(
            tmp_path / "home", platforms__telegram__enabled=True,
            platforms__telegram__token=telegram.token,
            platforms__telegram__base_url=telegram.base_url,
            platforms__telegram__base_file_url=telegram.base_file_url,
            platforms__telegram__allowed_users=["@carol"])
        async with running_gateway(config) as gw:
            await gw.runner.adapters["telegram"].wait_connected()
            telegram.user_message(chat_id=501, user_id=501, username="carol", text="first")
            (answer,) = await telegram.wait_for_sent(1, timeout=30)
            # the name changes hands: someone else now calls themselves @carol
            telegram.user_message(chat_id=502, user_id=502, username="carol", text="second")
            sent = await telegram.wait_for_sent(2, timeout=30)
    assert answer.chat_id == 501 and "first" in answer.text
    assert sent[1].chat_id == 502 and "pairing" in sent[1].text.lower()  # not let in


def test_check_config_warns_about_usernames(tmp_path: Path) -> None:
    config = make_config(tmp_path / "home", platforms__telegram__enabled=True,
                         platforms__telegram__token=TOKEN,
                         platforms__telegram__allowed_users=["42", "@ann"])
    (warning,) = config_warnings(config)
    assert "platforms.telegram.allowed_users: @ann" in warning and "pinned" in warning
