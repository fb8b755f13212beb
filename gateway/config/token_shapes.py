"""What bot tokens look like, so a token pasted wrong is caught by ``check-config``
instead of as a refused login at start.

Only the shape is checked; whether a token is valid only the platform knows. A
message says what is off and never contains the token, nor any part of it.
"""

from __future__ import annotations

import re
from typing import Literal

Platform = Literal["telegram", "discord"]

#: ``<bot id>:<35 characters>`` from @BotFather (a little leeway on the length)
TELEGRAM_TOKEN = re.compile(r"[0-9]{1,20}:[A-Za-z0-9_-]{30,50}")
#: three base64url parts: the bot's id, a timestamp, a signature
DISCORD_TOKEN = re.compile(r"[A-Za-z0-9_-]{16,40}\.[A-Za-z0-9_-]{4,10}\.[A-Za-z0-9_-]{20,60}")

_SHAPE = {"telegram": TELEGRAM_TOKEN, "discord": DISCORD_TOKEN}
_TITLE = {"telegram": "Telegram", "discord": "Discord"}
_EXPECTED = {
    "telegram": "<bot id>:<about 35 letters, digits, - or _>, as @BotFather gives it",
    "discord": "three parts of letters, digits, - or _ joined by dots, as the Bot page "
               "of the Developer Portal gives it",
}


def token_problem(platform: Platform, token: str) -> str | None:
    """None for a token of the platform's shape, else what is wrong with it."""
    if _SHAPE[platform].fullmatch(token):
        return None
    return (f"does not look like a {_TITLE[platform]} bot token ({_EXPECTED[platform]}): "
            f"{_hint(platform, token)}")


def _hint(platform: Platform, token: str) -> str:
    other: Platform = "discord" if platform == "telegram" else "telegram"
    bare = re.sub(r"(?i)^bot\s*", "", token)
    if bare != token and _SHAPE[platform].fullmatch(bare):
        return "leave out the 'bot' in front (the client adds it)"
    if any(c.isspace() for c in token):
        return "it has whitespace in it — check the quotes and that it is on one line"
    if any(c in token for c in "'\"`"):
        return "it has quote marks in it — check the quotes"
    if _SHAPE[other].fullmatch(token):
        return f"it looks like a {_TITLE[other]} token — is it under the right platform?"
    if "/" in token:
        return "it looks like a URL or a path — give just the token"
    if platform == "telegram":
        bot_id, colon, rest = token.partition(":")
        if not colon:
            return "it has no ':' after the bot id"
        if not bot_id.isdigit():
            return "the part before ':' is not the bot id (digits only)"
        if not re.fullmatch(r"[A-Za-z0-9_-]*", rest):
            return "the part after ':' has characters a token does not have"
        return f"the part after ':' has {len(rest)} character{_s(len(rest))}, not about 35"
    parts = token.split(".")
    if len(parts) != 3:
        return f"it has {len(parts)} part{_s(len(parts))}, not 3"
    return "a part has characters a token does not have, or is too short or too long"


def _s(count: int) -> str:
    return "" if count == 1 else "s"
