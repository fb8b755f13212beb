"""What the Discord adapter derives without a connection: a message's route, the bot's
id from its token, a send's nonce, and where discord.py is pointed."""

from __future__ import annotations

import base64
import hashlib

import discord
import yarl

from ..config import DiscordConfig
from ..route import Route

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


def route_of(message: discord.Message, kind: discord.ChannelType | None,
             parent: int | None) -> Route:
    """A guild channel is a group, a thread its own conversation, a DM a dm."""
    channel = message.channel
    author = message.author
    user_id, user_name = str(author.id), author.name
    if message.guild is None:
        return Route("discord", "dm", str(channel.id), user_id=user_id, user_name=user_name,
                     message_id=str(message.id))
    if kind in _THREAD_TYPES:
        return Route("discord", "thread", str(channel.id), thread_id=str(channel.id),
                     user_id=user_id, user_name=user_name,
                     chat_name=getattr(channel, "name", None),
                     parent_chat_id=str(parent) if parent else None,
                     message_id=str(message.id))
    return Route("discord", "group", str(channel.id), user_id=user_id, user_name=user_name,
                 chat_name=getattr(channel, "name", None), message_id=str(message.id))


def point_library_at(config: DiscordConfig) -> None:
    """discord.py reads its endpoints from class attributes: set them from the config.

    These are process-wide by the library's design; one Discord bot per daemon.
    """
    discord.http.Route.BASE = config.api_base.rstrip("/")
    discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(config.gateway_url)
