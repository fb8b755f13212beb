"""The flags of ``homing setup``: one for every question it asks, so it runs without a
terminal (``--yes``: never ask; an answer that has no default and no flag is an error
naming the flag).

Tokens are never flags — a command line is visible to every user of the machine in
``ps`` — but the name of an environment variable holding one.
"""

from __future__ import annotations

import argparse
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from gateway.config.registry import load_object, platforms

if TYPE_CHECKING:
    from gateway.platforms.questions import SetupQuestions

DEFAULT_WEB_PORT = 8765


def setup_platforms() -> list[str]:
    """The platforms setup can enable: the web chat, and each with setup questions."""
    return ["web", *setup_questions()]


def setup_questions() -> dict[str, SetupQuestions]:
    """Each platform's setup questions, by name; a platform whose questions cannot be
    imported is left out of setup (``unusable_setups`` says why)."""
    return _setups()[0]


def unusable_setups() -> dict[str, str]:
    """The platforms whose setup questions could not be imported, and the error."""
    return _setups()[1]


@cache
def _setups() -> tuple[dict[str, SetupQuestions], dict[str, str]]:
    found: dict[str, SetupQuestions] = {}
    broken: dict[str, str] = {}
    for spec in platforms().specs:
        if spec.name == "web" or spec.setup is None:
            continue
        try:
            found[spec.name] = load_object(spec.setup)
        except Exception as exc:  # one broken package must not take setup with it
            broken[spec.name] = f"{spec.setup}: {type(exc).__name__}: {exc}"
    return found, broken


def add_setup_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-y", "--yes", action="store_true",
                        help="never ask: take the flags, else the defaults; an answer with "
                             "neither is an error naming its flag")
    parser.add_argument("--force", action="store_true",
                        help="replace an existing config.yaml (kept as config.yaml.bak)")
    parser.add_argument("--platforms", metavar="LIST", type=parse_platforms,
                        help=f"comma-separated, of {', '.join(setup_platforms())} "
                             f"(default: web)")
    parser.add_argument("--account", metavar="NAME", type=_parse_account,
                        help="add one more bot of the one platform --platforms names to the "
                             "existing config, as the account NAME (its token in "
                             "homing.env as <VAR>_<NAME>)")
    parser.add_argument("--web-port", metavar="PORT", type=parse_port,
                        help=f"the web chat's port on 127.0.0.1 (default {DEFAULT_WEB_PORT}; "
                             f"0: any free one)")
    for questions in setup_questions().values():
        questions.add_flags(parser)
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
    known = setup_platforms()
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"{', '.join(unknown) or 'nothing'}: choose from {', '.join(known)}")
    return list(dict.fromkeys(names))


def _parse_account(value: str) -> str:
    from gateway.cli.setup_account import parse_account

    return parse_account(value)


def parse_port(value: str) -> int:
    if not value.isdigit() or not 0 <= int(value) <= 65535:
        raise argparse.ArgumentTypeError(f"{value!r} is not a port (0-65535)")
    return int(value)
