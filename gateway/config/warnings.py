"""What a config may say but deserves a second look: printed by ``check-config``,
shown by ``doctor``; never a reason to refuse it."""

from __future__ import annotations

from gateway.config.settings import Config


def config_warnings(config: Config) -> list[str]:
    """What is valid but deserves a second look."""
    warnings = []
    for name in config.platforms.enabled():
        platform = config.platforms.section(name)
        names = [u for u in getattr(platform, "allowed_users", []) if u.startswith("@")]
        if platform.enabled and names:
            warnings.append(
                f"platforms.{name}.allowed_users: {', '.join(names)} — usernames can change "
                f"hands; each is pinned to the first user id seen with it (give the ids, "
                f"which /start shows, to be sure)")
    return warnings
