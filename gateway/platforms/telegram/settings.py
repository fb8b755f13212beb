"""Telegram's settings, ``platforms.telegram``."""

from __future__ import annotations

import re
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, field_validator

from gateway.config.fields import HttpUrl, Strict
from gateway.config.platform import BotSettings

#: what Telegram takes as a webhook's secret token
SECRET_TOKEN = re.compile(r"[A-Za-z0-9_-]{1,256}")


class WebhookListen(Strict):
    """``platforms.telegram.webhook.listen``: where Homing's own server takes Telegram's
    requests (usually behind a reverse proxy that terminates TLS)."""

    host: str = "127.0.0.1"
    port: int = Field(8443, ge=0, le=65535)
    #: None: the path of ``webhook.url``
    path: str | None = None


class TelegramWebhook(Strict):
    """``platforms.telegram.webhook``: read in ``mode: webhook`` only."""

    #: the public HTTPS address Telegram posts updates to
    url: HttpUrl | None = None
    #: sent by Telegram with every request (``X-Telegram-Bot-Api-Secret-Token``)
    secret_token: SecretStr | None = None
    listen: WebhookListen = Field(default_factory=WebhookListen)
    #: how many requests Telegram may have open at once (its default: 40)
    max_connections: int = Field(40, ge=1, le=100)

    @property
    def listen_path(self) -> str:
        """The path the listener serves: ``listen.path``, or the one of ``url``."""
        if self.listen.path is not None:
            return self.listen.path
        return urlsplit(self.url or "").path or "/"


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
    #: how updates come in: Homing asks for them (polling), or Telegram posts them (webhook)
    mode: Literal["polling", "webhook"] = "polling"
    webhook: TelegramWebhook = Field(default_factory=TelegramWebhook)

    @field_validator("allowed_chats", mode="before")
    @classmethod
    def _chats_as_strings(cls, value: Any) -> Any:
        return [str(v) for v in value] if isinstance(value, list) else value

    @property
    def webhook_secret_token(self) -> SecretStr | None:
        """``webhook.secret_token``, as the spec's ``secrets`` name it (they are read as
        attributes of the section), so it is masked in the logs like the token."""
        return self.webhook.secret_token

    def problems(self) -> list[tuple[str, str]]:
        if self.mode != "webhook":
            return []
        found: list[tuple[str, str]] = []
        webhook = self.webhook
        if not webhook.url:
            found.append(("webhook.url", "required when platforms.telegram.mode is webhook: "
                                         "the public HTTPS address Telegram posts to"))
        secret = webhook.secret_token.get_secret_value() if webhook.secret_token else ""
        if not secret:
            found.append(("webhook.secret_token",
                          "required when platforms.telegram.mode is webhook: without it "
                          "anyone who finds the address could post updates; usually "
                          "\"${TELEGRAM_WEBHOOK_SECRET}\" (e.g. `openssl rand -hex 32`)"))
        elif not SECRET_TOKEN.fullmatch(secret):
            found.append(("webhook.secret_token",
                          "Telegram takes 1 to 256 of A-Z, a-z, 0-9, _ and - (base64's "
                          "+, / and = are refused; `openssl rand -hex 32` makes one)"))
        if not webhook.listen_path.startswith("/"):
            found.append(("webhook.listen.path", "must start with /"))
        return found
