"""``homing doctor`` as an operator runs it: the real command against the fake Telegram
and Discord, one line per check, exit 1 when one fails."""

from __future__ import annotations

import json
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.fakes.discord_guild import VIEW_CHANNEL
from tests.fakes.discord_server import FakeDiscord
from tests.fakes.telegram_server import FakeTelegram
from tests.real_daemon import home_env, run_cli

FORUM = -1001234567890
GROUP = -1009876543210
CHANNEL = 111
WRONG_TELEGRAM_TOKEN = "987654321:AAE" + "w" * 32
WRONG_DISCORD_TOKEN = "MTIzNDU2Nzg5MDEyMzQ1Njc4.GabcDe." + "w" * 30


@pytest.fixture
async def telegram() -> AsyncIterator[FakeTelegram]:
    async with FakeTelegram() as fake:
        # the polling probe asks for a 2 s hold; no test here has another poller come
        # back during it (a conflict is scripted), so the fake ends an empty hold sooner:
        # still an empty answer, still a 409 for an older poll should a newer one start
        fake.max_poll_hold = 0.1
        yield fake


@pytest.fixture
async def discord() -> AsyncIterator[FakeDiscord]:
    async with FakeDiscord() as fake:
        fake.add_channel(CHANNEL, name="ops")
        yield fake


def write_home(home: Path, *, telegram: FakeTelegram | None = None,
               discord: FakeDiscord | None = None, telegram_token: str | None = None,
               discord_token: str | None = None, allowed_chats: list[int] | None = None,
               discord_homes: list[int] | None = None) -> dict[str, str]:
    """A home as ``homing setup`` leaves it — config.yaml referring to the tokens in
    homing.env (0600) — for the fakes; its environment."""
    home.mkdir(mode=0o700)
    platforms: dict[str, Any] = {"web": {"port": 0}}
    tokens = {}
    agent: dict[str, Any] = {}
    if telegram is not None:
        platforms["telegram"] = {
            "enabled": True, "token": "${TELEGRAM_BOT_TOKEN}", "allowed_users": ["4242"],
            "base_url": telegram.base_url, "base_file_url": telegram.base_file_url,
            "allowed_chats": [str(c) for c in allowed_chats or []]}
        tokens["TELEGRAM_BOT_TOKEN"] = telegram_token or telegram.token
    if discord is not None:
        platforms["discord"] = {
            "enabled": True, "token": "${DISCORD_BOT_TOKEN}", "allowed_users": ["4242"],
            "api_base": discord.api_base, "gateway_url": discord.gateway_url}
        tokens["DISCORD_BOT_TOKEN"] = discord_token or discord.token
        agent["home_channels"] = [{"name": f"room{c}", "platform": "discord",
                                   "chat_id": str(c)} for c in discord_homes or []]
    (home / "config.yaml").write_text(yaml.safe_dump({"platforms": platforms,
                                                      "agent": agent}))
    env_file = home / "homing.env"
    env_file.write_text("".join(f"{k}={v}\n" for k, v in tokens.items()))
    env_file.chmod(0o600)
    return home_env(home)


async def doctor(env: dict[str, str]) -> tuple[int, list[str]]:
    code, out, err = await run_cli("doctor", env=env)
    assert "Traceback" not in err, err
    return code, out.splitlines()


def line_of(lines: list[str], name: str) -> str:
    (line,) = [line for line in lines if line[5:].startswith(name + ":")]
    return line


async def test_a_good_setup_passes_before_and_after_the_state_database_exists(
        tmp_path: Path, telegram: FakeTelegram, discord: FakeDiscord) -> None:
    telegram.can_read_all_group_messages = True
    telegram.add_chat(FORUM, is_forum=True, title="Ops")  # a plain member may post
    env = write_home(tmp_path / "home", telegram=telegram, discord=discord,
                     allowed_chats=[FORUM], discord_homes=[CHANNEL])
    code, lines = await doctor(env)
    assert code == 0, "\n".join(lines)
    assert not [line for line in lines if line.startswith("FAIL")]
    assert line_of(lines, "telegram token").startswith("ok   telegram token: @homing_bot")
    assert line_of(lines, "telegram privacy mode").startswith("ok ")
    assert line_of(lines, f"telegram chat {FORUM}") == (
        f"ok   telegram chat {FORUM}: 'Ops' (forum): the bot is a member and may post")
    assert line_of(lines, "telegram webhook").startswith("ok ")
    assert line_of(lines, "telegram polling").startswith("ok ")
    assert line_of(lines, "discord intents") == (
        "ok   discord intents: the message content intent is enabled")
    assert line_of(lines, f"discord channel room{CHANNEL}") == (
        f"ok   discord channel room{CHANNEL}: the bot may post in #ops ({CHANNEL})")
    assert "none yet at" in line_of(lines, "state database")
    assert line_of(lines, "environment file").endswith(
        "(0600) defines DISCORD_BOT_TOKEN, TELEGRAM_BOT_TOKEN")

    from gateway.sessions.store import SessionStore

    async with SessionStore(Path(env["HOMING_HOME"]) / "state.db"):
        pass  # made and migrated, as at the daemon's first start
    code, lines = await doctor(env)
    assert code == 0, "\n".join(lines)
    assert "is intact (schema version" in line_of(lines, "state database")
    assert line_of(lines, "state file modes").startswith("ok ")


async def test_refused_tokens_fail_by_platform(tmp_path: Path, telegram: FakeTelegram,
                                               discord: FakeDiscord) -> None:
    env = write_home(tmp_path / "home", telegram=telegram, discord=discord,
                     telegram_token=WRONG_TELEGRAM_TOKEN, discord_token=WRONG_DISCORD_TOKEN)
    code, lines = await doctor(env)
    assert code == 1
    assert line_of(lines, "telegram token") == (
        "FAIL telegram token: 127.0.0.1 refused the token (401 Unauthorized) — fix: copy the "
        "bot's token again from @BotFather (/mybots → API Token), into homing.env "
        "(TELEGRAM_BOT_TOKEN) or wherever platforms.telegram.token takes it from")
    assert line_of(lines, "discord token").startswith(
        "FAIL discord token: 127.0.0.1 refused the token (401 Unauthorized) — fix: copy the "
        "token again from the Developer Portal")
    assert not [line for line in lines if line[5:].startswith(("telegram webhook",
                                                               "discord intents"))]


async def test_privacy_mode_fails_when_a_group_is_listed(tmp_path: Path,
                                                         telegram: FakeTelegram) -> None:
    telegram.add_chat(GROUP, chat_type="group")  # privacy mode on: a new bot's default
    env = write_home(tmp_path / "home", telegram=telegram, allowed_chats=[GROUP])
    code, lines = await doctor(env)
    assert code == 1
    assert line_of(lines, "telegram privacy mode") == (
        f"FAIL telegram privacy mode: on: in {GROUP} the bot sees only commands and replies "
        f"to its own messages — fix: disable privacy mode with @BotFather /setprivacy, then "
        f"remove and re-add the bot to the group")


async def test_privacy_mode_is_only_a_warning_when_no_group_is_listed(
        tmp_path: Path, telegram: FakeTelegram) -> None:
    code, lines = await doctor(write_home(tmp_path / "home", telegram=telegram))
    assert code == 0
    assert line_of(lines, "telegram privacy mode").startswith(
        "warn telegram privacy mode: on, and platforms.telegram.allowed_chats lists no group")


async def test_a_forum_where_the_bot_may_not_post_fails(tmp_path: Path,
                                                        telegram: FakeTelegram) -> None:
    telegram.can_read_all_group_messages = True
    telegram.add_chat(FORUM, is_forum=True, title="Ops", bot_status="restricted",
                      can_send_messages=False)
    telegram.add_chat(GROUP, bot_status="left")
    env = write_home(tmp_path / "home", telegram=telegram, allowed_chats=[FORUM, GROUP])
    code, lines = await doctor(env)
    assert code == 1
    assert line_of(lines, f"telegram chat {FORUM}") == (
        f"FAIL telegram chat {FORUM}: 'Ops' (forum): the bot is restricted and may not send "
        f"messages in its topics — fix: in the group's settings → Permissions → Exceptions, "
        f"let the bot send messages (or make it an administrator); posting in forum topics "
        f"needs no more than that")
    assert line_of(lines, f"telegram chat {GROUP}").startswith(
        f"FAIL telegram chat {GROUP}: Telegram does not show chat {GROUP} to the bot "
        f"(Chat not found) — fix: add the bot to the group")


async def test_a_webhook_left_set_fails_and_polling_is_not_probed(
        tmp_path: Path, telegram: FakeTelegram) -> None:
    telegram.webhook_url = "https://example.org/hook"
    code, lines = await doctor(write_home(tmp_path / "home", telegram=telegram))
    assert code == 1
    assert line_of(lines, "telegram webhook") == (
        "FAIL telegram webhook: a webhook is set (https://example.org/hook); polling is "
        "refused while it is, and homing only polls (it does not delete a webhook itself) "
        f"— fix: if no other tool needs it, run deleteWebhook: curl -s "
        f"'{telegram.base_url}<token>/deleteWebhook'")
    assert line_of(lines, "telegram polling") == (
        "skip telegram polling: refused while the webhook is set")
    assert telegram.webhook_url  # doctor changes nothing


async def test_another_process_polling_the_token_fails(tmp_path: Path,
                                                       telegram: FakeTelegram) -> None:
    telegram.fail_next_poll()  # 409: terminated by other getUpdates request
    code, lines = await doctor(write_home(tmp_path / "home", telegram=telegram))
    assert code == 1
    assert line_of(lines, "telegram polling").startswith(
        "FAIL telegram polling: another process is polling this bot token (Telegram: "
        "Conflict: terminated by other getUpdates request; make sure that only one bot "
        "instance is running) — fix: stop the other program")


async def test_doctor_acknowledges_no_update(tmp_path: Path, telegram: FakeTelegram) -> None:
    telegram.user_message(chat_id=4242, user_id=4242, text="for the daemon")
    code, _ = await doctor(write_home(tmp_path / "home", telegram=telegram))
    assert code == 0
    assert [u["message"]["text"] for u in telegram.pending_updates] == ["for the daemon"]


async def test_a_missing_message_content_intent_fails(tmp_path: Path,
                                                      discord: FakeDiscord) -> None:
    discord.allowed_privileged_intents = 0  # MESSAGE CONTENT INTENT off in the portal
    code, lines = await doctor(write_home(tmp_path / "home", discord=discord))
    assert code == 1
    assert line_of(lines, "discord intents") == (
        "FAIL discord intents: the message content intent is not enabled for the "
        "application: Discord refuses the gateway connection homing makes (4014) — fix: "
        "enable MESSAGE CONTENT INTENT in the Developer Portal → Bot")


async def test_a_home_channel_the_bot_cannot_see_or_post_in_fails(
        tmp_path: Path, discord: FakeDiscord) -> None:
    from tests.fakes.discord_guild import READ_MESSAGE_HISTORY, SEND_MESSAGES

    discord.add_channel(222, name="hidden")
    discord.add_channel(333, name="quiet")
    discord.add_channel(444, name="forgetful")
    discord.set_overwrite(222, discord.guild_id, deny=VIEW_CHANNEL)
    discord.set_overwrite(333, discord.guild_id, deny=SEND_MESSAGES)
    discord.set_overwrite(444, discord.guild_id, deny=READ_MESSAGE_HISTORY)
    env = write_home(tmp_path / "home", discord=discord, discord_homes=[222, 333, 444, 555])
    code, lines = await doctor(env)
    assert code == 1
    assert line_of(lines, "discord channel room222").startswith(
        "FAIL discord channel room222: the bot cannot see channel 222 (403 Missing Access) "
        "— fix: invite the bot to the server")
    assert line_of(lines, "discord channel room333").startswith(
        "FAIL discord channel room333: the bot may not Send Messages in #quiet (333) — fix: "
        "give the bot's role Send Messages in #quiet (333)")
    assert line_of(lines, "discord channel room444").startswith(
        "warn discord channel room444: the bot may post in #forgetful (444) but not read its "
        "history")
    assert line_of(lines, "discord channel room555").startswith(
        "FAIL discord channel room555: the bot cannot see channel 555 (404 Unknown Channel)")


async def test_a_damaged_state_database_fails_with_what_to_do(tmp_path: Path) -> None:
    env = write_home(tmp_path / "home")
    db = tmp_path / "home" / "state.db"
    db.write_bytes(b"this is not what homing wrote\n" * 200)
    db.chmod(0o600)
    code, lines = await doctor(env)
    assert code == 1
    assert line_of(lines, "state database") == (
        f"FAIL state database: {db} cannot be read: file is not a database — fix: restore it "
        f"from a backup, or move it aside (mv {db} {db}.damaged) and let homing start a new "
        f"one")


async def test_state_and_secrets_others_can_read_fail(tmp_path: Path,
                                                      telegram: FakeTelegram) -> None:
    from gateway.sessions.store import SessionStore

    home = tmp_path / "home"
    env = write_home(home, telegram=telegram)
    async with SessionStore(home / "state.db"):
        pass
    (home / "state.db").chmod(0o644)
    (home / "homing.env").chmod(0o644)
    code, lines = await doctor(env)
    assert code == 1
    assert line_of(lines, "state file modes") == (
        f"FAIL state file modes: others can read the database: {home / 'state.db'} is 0644 — "
        f"fix: chmod 600 {home / 'state.db'} (homing also narrows them at its next start)")
    assert line_of(lines, "environment file") == (
        f"FAIL environment file: {home / 'homing.env'} is 0644: others can read the tokens "
        f"in it — fix: chmod 600 {home / 'homing.env'}")


async def test_an_invalid_config_is_one_failed_check_not_a_traceback(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.yaml").write_text("platforms:\n  web:\n    portt: 1\n")
    code, lines = await doctor(home_env(home))
    assert code == 1
    assert lines == [
        f"ok   config file: {home / 'config.yaml'}",
        f"FAIL config: platforms.web.portt: unknown setting; did you mean `port`? (see "
        f"config.example.yaml) — fix: edit {home / 'config.yaml'} (see config.example.yaml), "
        f"then run `homing check-config`"]


async def test_a_yaml_syntax_error_is_one_line_of_the_report(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.yaml").write_text("platforms:\n  web:\n    host: a: b\n")
    code, lines = await doctor(home_env(home))
    assert code == 1
    assert lines[1].startswith("FAIL config: <yaml line 3, column 12>: a `:` where no key "
                               "can start")
    assert lines[1].endswith(f"— fix: edit {home / 'config.yaml'} (see config.example.yaml), "
                             f"then run `homing check-config`")


async def test_a_config_file_that_is_not_there_fails(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "config.yaml"
    code, lines = await doctor({**home_env(tmp_path / "home"), "HOMING_CONFIG": str(missing)})
    assert code == 1
    assert lines == [f"FAIL config file: {missing} does not exist — fix: check --config and "
                     f"HOMING_CONFIG, or run `homing setup`"]


async def test_a_variable_the_config_needs_and_nobody_defines_fails(tmp_path: Path,
                                                                    telegram: FakeTelegram
                                                                    ) -> None:
    env = write_home(tmp_path / "home", telegram=telegram)
    (tmp_path / "home" / "homing.env").unlink()
    code, lines = await doctor(env)
    assert code == 1
    assert line_of(lines, "config") == (
        "FAIL config: platforms.telegram.token: environment variable TELEGRAM_BOT_TOKEN is "
        f"not set — fix: define TELEGRAM_BOT_TOKEN in {tmp_path / 'home' / 'homing.env'} "
        f"(NAME=value, chmod 600), or export it")


async def test_a_web_port_another_program_holds_fails(tmp_path: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as holder:
        port = holder.getsockname()[1]
        home = tmp_path / "home"
        home.mkdir()
        (home / "config.yaml").write_text(f"platforms: {{web: {{port: {port}}}}}\n")
        code, lines = await doctor(home_env(home))
    assert code == 1
    assert line_of(lines, "web port") == (
        f"FAIL web port: 127.0.0.1:{port} is in use by another program — fix: stop that "
        f"program (ss -ltnp 'sport = :{port}' names it), or set another platforms.web.port")


async def test_json_gives_the_same_verdicts(tmp_path: Path, telegram: FakeTelegram) -> None:
    telegram.add_chat(GROUP, chat_type="group")
    env = write_home(tmp_path / "home", telegram=telegram, allowed_chats=[GROUP])
    (tmp_path / "home" / "state.db").write_bytes(b"garbage" * 100)
    code, lines = await doctor(env)
    json_code, out, _ = await run_cli("doctor", "--json", env=env)
    checks = json.loads(out)
    assert code == json_code == 1
    assert [(c["name"], c["status"]) for c in checks] == [
        (line[5:].split(":")[0], line[:4].strip().lower()) for line in lines]
    by_name = {c["name"]: c for c in checks}
    assert by_name["telegram privacy mode"]["fix"].startswith("disable privacy mode")
    assert by_name["state database"]["status"] == "fail"
    assert by_name["telegram token"] == {
        "name": "telegram token", "status": "ok", "fix": None,
        "detail": f"@homing_bot (id {telegram.bot_id}) at 127.0.0.1"}
    assert all(set(c) == {"name", "status", "detail", "fix"} for c in checks)


async def test_a_platform_that_cannot_be_reached_fails_naming_the_host(tmp_path: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as closed:
        port = closed.getsockname()[1]
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.yaml").write_text(yaml.safe_dump({"platforms": {
        "web": {"port": 0},
        "telegram": {"enabled": True, "token": "123456789:AAE" + "t" * 32,
                     "base_url": f"http://127.0.0.1:{port}/bot"},
        "discord": {"enabled": True, "token": "MTIzNDU2Nzg5MDEyMzQ1Njc4.GabcDe." + "t" * 30,
                    "api_base": f"http://127.0.0.1:{port}/api/v10"}}}))
    code, lines = await doctor(home_env(home))
    assert code == 1
    assert line_of(lines, "telegram token").startswith(
        "FAIL telegram token: cannot reach 127.0.0.1: ")
    assert line_of(lines, "telegram token").endswith(
        "— fix: check the network and any proxy (HTTPS_PROXY), or platforms.telegram.base_url")
    assert line_of(lines, "discord token").startswith(
        "FAIL discord token: cannot reach 127.0.0.1: ")


async def test_a_postgresql_store_is_checked_where_it_is(tmp_path: Path,
                                                          pg_fresh_url: str) -> None:
    import psycopg

    from gateway.sessions.store import SessionStore
    from gateway.store.migrations import MIGRATIONS

    env = write_home(tmp_path / "home")
    config_file = tmp_path / "home" / "config.yaml"
    config_file.write_text(config_file.read_text() + f"store: {{url: '{pg_fresh_url}'}}\n")
    code, lines = await doctor(env)
    first = line_of(lines, "state database")
    assert first.startswith("ok   state database: PostgreSQL at ") and \
        first.endswith("(schema version 0)")  # a new, empty database: made at the start
    async with SessionStore(pg_fresh_url):  # as the daemon leaves it: migrated
        pass
    code, lines = await doctor(env)
    assert line_of(lines, "state database").endswith(f"(schema version {len(MIGRATIONS)})")
    with psycopg.connect(pg_fresh_url, autocommit=True) as conn:
        conn.execute("UPDATE homing_schema SET version = 999")
    code, lines = await doctor(env)
    assert code == 1 and "newer than this homing" in line_of(lines, "state database")
    config_file.write_text(config_file.read_text().replace(
        pg_fresh_url, pg_fresh_url.rsplit("/", 1)[0] + "/no_such_database"))
    code, lines = await doctor(env)
    assert code == 1 and line_of(lines, "state database").startswith(
        "FAIL state database: postgresql://") and "fix: check store.url" in line_of(
        lines, "state database")
