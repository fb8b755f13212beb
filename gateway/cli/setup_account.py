"""``homing setup --account NAME``: one more bot of a platform, added to a config that
exists — the platform's own questions (its token checked live, its owner learnt), the
answers filed under ``platforms.<name>.accounts``.

The bot the section ran until now becomes the account ``default`` with every setting
it had (its conversations' session keys name the platform alone, as before, so
nothing of theirs changes); the new account has what setup asked over the section's
shared settings (none, after such a move), never the other bot's. Its secrets go to
``homing.env`` under their own variables (``TELEGRAM_BOT_TOKEN_TEAM``), beside the
others; a variable already in use, or a token another account has, is refused. The
new config is checked whole before anything is written; the one it replaces is kept
as ``config.yaml.bak`` (comments in it are not carried over).
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gateway.config.env_file import read_env_file
from gateway.config.file import ConfigError, read_config_file
from gateway.config.platform import ACCOUNT_NAME, DEFAULT_ACCOUNT, BotSettings
from gateway.config.registry import platforms
from gateway.config.settings import parse_config
from gateway.platforms.questions import PlatformAnswers, SetupFailed


def parse_account(value: str) -> str:
    if value == DEFAULT_ACCOUNT or not ACCOUNT_NAME.fullmatch(value):
        raise argparse.ArgumentTypeError(
            f"{value!r}: an account's name is lower-case letters, digits, _ and - (at most "
            f"32), and not {DEFAULT_ACCOUNT!r} (the bot the one-bot form runs)")
    return value


def account_platform_of(chosen: list[str]) -> str:
    """The one platform ``--platforms`` names for an account: it must run bots in
    accounts (a ``BotSettings`` section: Telegram, Discord)."""
    bots = [name for name in chosen if name != "web"]
    if len(bots) != 1:
        raise SetupFailed("--account adds one bot: name its platform alone in --platforms "
                          "(e.g. --platforms telegram --account team)")
    spec = platforms().get(bots[0])
    if spec is None or not issubclass(spec.settings, BotSettings):
        with_accounts = [s.name for s in platforms().specs
                         if issubclass(s.settings, BotSettings)]
        raise SetupFailed(f"{bots[0]} has no accounts (one bot per daemon); platforms with "
                          f"accounts: {', '.join(with_accounts)}")
    return bots[0]


def existing_config(config_path: Path) -> dict[str, Any]:
    """The config the account joins, as written (``${VAR}`` kept)."""
    if not config_path.exists():
        raise SetupFailed(f"there is no {config_path} to add an account to: run homing setup "
                          f"without --account first")
    try:
        raw = read_config_file(config_path)
    except ConfigError as exc:
        raise SetupFailed(f"{config_path} cannot be read as it is, so nothing was added: "
                          f"{exc}") from None
    if not isinstance(raw, dict):
        raise SetupFailed(f"{config_path}: expected a mapping of settings at the top level")
    return raw


def as_account(answers: PlatformAnswers, account: str) -> PlatformAnswers:
    """The answers with their secrets under the account's own variables, and the section
    referring to those (``${TELEGRAM_BOT_TOKEN}`` → ``${TELEGRAM_BOT_TOKEN_TEAM}``)."""
    suffix = "_" + re.sub(r"[^A-Z0-9]", "_", account.upper())
    renamed = {var: var + suffix for var in answers.secrets}

    def refer(value: Any) -> Any:
        if isinstance(value, str):
            for old, new in renamed.items():
                value = value.replace("${" + old + "}", "${" + new + "}")
            return value
        if isinstance(value, list):
            return [refer(v) for v in value]
        if isinstance(value, dict):
            return {k: refer(v) for k, v in value.items()}
        return value

    section = {k: refer(v) for k, v in answers.section.items() if k != "enabled"}
    return PlatformAnswers({"name": account, **section},
                           {renamed[var]: value for var, value in answers.secrets.items()})


def with_account(raw: dict[str, Any], platform: str, entry: dict[str, Any]) -> dict[str, Any]:
    """``raw`` with ``entry`` as one more of ``platform``'s accounts (its one-bot section,
    if that is what it has, made the account ``default`` first)."""
    raw = dict(raw)
    sections = dict(raw.get("platforms") or {})
    section = dict(sections.get(platform) or {})
    accounts = list(section.get("accounts") or [])
    if not accounts and section.get("token") is not None:
        if section.get("enabled") is not True:  # (off unless said: the section's default)
            raise SetupFailed(
                f"platforms.{platform} is off with a bot of its own: an account would turn "
                f"that bot on too; set enabled: true, or remove its token, then add the "
                f"account")
        own = {k: v for k, v in section.items() if k not in ("enabled", "name", "accounts")}
        accounts = [{"name": section.get("name", DEFAULT_ACCOUNT), **own}]
        section = {"enabled": True}
    names = [a.get("name") for a in accounts if isinstance(a, dict)]
    if entry["name"] in names:
        raise SetupFailed(f"platforms.{platform} has an account named {entry['name']!r} "
                          f"already (its accounts: {', '.join(map(str, names))})")
    section["enabled"] = True
    section["accounts"] = [*accounts, entry]
    sections[platform] = section
    raw["platforms"] = sections
    return raw


def unused_variables(secrets: Mapping[str, str], config_path: Path, env_path: Path) -> None:
    """Refuse a variable the account's secrets would take from another (``team-a`` and
    ``team_a`` both make ``…_TEAM_A``): writing it would hand that one this token."""
    variables = read_env_file(env_path) if env_path.exists() else {}
    text = config_path.read_text(encoding="utf-8")
    for var in secrets:
        if var in variables or "${" + var + "}" in text:
            raise SetupFailed(f"the variable {var} is in use already (in {env_path} or "
                              f"{config_path}): choose another account name")


def checked(raw: dict[str, Any], config_path: Path, env_path: Path,
            environ: Mapping[str, str], secrets: Mapping[str, str]) -> None:
    """The config as it will be, validated with every variable it will find."""
    variables = read_env_file(env_path) if env_path.exists() else {}
    try:
        parse_config(raw, {**environ, **variables, **secrets}, str(config_path))
    except ConfigError as exc:
        raise SetupFailed(f"with the account added the config would not load, so nothing "
                          f"was written: {exc}") from None
