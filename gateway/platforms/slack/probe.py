"""Live questions to Slack's Web API, each answered within ``TIMEOUT_SECONDS`` or a
failure naming the host: who the bot token is (``auth.test``, and the scopes it was
granted, from the ``x-oauth-scopes`` header), and whether the app-level token may open
a Socket Mode connection (``apps.connections.open``). A failure is a
:class:`~gateway.platforms.probe.ProbeError` with the fix; a refused token a
:class:`~gateway.platforms.probe.TokenRefused`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import aiohttp
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from gateway.platforms.probe import TIMEOUT_SECONDS, ProbeError, TokenRefused, host_of

#: what the daemon needs the bot to hold: post, read each kind of conversation (and its
#: history, to catch up after downtime), files both ways, mentions
NEEDED_SCOPES: dict[str, str] = {
    "chat:write": "post and edit its replies",
    "channels:history": "read public channels (and catch up on them)",
    "groups:history": "read private channels",
    "im:history": "read direct messages",
    "files:read": "fetch the files people send",
    "files:write": "post files",
    "app_mentions:read": "see @-mentions of the bot",
}
#: Slack's answers that mean the token itself is wrong
_REFUSED = frozenset({"invalid_auth", "not_authed", "account_inactive", "token_revoked",
                      "token_expired", "not_allowed_token_type"})
_BOT_FIX = ("copy the Bot User OAuth Token (xoxb-…) again from the app's OAuth & "
            "Permissions page (api.slack.com/apps), reinstalling the app if it was removed")
_APP_FIX = ("make an app-level token with the connections:write scope on the app's Basic "
            "Information page, and turn Socket Mode on (Settings → Socket Mode)")


@dataclass(frozen=True, slots=True)
class BotIdentity:
    """What ``auth.test`` says of the bot token."""

    user_id: str
    user: str
    team: str
    team_id: str
    bot_id: str | None
    #: the scopes granted to the token (None: Slack did not say)
    scopes: frozenset[str] | None

    def missing(self) -> list[str]:
        """The needed scopes the token was not granted (none known: none missing)."""
        return [s for s in NEEDED_SCOPES if self.scopes is not None and s not in self.scopes]


async def whoami(bot_token: str, api_base: str, *, timeout: float = TIMEOUT_SECONDS
                 ) -> BotIdentity:
    """The bot token, asked with ``auth.test``."""
    data, headers = await _ask(api_base, "auth.test", timeout, token=bot_token, fix=_BOT_FIX)
    if not str(bot_token).startswith("xoxb-") or not data.get("bot_id"):
        raise TokenRefused(f"{host_of(api_base)} says this token is {data.get('user')!r}'s, "
                           f"not a bot's", _BOT_FIX)
    raw = headers.get("x-oauth-scopes")
    scopes = frozenset(s.strip() for s in raw.split(",") if s.strip()) if raw else None
    return BotIdentity(str(data.get("user_id")), str(data.get("user")),
                       str(data.get("team")), str(data.get("team_id")),
                       str(data["bot_id"]) if data.get("bot_id") else None, scopes)


async def socket_mode_open(app_token: str, api_base: str, *,
                           timeout: float = TIMEOUT_SECONDS) -> str:
    """Whether the app-level token may open a Socket Mode connection: the URL Slack hands
    out for one (not connected to: it is good for one connection, and expires)."""
    data, _ = await _ask(api_base, "apps.connections.open", timeout, token=app_token,
                         fix=_APP_FIX)
    return str(data.get("url") or "")


async def _ask(api_base: str, method: str, timeout: float, *, token: str, fix: str
               ) -> tuple[dict[str, Any], dict[str, str]]:
    host = host_of(api_base)
    client = AsyncWebClient(token=token, base_url=api_base, timeout=int(max(1, timeout)),
                            retry_handlers=[])
    try:
        response = await client.api_call(method)
    except SlackApiError as exc:
        data = exc.response.data if isinstance(exc.response.data, dict) else {}
        error = str(data.get("error") or f"HTTP {exc.response.status_code}")
        if error in _REFUSED:
            raise TokenRefused(f"{host} refused the token ({error})", fix) from None
        if error == "missing_scope":
            raise ProbeError(f"{host} says the token lacks {data.get('needed')} for {method}",
                             fix) from None
        raise ProbeError(f"{host} answered {method} with {error}",
                         "see Slack's answer; check the app at api.slack.com/apps") from None
    except TimeoutError:
        raise ProbeError(f"{host} did not answer within {timeout:g} s", _NETWORK_FIX) from None
    except (aiohttp.ClientError, OSError, ValueError) as exc:
        raise ProbeError(f"cannot reach {host}: {exc}", _NETWORK_FIX) from None
    data = response.data if isinstance(response.data, dict) else {}
    return data, {k.lower(): v for k, v in (response.headers or {}).items()}


_NETWORK_FIX = "check the network and any proxy (HTTPS_PROXY), or platforms.slack.api_base"
