"""The flags of ``homing setup``: one for every question it asks, so it runs without a
terminal (``--yes``: never ask; an answer that has no default and no flag is an error
naming the flag).

Tokens are never flags — a command line is visible to every user of the machine in
``ps`` — but the name of an environment variable holding one.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

PLATFORMS = ("web", "telegram", "discord")
DEFAULT_WEB_PORT = 8765
#: how long setup waits for the message that tells it the owner's Telegram id
DEFAULT_TELEGRAM_WAIT = 120.0


def add_setup_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-y", "--yes", action="store_true",
                        help="never ask: take the flags, else the defaults; an answer with "
                             "neither is an error naming its flag")
    parser.add_argument("--force", action="store_true",
                        help="replace an existing config.yaml (kept as config.yaml.bak)")
    parser.add_argument("--platforms", metavar="LIST", type=parse_platforms,
                        help=f"comma-separated, of {', '.join(PLATFORMS)} (default: web)")
    parser.add_argument("--web-port", metavar="PORT", type=parse_port,
                        help=f"the web chat's port on 127.0.0.1 (default {DEFAULT_WEB_PORT}; "
                             f"0: any free one)")
    telegram = parser.add_argument_group("telegram")
    telegram.add_argument("--telegram-token-env", metavar="VAR",
                          help="read the bot token from this environment variable")
    telegram.add_argument("--telegram-user-id", metavar="ID", type=parse_user_id,
                          help="your Telegram user id (else learnt from a message you send "
                               "the bot)")
    telegram.add_argument("--telegram-wait", metavar="SECONDS", type=float,
                          default=DEFAULT_TELEGRAM_WAIT,
                          help="how long to wait for that message (default %(default)g)")
    telegram.add_argument("--telegram-base-url", metavar="URL",
                          help="a Bot API server other than api.telegram.org (…/bot)")
    telegram.add_argument("--telegram-base-file-url", metavar="URL",
                          help="its file URL (default: derived from --telegram-base-url)")
    discord = parser.add_argument_group("discord")
    discord.add_argument("--discord-token-env", metavar="VAR",
                         help="read the bot token from this environment variable")
    discord.add_argument("--discord-user-id", metavar="ID", type=parse_user_id,
                         help="your Discord user id (Developer Mode → Copy User ID)")
    discord.add_argument("--discord-api-base", metavar="URL",
                         help="a REST API base other than discord.com's (…/api/v10)")
    discord.add_argument("--discord-gateway-url", metavar="URL",
                         help="a gateway other than gateway.discord.gg")
    service = parser.add_argument_group("service")
    choice = service.add_mutually_exclusive_group()
    choice.add_argument("--service", dest="service", action="store_const", const=True,
                        help="install and start the systemd user service afterwards")
    choice.add_argument("--no-service", dest="service", action="store_const", const=False,
                        help="do not (the default with --yes)")
    service.add_argument("--unit-dir", metavar="DIR", type=Path,
                         help="write the unit here instead (with --service)")


def parse_platforms(value: str) -> list[str]:
    names = [n.strip().lower() for n in value.split(",") if n.strip()]
    unknown = [n for n in names if n not in PLATFORMS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"{', '.join(unknown) or 'nothing'}: choose from {', '.join(PLATFORMS)}")
    return list(dict.fromkeys(names))


def parse_port(value: str) -> int:
    if not value.isdigit() or not 0 <= int(value) <= 65535:
        raise argparse.ArgumentTypeError(f"{value!r} is not a port (0-65535)")
    return int(value)


def parse_user_id(value: str) -> str:
    if not value.isdigit():
        raise argparse.ArgumentTypeError(f"{value!r} is not a user id (a number)")
    return value


def problem_with(parse: Callable[[str], object], value: str) -> str | None:
    """What is wrong with an answer typed at a prompt, by its flag's own check."""
    try:
        parse(value)
    except argparse.ArgumentTypeError as exc:
        return str(exc)
    return None
