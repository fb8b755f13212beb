"""Telegram, as the platform registry knows it: no python-telegram-bot here (8 MB), which
is imported only when Telegram is enabled."""

from __future__ import annotations

import re

from gateway.config.platform import Capabilities, PlatformSpec, TokenShape
from gateway.platforms.telegram.settings import TelegramConfig


def _hint(token: str) -> str | None:
    bot_id, colon, rest = token.partition(":")
    if not colon:
        return "it has no ':' after the bot id"
    if not bot_id.isdigit():
        return "the part before ':' is not the bot id (digits only)"
    if not re.fullmatch(r"[A-Za-z0-9_-]*", rest):
        return "the part after ':' has characters a token does not have"
    return f"the part after ':' has {len(rest)} character{'' if len(rest) == 1 else 's'}, " \
           f"not about 35"


#: ``<bot id>:<35 characters>`` from @BotFather (a little leeway on the length)
TOKEN = TokenShape(re.compile(r"[0-9]{1,20}:[A-Za-z0-9_-]{30,50}"),
                   "<bot id>:<about 35 letters, digits, - or _>, as @BotFather gives it",
                   what="bot token", hint=_hint)

PLATFORM = PlatformSpec(
    name="telegram", title="Telegram", settings=TelegramConfig,
    adapter="gateway.platforms.telegram.adapter:make_adapter",
    capabilities=Capabilities(
        threads=True, edits=True, buttons=True, files_in=True, files_out=True, typing=True,
        message_limit=4096, history=True,
        rate_limits="about 30 messages a second per bot and 20 a minute per group; "
                    "flood control (429 retry_after) is waited out per chat"),
    required=("token",), token_shapes={"token": TOKEN},
    # read as attributes of the section: ``webhook_secret_token`` is webhook.secret_token
    secrets={"token": "TELEGRAM_BOT_TOKEN", "webhook_secret_token": "TELEGRAM_WEBHOOK_SECRET"},
    setup="gateway.platforms.telegram.setup:QUESTIONS",
    doctor="gateway.platforms.telegram.doctor:checks",
    pairing=True)
