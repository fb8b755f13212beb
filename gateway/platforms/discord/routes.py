"""What the Discord adapter derives without a connection: a message's route (and a
button click's), the bot's id from its token, a send's nonce, what an answer says of a
channel's rate limit, and where discord.py is pointed."""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Mapping
from typing import Any

import discord
import yarl

from gateway.platforms.discord.settings import DiscordConfig
from gateway.platforms.discord.spec import PLATFORM
from gateway.words.route import Route

_THREAD_TYPES = {discord.ChannelType.public_thread, discord.ChannelType.private_thread,
                 discord.ChannelType.news_thread}


def bot_id(token: str) -> str:
    """A bot token's first part is its user id in base64 (what Discord's gateway and
    REST answer as the bot's id), known before logging in."""
    head = token.split(".", 1)[0]
    try:
        return base64.b64decode(head + "=" * (-len(head) % 4), validate=True).decode()
    except (ValueError, UnicodeDecodeError):
        return hashlib.blake2b(head.encode(), digest_size=8).hexdigest()


def nonce_of(dedupe_key: str, part: int) -> str:
    """Discord's nonce holds 25 characters: a digest of the key and the part."""
    return hashlib.blake2b(f"{dedupe_key}#{part}".encode(), digest_size=12).hexdigest()


#: a message post's path: ``…/channels/{channel id}/messages``
_POST_PATH = re.compile(r"/channels/(\d+)/messages$")


def rate_limit_report(method: str, url: yarl.URL, status: int,
                      headers: Mapping[str, str]) -> tuple[str, int, float] | None:
    """What Discord's answer to a message post says of its channel's rate limit:
    ``(channel id, posts left, seconds until the limit resets)``; None for any other
    request, or an answer without the headers."""
    found = _POST_PATH.search(url.path) if method.upper() == "POST" else None
    if found is None:
        return None
    try:
        reset = headers.get("X-RateLimit-Reset-After") or headers.get("Retry-After")
        if status == 429:
            return found.group(1), 0, float(reset or 1.0)
        remaining = headers.get("X-RateLimit-Remaining")
        if remaining is None or reset is None:
            return None
        return found.group(1), int(remaining), float(reset)
    except ValueError:  # a header that is not a number says nothing
        return None


def route_of(message: discord.Message, kind: discord.ChannelType | None,
             parent: int | None, platform: str = PLATFORM.name) -> Route:
    """A guild channel is a group, a thread its own conversation, a DM a dm.
    ``platform``: the bot's (``discord``, or ``discord/<account>``)."""
    return _route(message.channel, kind, parent, in_guild=message.guild is not None,
                  user=message.author, anchor=message.id, platform=platform)


def click_route(interaction: discord.Interaction, platform: str = PLATFORM.name
                ) -> Route | None:
    """The conversation of the message a button was clicked on, as the one who clicked:
    the route a message of theirs there would have, anchored on the clicked message.
    None when the interaction names no channel or no message."""
    channel, message = interaction.channel, interaction.message
    if channel is None or message is None:
        return None
    return _route(channel, getattr(channel, "type", None), getattr(channel, "parent_id", None),
                  in_guild=interaction.guild_id is not None, user=interaction.user,
                  anchor=message.id, platform=platform)


def _route(channel: Any, kind: discord.ChannelType | None, parent: int | None, *,
           in_guild: bool, user: discord.abc.User, anchor: int, platform: str) -> Route:
    user_id, user_name, message_id = str(user.id), user.name, str(anchor)
    if not in_guild:
        return Route(platform, "dm", str(channel.id), user_id=user_id, user_name=user_name,
                     message_id=message_id)
    if kind in _THREAD_TYPES:
        return Route(platform, "thread", str(channel.id), thread_id=str(channel.id),
                     user_id=user_id, user_name=user_name,
                     chat_name=getattr(channel, "name", None),
                     parent_chat_id=str(parent) if parent else None, message_id=message_id)
    return Route(platform, "group", str(channel.id), user_id=user_id, user_name=user_name,
                 chat_name=getattr(channel, "name", None), message_id=message_id)


def point_library_at(config: DiscordConfig) -> None:
    """discord.py reads its endpoints from class attributes: set them from the config.

    These are process-wide by the library's design; one Discord bot per daemon.
    """
    discord.http.Route.BASE = config.api_base.rstrip("/")
    discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(config.gateway_url)
