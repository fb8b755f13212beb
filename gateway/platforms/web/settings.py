"""The web chat's settings, ``platforms.web``."""

from __future__ import annotations

import ipaddress

from pydantic import Field, SecretStr

from gateway.config.platform import PlatformSettings


class WebConfig(PlatformSettings):
    """``platforms.web``: on by default, on the loopback (the embedded default)."""

    enabled: bool = True
    host: str = "127.0.0.1"
    port: int = Field(8765, ge=0, le=65535)
    token: SecretStr | None = None

    def is_loopback(self) -> bool:
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False

    def problems(self) -> list[tuple[str, str]]:
        if not self.is_loopback() and not self.token:
            return [("token", f"required when platforms.web.host ({self.host}) is not a "
                              f"loopback address")]
        return []
