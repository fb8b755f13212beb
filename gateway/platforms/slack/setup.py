"""Slack's part of ``homing setup``: the bot token and the app-level token, each checked
live (``auth.test``, ``apps.connections.open``), and the owner's Slack user id."""

from __future__ import annotations

import argparse
import asyncio
import re
from collections.abc import Mapping

from gateway.platforms.probe import ProbeError
from gateway.platforms.questions import PlatformAnswers, Prompter, accepted_token, problem_with
from gateway.platforms.slack.settings import SlackSettings

#: a Slack user id: U or W, then letters and digits (U0123ABCD)
_USER_ID = re.compile(r"[UW][A-Z0-9]{6,}")


def parse_slack_user_id(value: str) -> str:
    if not _USER_ID.fullmatch(value):
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a Slack user id (like U0123ABCD: your profile → ⋮ → Copy "
            f"member ID)")
    return value


class SlackQuestions:
    """The questions, and a flag for each."""

    def add_flags(self, parser: argparse.ArgumentParser) -> None:
        slack = parser.add_argument_group("slack")
        slack.add_argument("--slack-bot-token-env", metavar="VAR",
                           help="read the bot token (xoxb-…) from this environment variable")
        slack.add_argument("--slack-app-token-env", metavar="VAR",
                           help="read the app-level token (xapp-…) from this environment "
                                "variable")
        slack.add_argument("--slack-user-id", metavar="ID", type=parse_slack_user_id,
                           help="your Slack member id (U0123ABCD)")
        slack.add_argument("--slack-api-base", metavar="URL",
                           help="a Web API other than https://slack.com/api/")

    def ask(self, args: argparse.Namespace, environ: Mapping[str, str],
            ask: Prompter) -> PlatformAnswers:
        from gateway.platforms.slack.probe import socket_mode_open, whoami

        api_base = args.slack_api_base or SlackSettings().api_base

        def check_bot(token: str) -> str:
            me = asyncio.run(whoami(token, api_base))
            missing = me.missing()
            if missing:
                raise ProbeError(f"the bot {me.user} lacks {', '.join(missing)}",
                                 "add them under Bot Token Scopes on OAuth & Permissions, "
                                 "reinstall the app, and copy its token again")
            return f"ok: the bot is {me.user} ({me.user_id}) in {me.team}"

        def check_app(token: str) -> str:
            asyncio.run(socket_mode_open(token, api_base))
            return "ok: Socket Mode may connect"

        bot = accepted_token(
            environ, ask, variable=args.slack_bot_token_env, flag="--slack-bot-token-env",
            question="Slack bot token (api.slack.com/apps → your app → OAuth & Permissions "
                     "→ Bot User OAuth Token, xoxb-…)", check=check_bot,
            what="bot token with Slack")
        app = accepted_token(
            environ, ask, variable=args.slack_app_token_env, flag="--slack-app-token-env",
            question="Slack app-level token (Basic Information → App-Level Tokens, with "
                     "connections:write, xapp-…)", check=check_app,
            what="app-level token with Slack")
        user_id = args.slack_user_id or ask.text(
            "Your Slack member id (your profile → ⋮ → Copy member ID)",
            flag="--slack-user-id ID",
            problem=lambda a: problem_with(parse_slack_user_id, a))
        section: dict[str, object] = {
            "enabled": True, "bot_token": "${SLACK_BOT_TOKEN}",
            "app_token": "${SLACK_APP_TOKEN}", "allowed_users": [user_id]}
        if args.slack_api_base:
            section["api_base"] = args.slack_api_base
        return PlatformAnswers(section, {"SLACK_BOT_TOKEN": bot, "SLACK_APP_TOKEN": app})


QUESTIONS = SlackQuestions()
