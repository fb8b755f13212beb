"""Relay's settings, ``platforms.relay``."""

from __future__ import annotations

from gateway.config.fields import HttpUrl
from gateway.config.platform import BotSettings


class RelaySettings(BotSettings):
    """``platforms.relay``: the server, the bot's token (``token``) and who may talk to it
    (``allowed_users``, from :class:`BotSettings`)."""

    base_url: HttpUrl = "https://relay.example/v1"
