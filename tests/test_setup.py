"""``homing setup`` as a person runs it — at a terminal, or scripted with flags — against
the fake Telegram and Discord; what it writes is what ``check-config`` and ``run`` take."""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import stat
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import yaml

from gateway.config.env_file import read_env_file
from tests.fakes.discord_server import FakeDiscord
from tests.fakes.telegram_server import FakeTelegram
from tests.real_daemon import HOMING, home_env, run_cli
from tests.terminal import Terminal


@pytest.fixture
async def telegram() -> AsyncIterator[FakeTelegram]:
    async with FakeTelegram() as fake:
        yield fake


@pytest.fixture
async def discord() -> AsyncIterator[FakeDiscord]:
    async with FakeDiscord() as fake:
        yield fake


def scripted(telegram: FakeTelegram, discord: FakeDiscord, *extra: str) -> list[str]:
    """``homing setup`` with every answer a flag, the tokens in TG_TOKEN and DC_TOKEN."""
    return ["setup", "--yes", "--platforms", "web,telegram,discord",
            "--telegram-token-env", "TG_TOKEN", "--telegram-user-id", "4242",
            "--telegram-base-url", telegram.base_url,
            "--discord-token-env", "DC_TOKEN", "--discord-user-id", "777",
            "--discord-api-base", discord.api_base, "--discord-gateway-url", discord.gateway_url,
            "--no-service", *extra]


def free_port() -> int:
    with socket.create_server(("127.0.0.1", 0)) as probe:
        return int(probe.getsockname()[1])


async def logged(stderr: asyncio.StreamReader, events: set[str]) -> None:
    """Read the daemon's JSON log lines until each of ``events`` has been logged."""
    seen: set[str] = set()
    while not events <= seen:
        line = await asyncio.wait_for(stderr.readline(), 30)
        assert line, f"the daemon exited before logging {events - seen}"
        try:
            seen.add(json.loads(line).get("event"))
        except ValueError:
            continue  # a library's plain line


async def test_scripted_setup_writes_what_check_config_run_and_doctor_accept(
        tmp_path: Path, telegram: FakeTelegram, discord: FakeDiscord) -> None:
    home = tmp_path / "home"
    port = free_port()
    env = {**home_env(home), "TG_TOKEN": telegram.token, "DC_TOKEN": discord.token}
    code, out, err = await run_cli(*scripted(telegram, discord, "--web-port", str(port)),
                                   env=env)
    assert code == 0, err
    assert f"wrote {home / 'config.yaml'}" in out
    config_text = (home / "config.yaml").read_text()
    env_file = home / "homing.env"
    assert stat.S_IMODE(env_file.stat().st_mode) == 0o600
    assert stat.S_IMODE((home / "config.yaml").stat().st_mode) == 0o600
    assert read_env_file(env_file) == {"TELEGRAM_BOT_TOKEN": telegram.token,
                                       "DISCORD_BOT_TOKEN": discord.token}
    assert telegram.token not in config_text and discord.token not in config_text
    platforms = yaml.safe_load(config_text)["platforms"]
    assert platforms["web"] == {"enabled": True, "port": port}
    assert platforms["telegram"] == {
        "enabled": True, "token": "${TELEGRAM_BOT_TOKEN}", "allowed_users": ["4242"],
        "base_url": telegram.base_url, "base_file_url": telegram.base_file_url}
    assert platforms["discord"] == {
        "enabled": True, "token": "${DISCORD_BOT_TOKEN}", "allowed_users": ["777"],
        "api_base": discord.api_base, "gateway_url": discord.gateway_url}

    # nothing exported: the commands read homing.env themselves (systemd reads it too,
    # through EnvironmentFile=); nor the variables setup read the tokens from
    run_env = home_env(home)
    code, out, err = await run_cli("check-config", env=run_env)
    assert code == 0, err
    proc = await asyncio.create_subprocess_exec(*HOMING, "run", env=run_env,
                                                stderr=asyncio.subprocess.PIPE)
    try:
        assert proc.stderr is not None
        await logged(proc.stderr, {"web_chat_listening", "telegram_connected",
                                   "discord_ready", "gateway_started"})
        drain = asyncio.create_task(proc.stderr.read())
        code, out, err = await run_cli("doctor", env=home_env(home))
        assert code == 0, out + err
        assert f"ok   web port: 127.0.0.1:{port} is in use by the running homing" in out
        assert f"ok   telegram polling: the running homing (pid {proc.pid}) polls" in out
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 20) == 0
        await drain
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_an_existing_config_is_replaced_only_with_force(
        tmp_path: Path, telegram: FakeTelegram, discord: FakeDiscord) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.yaml").write_text("platforms: {web: {port: 9999}}\n")
    env = {**home_env(home), "TG_TOKEN": telegram.token, "DC_TOKEN": discord.token}
    code, _, err = await run_cli(*scripted(telegram, discord), env=env)
    assert code == 2
    assert f"give --force: {home / 'config.yaml'} exists" in err
    assert (home / "config.yaml").read_text() == "platforms: {web: {port: 9999}}\n"
    assert not (home / "homing.env").exists()
    code, out, err = await run_cli(*scripted(telegram, discord, "--force"), env=env)
    assert code == 0, err
    assert (home / "config.yaml.bak").read_text() == "platforms: {web: {port: 9999}}\n"
    assert "${TELEGRAM_BOT_TOKEN}" in (home / "config.yaml").read_text()


@pytest.mark.parametrize(("flags", "missing"), [
    (["--platforms", "telegram"], "give --telegram-token-env VAR: telegram bot token is needed"),
    (["--platforms", "telegram", "--telegram-token-env", "TG_TOKEN"],
     "give --telegram-user-id ID: your telegram user id is needed"),
    (["--platforms", "telegram", "--telegram-token-env", "UNSET_TOKEN"],
     "the environment variable UNSET_TOKEN is not set"),
    (["--platforms", "discord", "--discord-token-env", "DC_TOKEN"],
     "give --discord-user-id ID: your discord user id is needed"),
])
async def test_scripted_setup_names_the_flag_an_answer_needs(
        tmp_path: Path, telegram: FakeTelegram, discord: FakeDiscord, flags: list[str],
        missing: str) -> None:
    home = tmp_path / "home"
    env = {**home_env(home), "TG_TOKEN": telegram.token, "DC_TOKEN": discord.token}
    code, _, err = await run_cli("setup", "--yes", *flags,
                                 "--telegram-base-url", telegram.base_url,
                                 "--discord-api-base", discord.api_base, env=env)
    assert code == 2
    assert missing in err
    assert not (home / "config.yaml").exists() and not (home / "homing.env").exists()


async def test_a_token_the_platform_refuses_is_not_taken(
        tmp_path: Path, telegram: FakeTelegram, discord: FakeDiscord) -> None:
    home = tmp_path / "home"
    env = {**home_env(home), "TG_TOKEN": "987654321:AAE" + "w" * 32, "DC_TOKEN": discord.token}
    code, _, err = await run_cli(*scripted(telegram, discord), env=env)
    assert code == 1
    assert "homing setup: 127.0.0.1 refused the token (401 Unauthorized) — fix: copy the " \
           "bot's token again from @BotFather" in err
    assert not (home / "config.yaml").exists()

    discord.allowed_privileged_intents = 0  # MESSAGE CONTENT INTENT off in the portal
    env["TG_TOKEN"] = telegram.token
    code, _, err = await run_cli(*scripted(telegram, discord), env=env)
    assert code == 1
    assert "its application may not read message content" in err
    assert "fix: enable MESSAGE CONTENT INTENT in the Developer Portal → Bot" in err
    assert not (home / "config.yaml").exists()


async def test_setup_installs_the_service_when_asked(tmp_path: Path) -> None:
    home = tmp_path / "home"
    units = tmp_path / "units"
    code, out, err = await run_cli("setup", "--yes", "--service", "--unit-dir", str(units),
                                   env=home_env(home))
    assert code == 0, err
    unit = (units / "homing.service").read_text()
    assert f"run --config {home / 'config.yaml'}" in unit
    assert f"wrote {units / 'homing.service'}" in out


async def test_setup_at_a_terminal_learns_the_owner_from_their_message(
        tmp_path: Path, telegram: FakeTelegram) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.yaml").write_text("platforms: {web: {port: 9999}}\n")
    # the owner has written to the bot (setup asks them to; here it is there already)
    telegram.user_message(chat_id=4242, user_id=4242, username="ada", first_name="Ada",
                          text="hello bot")
    async with Terminal(*HOMING, "setup", "--telegram-base-url", telegram.base_url,
                        "--no-service", env=home_env(home)) as term:
        await term.expect(f"{home / 'config.yaml'} exists. Replace it (the old one is kept "
                          f"as config.yaml.bak)? [y/N]: ")
        term.type("y")
        await term.expect("Platforms to enable, comma-separated (web, telegram, discord, "
                          "slack, matrix) [web]: ")
        term.type("web,telegram,irc")
        await term.expect("irc: choose from web, telegram, discord, slack, matrix")
        term.type("web,telegram")
        await term.expect("Web chat port on 127.0.0.1 (0: any free one) [8765]: ")
        term.type("")
        await term.expect("Telegram bot token (from @BotFather: /newbot, or /mybots → API "
                          "Token) (not shown): ")
        term.type("987654321:AAE" + "w" * 32)
        await term.expect("refused the token (401 Unauthorized)")
        await term.expect("(not shown): ")
        term.type(telegram.token)
        await term.expect(f"ok: the bot is @homing_bot (id {telegram.bot_id})")
        await term.expect("Your Telegram user id (Enter: learn it from a message you send "
                          "the bot) [learn]: ")
        term.type("")
        await term.expect("Now send any message to @homing_bot from your own Telegram "
                          "account")
        await term.expect("you are 4242 (@ada)")
        await term.expect(f"wrote {home / 'config.yaml'}")
        await term.expect("next: `homing doctor` checks it all live")
        assert await term.exit_code() == 0
    assert telegram.token not in term.transcript  # typed at getpass: never echoed
    platforms = yaml.safe_load((home / "config.yaml").read_text())["platforms"]
    assert platforms["telegram"]["allowed_users"] == ["4242"]
    assert platforms["web"] == {"enabled": True, "port": 8765}
    assert read_env_file(home / "homing.env") == {"TELEGRAM_BOT_TOKEN": telegram.token}
    assert (home / "config.yaml.bak").exists()
    # the owner is told in their chat, and their message is not left for the daemon
    assert [(s.chat_id, s.text) for s in telegram.sent] == [
        (4242, "Homing setup: you are 4242 (@ada); this bot will answer you.")]
    assert telegram.pending_updates == []


async def test_an_account_is_added_beside_the_bot_there_is_and_both_are_checked(
        tmp_path: Path, telegram: FakeTelegram, discord: FakeDiscord) -> None:
    """``--account``: the second bot's own questions (its token checked with its own
    server), filed as an account; the first bot keeps every setting as ``default``."""
    home = tmp_path / "home"
    env = {**home_env(home), "TG_TOKEN": telegram.token, "DC_TOKEN": discord.token}
    code, _, err = await run_cli(*scripted(telegram, discord, "--web-port", "0"), env=env)
    assert code == 0, err
    first = yaml.safe_load((home / "config.yaml").read_text())["platforms"]["telegram"]
    async with FakeTelegram(token="7654321:" + "B" * 35, bot_username="team_bot") as team:
        add = ["setup", "--yes", "--no-service", "--platforms", "telegram",
               "--account", "team", "--telegram-token-env", "TEAM_TOKEN",
               "--telegram-user-id", "55", "--telegram-base-url", team.base_url]
        code, out, err = await run_cli(*add, env={**env, "TEAM_TOKEN": "1:" + "x" * 35})
        assert code == 1 and "token" in err.lower()  # refused by its server: nothing added
        assert yaml.safe_load((home / "config.yaml").read_text())["platforms"][
            "telegram"] == first
        code, out, err = await run_cli(*add, env={**env, "TEAM_TOKEN": team.token})
        assert code == 0, err
        assert "ok: the bot is @team_bot" in out
        platforms = yaml.safe_load((home / "config.yaml").read_text())["platforms"]
        assert platforms["telegram"] == {"enabled": True, "accounts": [
            {"name": "default", **{k: v for k, v in first.items() if k != "enabled"}},
            {"name": "team", "token": "${TELEGRAM_BOT_TOKEN_TEAM}", "allowed_users": ["55"],
             "base_url": team.base_url, "base_file_url": team.base_file_url}]}
        assert platforms["discord"]["token"] == "${DISCORD_BOT_TOKEN}"  # untouched
        assert read_env_file(home / "homing.env") == {
            "TELEGRAM_BOT_TOKEN": telegram.token, "DISCORD_BOT_TOKEN": discord.token,
            "TELEGRAM_BOT_TOKEN_TEAM": team.token}
        assert (home / "config.yaml.bak").exists()

        code, _, err = await run_cli(*add, env={**env, "TEAM_TOKEN": team.token})
        assert code == 1 and "has an account named 'team' already" in err
        again = [*add[:6], "team_a", *add[7:]]
        # the first bot's token again: one bot is one account
        code, _, err = await run_cli(*again, "--telegram-base-url", telegram.base_url,
                                     env={**env, "TEAM_TOKEN": telegram.token})
        assert code == 1 and "have the same token: a bot can be one account only" in err
        # team-a would take team_a's variable
        code, _, err = await run_cli(*again, env={**env, "TEAM_TOKEN": team.token})
        assert code == 1 and "same token" in err  # (team's token, already an account)
        written = (home / "config.yaml").read_text()
        (home / "homing.env").write_text((home / "homing.env").read_text()
                                         + "TELEGRAM_BOT_TOKEN_TEAM_A=x\n")
        code, _, err = await run_cli(*[*add[:6], "team-a", *add[7:]],
                                     env={**env, "TEAM_TOKEN": team.token})
        assert code == 1 and "the variable TELEGRAM_BOT_TOKEN_TEAM_A is in use already" in err
        assert (home / "config.yaml").read_text() == written
        code, _, err = await run_cli("setup", "--yes", "--platforms", "web",
                                     "--account", "ops", env=env)
        assert code == 1 and "--account adds one bot: name its platform" in err
        code, _, err = await run_cli("setup", "--yes", "--platforms", "slack",
                                     "--account", "ops", env=env)
        assert code == 1 and "slack has no accounts" in err
        code, out, err = await run_cli("check-config", env=home_env(home))
        assert code == 0, err
        code, out, err = await run_cli("doctor", env=home_env(home))
        assert "ok   telegram token: @homing_bot" in out, out
        assert "ok   telegram/team token: @team_bot" in out, out


def test_an_account_is_not_added_beside_a_bot_that_is_off() -> None:
    """Accounts share the section's ``enabled``: adding one would turn that bot on."""
    from gateway.cli.setup_account import with_account
    from gateway.platforms.questions import SetupFailed

    for section in ({"enabled": False, "token": "${T}"}, {"token": "${T}"}):
        with pytest.raises(SetupFailed, match="is off with a bot of its own"):
            with_account({"platforms": {"telegram": section}}, "telegram", {"name": "team"})
    # a section with no bot of its own keeps its settings as every account's defaults
    raw = with_account({"platforms": {"telegram": {"require_mention": False}}}, "telegram",
                       {"name": "team", "token": "${T_TEAM}"})
    assert raw["platforms"]["telegram"] == {
        "require_mention": False, "enabled": True,
        "accounts": [{"name": "team", "token": "${T_TEAM}"}]}
