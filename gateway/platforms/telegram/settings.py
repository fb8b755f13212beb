"""Telegram's settings, ``platforms.telegram``."""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator

from gateway.config.fields import HttpUrl
from gateway.config.platform import BotSettings


class TelegramConfig(BotSettings):
    """``platforms.telegram``."""

    base_url: HttpUrl = "https://api.telegram.org/bot"
    base_file_url: HttpUrl = "https://api.telegram.org/file/bot"
    allowed_chats: list[str] = Field(default_factory=list)
    require_mention: bool = False
    thread_fallback_to_chat: bool = False
    messages_per_second: float = Field(30.0, gt=0)
    group_messages_per_minute: float = Field(20.0, gt=0)
    #: a streamed reply's preview is edited at most this often (flood control decides too)
    stream_edit_interval_seconds: float = Field(1.0, ge=0.2)

    @field_validator("allowed_chats", mode="before")
    @classmethod
    def _chats_as_strings(cls, value: Any) -> Any:
        return [str(v) for v in value] if isinstance(value, list) else value
