"""Matrix's settings, ``platforms.matrix``."""

from __future__ import annotations

from typing import Any

from pydantic import Field, SecretStr, field_validator

from gateway.config.platform import PlatformSettings


class MatrixSettings(PlatformSettings):
    """``platforms.matrix``: the bot's account on a homeserver (an access token, or a
    password to log in with at each start), who may talk to it, and where."""

    #: the homeserver's client API base, ``https://matrix.example.org``
    homeserver: str | None = None
    #: the bot's Matrix id, ``@homing:example.org``
    user_id: str | None = None
    #: the bot's access token (``homing setup`` logs in once and keeps it)
    access_token: SecretStr | None = None
    #: without an access token: the bot's password, for a login at each start
    password: SecretStr | None = None
    #: the device the session is on: kept, so sends made again after a crash are
    #: recognised by the homeserver (transaction ids are per device)
    device_id: str = "HOMING"
    #: Matrix ids that may talk to the bot, and whose invites it takes
    allowed_users: list[str] = Field(default_factory=list)
    #: room ids the bot answers in (empty: any room an allowed user invited it to)
    allowed_rooms: list[str] = Field(default_factory=list)
    #: a streamed reply's preview is edited at most this often
    stream_edit_interval_seconds: float = Field(1.0, ge=0.2)

    @field_validator("allowed_users", "allowed_rooms", mode="before")
    @classmethod
    def _ids_as_strings(cls, value: Any) -> Any:
        return [str(v) for v in value] if isinstance(value, list) else value

    @field_validator("homeserver")
    @classmethod
    def _no_trailing_slash(cls, value: str | None) -> str | None:
        return value.rstrip("/") if value else value

    def problems(self) -> list[tuple[str, str]]:
        found: list[tuple[str, str]] = []
        if self.access_token is None and self.password is None:
            found.append(("access_token", "an access_token (or a password to log in with) "
                                          "is required when matrix is enabled"))
        if self.homeserver and not self.homeserver.startswith(("https://", "http://")):
            found.append(("homeserver", "must be an http(s) URL, like "
                                        "https://matrix.example.org"))
        if self.user_id and not is_user_id(self.user_id):
            found.append(("user_id", "must be a Matrix id, like @homing:example.org"))
        return found


def is_user_id(value: str) -> bool:
    return value.startswith("@") and ":" in value[2:]
