"""What a config may say but deserves a second look: printed by ``check-config``,
shown by ``doctor``; never a reason to refuse it."""

from __future__ import annotations

from gateway.config.settings import Config


def config_warnings(config: Config) -> list[str]:
    """What is valid but deserves a second look."""
    warnings = []
    for name in config.platforms.enabled():
        for key, platform in config.platforms.bots(name):
            names = [u for u in getattr(platform, "allowed_users", []) if u.startswith("@")]
            if not (platform.enabled and names):
                continue
            where = name if key == name else f"{name}.accounts ({key})"
            warnings.append(
                f"platforms.{where}.allowed_users: {', '.join(names)} — usernames can change "
                f"hands; each is pinned to the first user id seen with it (give the ids, "
                f"which /start shows, to be sure)")
    return warnings
