"""The fake Discord's guild as the bot stands in it: the bot's application (whose flags
say which privileged intents the developer portal has on), the guild and its roles,
the bot's member, and the permissions these give the bot in a channel::

    fake.allowed_privileged_intents = 0         # MESSAGE CONTENT INTENT off in the portal
    fake.set_overwrite(111, fake.guild_id, deny=SEND_MESSAGES)  # @everyone may not post
    fake.add_role(900, "bots", permissions=VIEW_CHANNEL | SEND_MESSAGES)
    fake.give_bot_role(900)

Permissions are computed as Discord computes them: @everyone's and the bot's roles'
permissions (ADMINISTRATOR, or owning the guild, is everything), then the channel's
overwrites — @everyone's, the roles' together, the member's own; a thread takes its
parent channel's. A channel the bot cannot view is 403/50001 Missing Access, a post
where it may not send 403/50013 Missing Permissions.

Kept apart from the REST module, which holds the message rules, because this is the
standing the rules are checked against, and what ``homing doctor`` and ``homing setup``
read.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from tests.fakes.discord_gateway import (
    INTENT_GUILD_MEMBERS,
    INTENT_GUILD_PRESENCES,
    INTENT_MESSAGE_CONTENT,
)
from tests.fakes.discord_rest import (
    SEND_MESSAGES,
    SEND_MESSAGES_IN_THREADS,
    ApiError,
    json_response,
    now_iso,
)

__all__ = ["ADMINISTRATOR", "ALL_PERMISSIONS", "DiscordGuild", "READ_MESSAGE_HISTORY",
           "SEND_MESSAGES", "SEND_MESSAGES_IN_THREADS", "VIEW_CHANNEL"]

JSON = dict[str, Any]

ADMINISTRATOR = 1 << 3
VIEW_CHANNEL = 1 << 10
READ_MESSAGE_HISTORY = 1 << 16
ALL_PERMISSIONS = (1 << 51) - 1
#: application flags for the privileged intents: (verified app, unverified app), the
#: second for a bot in fewer than 100 servers — every new one
_INTENT_FLAGS = ((INTENT_GUILD_PRESENCES, 1 << 12, 1 << 13),
                 (INTENT_GUILD_MEMBERS, 1 << 14, 1 << 15),
                 (INTENT_MESSAGE_CONTENT, 1 << 18, 1 << 19))
_THREAD_TYPES = frozenset({10, 11, 12})


class DiscordGuild:
    """The guild half of :class:`~tests.fakes.discord_server.FakeDiscord`."""

    # the state FakeDiscord keeps for it
    bot_id: int
    bot_user: JSON
    guild_id: int
    guild_name: str
    allowed_privileged_intents: int
    _channels: dict[int, JSON]
    _roles: dict[int, JSON]

    def _init_guild(self) -> None:
        #: the roles the bot's member has besides @everyone
        self.bot_roles: list[int] = []
        #: a verified application's flags say so (GATEWAY_MESSAGE_CONTENT, not _LIMITED)
        self.verified_application = False
        self.guild_owner_id = 1

    # ------------------------------------------------------------------ world setup

    def set_role_permissions(self, role_id: int, permissions: int) -> None:
        """What a role (the guild id for @everyone) allows, guild-wide."""
        self._roles[role_id]["permissions"] = str(permissions)

    def give_bot_role(self, role_id: int) -> None:
        """Give the bot's member a role (before connecting, for GUILD_CREATE to show it)."""
        if role_id not in self._roles:
            raise KeyError(f"no role {role_id}")
        self.bot_roles.append(role_id)

    def set_overwrite(self, channel_id: int, target_id: int, *, allow: int = 0,
                      deny: int = 0, member: bool = False) -> None:
        """A channel's permission overwrite for a role (the guild id: @everyone) or, with
        ``member``, a user; replaces one for the same target."""
        overwrites = self._channels[channel_id]["permission_overwrites"]
        overwrites[:] = [o for o in overwrites if o["id"] != str(target_id)]
        overwrites.append({"id": str(target_id), "type": 1 if member else 0,
                           "allow": str(allow), "deny": str(deny)})

    @property
    def application_flags(self) -> int:
        """The flags GET /applications/@me shows for the intents enabled in the portal."""
        return sum(verified if self.verified_application else limited
                   for intent, verified, limited in _INTENT_FLAGS
                   if self.allowed_privileged_intents & intent)

    def bot_permissions(self, channel_id: int) -> int:
        """The bot's permissions in a guild channel or thread, as Discord computes them."""
        channel = self._channels[channel_id]
        if channel["type"] in _THREAD_TYPES:  # its parent's (a parent not known: none)
            channel = self._channels.get(int(channel["parent_id"]), channel)
        if self.guild_owner_id == self.bot_id:
            return ALL_PERMISSIONS
        roles = [self.guild_id, *self.bot_roles]
        base = 0
        for role in roles:
            base |= int(self._roles[role]["permissions"])
        if base & ADMINISTRATOR:
            return ALL_PERMISSIONS
        overwrites = {(o["type"], int(o["id"])): o
                      for o in channel.get("permission_overwrites") or []}
        everyone = overwrites.get((0, self.guild_id))
        if everyone is not None:
            base = base & ~int(everyone["deny"]) | int(everyone["allow"])
        allow = deny = 0
        for role in self.bot_roles:
            overwrite = overwrites.get((0, role))
            if overwrite is not None:
                allow, deny = allow | int(overwrite["allow"]), deny | int(overwrite["deny"])
        base = base & ~deny | allow
        own = overwrites.get((1, self.bot_id))
        if own is not None:
            base = base & ~int(own["deny"]) | int(own["allow"])
        return base

    def _check_access(self, channel: JSON, needed: int = 0) -> None:
        """A guild channel the bot cannot view is Missing Access; one it cannot do
        ``needed`` in, Missing Permissions. DMs have no permissions to check."""
        if "guild_id" not in channel:
            return
        permissions = self.bot_permissions(int(channel["id"]))
        if not permissions & VIEW_CHANNEL:
            raise ApiError(403, 50001, "Missing Access")
        if permissions & needed != needed:
            raise ApiError(403, 50013, "Missing Permissions")

    # ------------------------------------------------------------------ handlers

    def _bot_member(self) -> JSON:
        return {"user": self.bot_user, "roles": [str(r) for r in self.bot_roles],
                "joined_at": now_iso(), "nick": None, "avatar": None, "premium_since": None,
                "deaf": False, "mute": False, "flags": 0, "pending": False}

    async def _get_application(self, request: web.Request) -> web.Response:
        """GET /applications/@me (and the older /oauth2/applications/@me)."""
        owner = {"id": str(self.guild_owner_id), "username": "owner", "discriminator": "0",
                 "global_name": None, "avatar": None, "public_flags": 0, "flags": 0}
        return json_response({
            "id": str(self.bot_id), "name": self.bot_user["username"], "icon": None,
            "description": "", "summary": "", "type": None, "bot": self.bot_user,
            "bot_public": True, "bot_require_code_grant": False, "owner": owner,
            "verify_key": "0" * 64, "team": None, "flags": self.application_flags,
            "rpc_origins": [], "redirect_uris": [], "interactions_endpoint_url": None,
            "approximate_guild_count": 1})

    async def _get_guild(self, request: web.Request) -> web.Response:
        self._existing_guild(request)
        return json_response({
            "id": str(self.guild_id), "name": self.guild_name, "icon": None, "splash": None,
            "discovery_splash": None, "banner": None, "description": None,
            "owner_id": str(self.guild_owner_id), "afk_channel_id": None, "afk_timeout": 300,
            "verification_level": 0, "default_message_notifications": 0,
            "explicit_content_filter": 0, "mfa_level": 0, "nsfw_level": 0, "features": [],
            "emojis": [], "stickers": [], "roles": list(self._roles.values()),
            "application_id": None, "system_channel_id": None, "system_channel_flags": 0,
            "rules_channel_id": None, "public_updates_channel_id": None,
            "safety_alerts_channel_id": None, "max_members": 500000, "vanity_url_code": None,
            "premium_tier": 0, "premium_subscription_count": 0,
            "premium_progress_bar_enabled": False, "preferred_locale": "en-US"})

    async def _get_roles(self, request: web.Request) -> web.Response:
        self._existing_guild(request)
        return json_response(list(self._roles.values()))

    async def _get_member(self, request: web.Request) -> web.Response:
        self._existing_guild(request)
        if int(request.match_info["user_id"]) != self.bot_id:
            raise ApiError(404, 10007, "Unknown Member")  # the fake keeps no member list
        return json_response(self._bot_member())

    def _existing_guild(self, request: web.Request) -> None:
        if int(request.match_info["guild_id"]) != self.guild_id:
            raise ApiError(404, 10004, "Unknown Guild")
