"""Matrix's part of ``homing setup``: the homeserver and the bot's id, a password login
made once (on the configured device), its access token kept in homing.env as
MATRIX_ACCESS_TOKEN, and the owner's Matrix id."""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Mapping

from gateway.platforms.matrix.settings import MatrixSettings, is_user_id
from gateway.platforms.probe import ProbeError
from gateway.platforms.questions import (
    MissingAnswer,
    PlatformAnswers,
    Prompter,
    SetupFailed,
    problem_with,
)


def parse_matrix_user_id(value: str) -> str:
    if not is_user_id(value):
        raise argparse.ArgumentTypeError(f"{value!r} is not a Matrix id (like "
                                         f"@alice:example.org)")
    return value


class MatrixQuestions:
    """The questions, and a flag for each."""

    def add_flags(self, parser: argparse.ArgumentParser) -> None:
        matrix = parser.add_argument_group("matrix")
        matrix.add_argument("--matrix-homeserver", metavar="URL",
                            help="the homeserver (https://matrix.example.org)")
        matrix.add_argument("--matrix-user-id", metavar="ID", type=parse_matrix_user_id,
                            help="the bot's Matrix id (@homing:example.org)")
        matrix.add_argument("--matrix-password-env", metavar="VAR",
                            help="read the bot's password from this environment variable "
                                 "(used once, to log in; only the token is kept)")
        matrix.add_argument("--matrix-user", metavar="ID", type=parse_matrix_user_id,
                            help="your own Matrix id (@alice:example.org)")

    def ask(self, args: argparse.Namespace, environ: Mapping[str, str],
            ask: Prompter) -> PlatformAnswers:
        from gateway.platforms.matrix.probe import login

        homeserver = (args.matrix_homeserver or ask.text(
            "Matrix homeserver (https://matrix.example.org)", flag="--matrix-homeserver URL",
            problem=lambda a: None if a.startswith(("https://", "http://"))
            else "an http(s) URL")).rstrip("/")
        bot = args.matrix_user_id or ask.text(
            "The bot's Matrix id (@homing:example.org)", flag="--matrix-user-id ID",
            problem=lambda a: problem_with(parse_matrix_user_id, a))
        device_id = MatrixSettings().device_id
        while True:
            if args.matrix_password_env:
                password = environ.get(args.matrix_password_env, "")
                if not password:
                    raise MissingAnswer("--matrix-password-env naming a set variable",
                                        f"{args.matrix_password_env} is not set")
            else:
                password = ask.secret(f"The password of {bot} (used once, to log in)",
                                      flag="--matrix-password-env VAR")
            ask.say("  logging in …")
            try:
                session = asyncio.run(login(homeserver, bot, password, device_id))
                break
            except ProbeError as exc:
                if args.matrix_password_env or not ask.interactive:
                    raise SetupFailed(f"{exc.problem} — fix: {exc.fix}") from None
                ask.say(f"  {exc.problem} — {exc.fix}")
        ask.say(f"  ok: logged in as {session.user_id} on device {session.device_id}")
        owner = args.matrix_user or ask.text(
            "Your own Matrix id (@alice:example.org)", flag="--matrix-user ID",
            problem=lambda a: problem_with(parse_matrix_user_id, a))
        section: dict[str, object] = {
            "enabled": True, "homeserver": homeserver, "user_id": session.user_id,
            "access_token": "${MATRIX_ACCESS_TOKEN}", "device_id": session.device_id,
            "allowed_users": [owner]}
        return PlatformAnswers(section, {"MATRIX_ACCESS_TOKEN": session.access_token})


QUESTIONS = MatrixQuestions()
