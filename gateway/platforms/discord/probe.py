"""Live questions to Discord's REST API, asked with plain aiohttp as the bot
(``Authorization: Bot <token>``): who the bot is, whether its application may read
message content, and what the bot may do in a channel.

discord.py's HTTP client wants a logged-in client and its process-wide endpoints; a
few GETs do not. Every call answers within ``TIMEOUT_SECONDS`` or fails; a failure
is a :class:`~gateway.platforms.probe.ProbeError` naming the host and the fix.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Self

import aiohttp

from gateway.platforms.probe import TIMEOUT_SECONDS, ProbeError, TokenRefused, host_of

#: application flags: the message content intent is on in the developer portal
#: (GATEWAY_MESSAGE_CONTENT for a verified app, _LIMITED for one in under 100 servers)
MESSAGE_CONTENT_FLAGS = (1 << 18) | (1 << 19)
ADMINISTRATOR = 1 << 3
VIEW_CHANNEL = 1 << 10
SEND_MESSAGES = 1 << 11
READ_MESSAGE_HISTORY = 1 << 16
SEND_MESSAGES_IN_THREADS = 1 << 38
#: what the daemon needs in a channel: to see it, post, and read back what it missed
NEEDED = {VIEW_CHANNEL: "View Channel", SEND_MESSAGES: "Send Messages",
          READ_MESSAGE_HISTORY: "Read Message History"}
_THREAD_TYPES = frozenset({10, 11, 12})
_TOKEN_FIX = ("copy the token again from the Developer Portal (your application → Bot → "
              "Reset Token)")


@dataclass(frozen=True, slots=True)
class BotUser:
    id: int
    username: str


@dataclass(frozen=True, slots=True)
class Application:
    id: int
    name: str
    flags: int

    @property
    def reads_message_content(self) -> bool:
        return bool(self.flags & MESSAGE_CONTENT_FLAGS)


@dataclass(frozen=True, slots=True)
class ChannelAccess:
    """A channel the bot can see, and the permissions of ``NEEDED`` it lacks there."""

    channel_id: int
    name: str
    missing: list[str]


class DiscordProbe:
    """One bot, asked live over REST; ``async with`` holds the HTTP session."""

    def __init__(self, token: str, api_base: str = "https://discord.com/api/v10",
                 timeout: float = TIMEOUT_SECONDS) -> None:
        self.api_base = api_base.rstrip("/")
        self.host = host_of(api_base)
        self.timeout = timeout
        self._headers = {"Authorization": f"Bot {token}"}
        self._http: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> Self:
        self._http = aiohttp.ClientSession(
            headers=self._headers, trust_env=True,
            timeout=aiohttp.ClientTimeout(total=self.timeout))
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._http is not None:
            await self._http.close()

    async def me(self) -> BotUser:
        user = await self._get("/users/@me")
        return BotUser(int(user["id"]), str(user["username"]))

    async def application(self) -> Application:
        app = await self._get("/applications/@me")
        return Application(int(app["id"]), str(app.get("name") or ""), int(app.get("flags") or 0))

    async def channel_access(self, channel_id: int, bot_id: int) -> ChannelAccess:
        """Whether the bot sees the channel, and which needed permissions it lacks there,
        computed as Discord does (roles, then the channel's overwrites; a thread takes
        its parent's, and posts in it with Send Messages in Threads)."""
        channel = await self._get(f"/channels/{channel_id}", what=f"channel {channel_id}")
        name = str(channel.get("name") or channel_id)
        guild_id = channel.get("guild_id")
        if guild_id is None:
            return ChannelAccess(channel_id, name, [])  # a DM: no permissions apply
        thread = channel.get("type") in _THREAD_TYPES
        if thread and channel.get("parent_id"):
            channel = await self._get(f"/channels/{channel['parent_id']}",
                                      what=f"the parent of thread {channel_id}")
        guild = await self._get(f"/guilds/{guild_id}", what=f"guild {guild_id}")
        member = await self._get(f"/guilds/{guild_id}/members/{bot_id}",
                                 what=f"the bot's membership of guild {guild_id}")
        permissions = channel_permissions(int(guild_id), bot_id, guild, member, channel)
        needed = dict(NEEDED)
        if thread:
            needed[SEND_MESSAGES_IN_THREADS] = needed.pop(SEND_MESSAGES) + " in Threads"
        return ChannelAccess(channel_id, name,
                             [words for bit, words in needed.items() if not permissions & bit])

    async def _get(self, path: str, what: str | None = None) -> Any:
        assert self._http is not None, "use the probe in `async with`"
        try:
            async with self._http.get(self.api_base + path) as response:
                body = await response.json(content_type=None)
        except TimeoutError:
            raise ProbeError(f"{self.host} did not answer within {self.timeout:g} s",
                             _NETWORK_FIX) from None
        except (aiohttp.ClientError, ValueError) as exc:
            raise ProbeError(f"cannot reach {self.host}: {exc}", _NETWORK_FIX) from None
        if response.status == 401:
            raise TokenRefused(f"{self.host} refused the token (401 Unauthorized)", _TOKEN_FIX)
        if response.status in (403, 404) and what is not None:
            message = body.get("message") if isinstance(body, dict) else None
            raise ProbeError(f"the bot cannot see {what} ({response.status} {message})",
                             "invite the bot to the server and give its role View "
                             "Channel there, or correct the id in agent.home_channels")
        if response.status >= 300:
            raise ProbeError(f"{self.host} answered {response.status} for {path}: {body}",
                             "see Discord's answer; check the application in the "
                             "Developer Portal")
        return body


_NETWORK_FIX = ("check the network and any proxy (HTTPS_PROXY), or "
                "platforms.discord.api_base")


def channel_permissions(guild_id: int, member_id: int, guild: dict[str, Any],
                        member: dict[str, Any], channel: dict[str, Any]) -> int:
    """A member's permissions in a guild channel, as Discord computes them: @everyone's
    and the member's roles' (the owner and ADMINISTRATOR have all), then the channel's
    overwrites — @everyone's, the member's roles' together, the member's own."""
    everything = (1 << 53) - 1
    if str(guild.get("owner_id")) == str(member_id):
        return everything
    roles = {str(r["id"]): int(r["permissions"]) for r in guild.get("roles") or []}
    own_roles = [str(r) for r in member.get("roles") or []]
    base = roles.get(str(guild_id), 0)
    for role in own_roles:
        base |= roles.get(role, 0)
    if base & ADMINISTRATOR:
        return everything
    overwrites = {(int(o["type"]), str(o["id"])): (int(o["allow"]), int(o["deny"]))
                  for o in channel.get("permission_overwrites") or []}
    allow, deny = overwrites.get((0, str(guild_id)), (0, 0))
    base = base & ~deny | allow
    allow = deny = 0
    for role in own_roles:
        role_allow, role_deny = overwrites.get((0, role), (0, 0))
        allow, deny = allow | role_allow, deny | role_deny
    base = base & ~deny | allow
    allow, deny = overwrites.get((1, str(member_id)), (0, 0))
    return base & ~deny | allow
