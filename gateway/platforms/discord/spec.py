"""Discord, as the platform registry knows it: no discord.py here (8 MB), which is
imported only when Discord is enabled."""

from __future__ import annotations

import re

from gateway.config.platform import Capabilities, PlatformSpec, TokenShape
from gateway.platforms.discord.settings import DiscordConfig


def _hint(token: str) -> str | None:
    parts = token.split(".")
    if len(parts) != 3:
        return f"it has {len(parts)} part{'' if len(parts) == 1 else 's'}, not 3"
    return None


#: three base64url parts: the bot's id, a timestamp, a signature
TOKEN = TokenShape(
    re.compile(r"[A-Za-z0-9_-]{16,40}\.[A-Za-z0-9_-]{4,10}\.[A-Za-z0-9_-]{20,60}"),
    "three parts of letters, digits, - or _ joined by dots, as the Bot page of the "
    "Developer Portal gives it", what="bot token", hint=_hint)

PLATFORM = PlatformSpec(
    name="discord", title="Discord", settings=DiscordConfig,
    adapter="gateway.platforms.discord.adapter:make_adapter",
    capabilities=Capabilities(
        threads=True, edits=True, buttons=True, files_in=True, files_out=True, typing=True,
        message_limit=2000, dedupe_sends=True, history=True,
        rate_limits="per-route buckets and a global 50 a second, kept by discord.py; "
                    "each channel's order kept"),
    required=("token",), token_shapes={"token": TOKEN},
    secrets={"token": "DISCORD_BOT_TOKEN"},
    setup="gateway.platforms.discord.setup:QUESTIONS",
    doctor="gateway.platforms.discord.doctor:checks",
    pairing=True)
