"""Who may talk to the agent. Internal events never pass through here:
the runner accepts them only from inside the daemon."""

from __future__ import annotations

from .config import Config
from .events import MessageEvent


def is_authorized(event: MessageEvent, config: Config, *, vouched: bool) -> bool:
    """``vouched``: the adapter authenticated the user itself (the web chat
    behind loopback or its token). Otherwise a user must be on the platform's
    ``allowed_users`` list, by id or @username."""
    if vouched:
        return True
    settings = getattr(config.platforms, event.route.platform, None)
    allowed = list(getattr(settings, "allowed_users", None) or [])
    user_id, user_name = event.route.user_id, event.route.user_name
    if user_id is not None and user_id in allowed:
        return True
    names = {a.lower() for a in allowed if a.startswith("@")}
    return user_name is not None and f"@{user_name.lstrip('@')}".lower() in names
