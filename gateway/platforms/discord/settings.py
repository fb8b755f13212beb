"""Discord's settings, ``platforms.discord``."""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator

from gateway.config.fields import HttpUrl, WsUrl
from gateway.config.platform import BotSettings


class DiscordConfig(BotSettings):
    """``platforms.discord``."""

    api_base: HttpUrl = "https://discord.com/api/v10"
    gateway_url: WsUrl = "wss://gateway.discord.gg"
    allowed_roles: list[str] = Field(default_factory=list)
    require_mention: bool = False
    #: a streamed reply's preview is edited at most this often
    stream_edit_interval_seconds: float = Field(1.0, ge=0.2)
    #: after a new gateway session's READY, how long without another server announced
    #: (GUILD_CREATE) before the bot counts as connected and reads back what it missed;
    #: a server announced later is taken in all the same
    guild_ready_timeout_seconds: float = Field(0.5, ge=0)

    @field_validator("allowed_roles", mode="before")
    @classmethod
    def _roles_as_strings(cls, value: Any) -> Any:
        return [str(v) for v in value] if isinstance(value, list) else value
