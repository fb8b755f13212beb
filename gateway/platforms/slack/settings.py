"""Slack's settings, ``platforms.slack``."""

from __future__ import annotations

from typing import Any

from pydantic import Field, SecretStr, field_validator

from gateway.config.fields import HttpUrl
from gateway.config.platform import PlatformSettings


class SlackSettings(PlatformSettings):
    """``platforms.slack``: two tokens (the bot's for the Web API, the app-level one for
    Socket Mode), who may talk to the bot, and where."""

    #: ``xoxb-…``: the Bot User OAuth Token (OAuth & Permissions)
    bot_token: SecretStr | None = None
    #: ``xapp-…``: an app-level token with ``connections:write`` (Basic Information)
    app_token: SecretStr | None = None
    api_base: HttpUrl = "https://slack.com/api/"
    #: Slack user ids (``U0123ABCD``)
    allowed_users: list[str] = Field(default_factory=list)
    #: channel ids the bot answers in (empty: any channel it is a member of); DMs are
    #: always answered, to the allowed users
    allowed_channels: list[str] = Field(default_factory=list)
    #: a message at a channel's top level is answered in a thread under it, which is
    #: then its conversation (jobs started there report into that thread)
    reply_in_thread: bool = True
    #: a streamed reply's preview is edited at most this often
    stream_edit_interval_seconds: float = Field(1.0, ge=0.2)

    @field_validator("allowed_users", "allowed_channels", mode="before")
    @classmethod
    def _ids_as_strings(cls, value: Any) -> Any:
        return [str(v) for v in value] if isinstance(value, list) else value
