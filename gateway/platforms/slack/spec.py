"""Slack, as the platform registry knows it: no slack-sdk here, which is imported only
when Slack is enabled."""

from __future__ import annotations

import re
from collections.abc import Callable

from gateway.config.platform import Capabilities, PlatformSpec, TokenShape
from gateway.platforms.slack.settings import SlackSettings


def _swapped(expected: str, other: str) -> Callable[[str], str | None]:
    """What is off with a token of the wrong shape: the other token pasted here."""

    def hint(token: str) -> str | None:
        if token.startswith(other):
            return f"it starts with {other}: the two Slack tokens look swapped"
        if not token.startswith(expected):
            return f"it does not start with {expected}"
        return None
    return hint


BOT_TOKEN = TokenShape(
    re.compile(r"xoxb-[0-9A-Za-z-]{10,}"),
    "xoxb-…, the Bot User OAuth Token from the app's OAuth & Permissions page",
    what="bot token", hint=_swapped("xoxb-", "xapp-"))
APP_TOKEN = TokenShape(
    re.compile(r"xapp-[0-9A-Za-z-]{10,}"),
    "xapp-…, an app-level token with connections:write from the app's Basic Information "
    "page", what="app-level token", hint=_swapped("xapp-", "xoxb-"))

PLATFORM = PlatformSpec(
    name="slack", title="Slack", settings=SlackSettings,
    adapter="gateway.platforms.slack.adapter:make_adapter",
    capabilities=Capabilities(
        threads=True, edits=True, buttons=True, files_in=True, files_out=True, typing=True,
        message_limit=4000, history=True, confirms_sends=True,
        rate_limits="per method (chat.postMessage about one a second per channel); 429 "
                    "Retry-After waited out per method, each conversation's order kept"),
    required=("bot_token", "app_token"),
    token_shapes={"bot_token": BOT_TOKEN, "app_token": APP_TOKEN},
    secrets={"bot_token": "SLACK_BOT_TOKEN", "app_token": "SLACK_APP_TOKEN"},
    setup="gateway.platforms.slack.setup:QUESTIONS",
    doctor="gateway.platforms.slack.doctor:checks",
    pairing=True)
