"""One lifetime of a conversation, as the store keeps it (see ARCHITECTURE: session id)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gateway.words.route import Route


@dataclass(frozen=True, slots=True)
class SessionEntry:
    id: str
    session_key: str
    route: Route
    created_at: float
    last_active_at: float
    ended_at: float | None = None
    end_reason: str | None = None
    parent_session_id: str | None = None
    title: str | None = None
    archived: bool = False

    @property
    def is_live(self) -> bool:
        return self.ended_at is None

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "session_key": self.session_key,
            "platform": self.route.platform,
            "route": self.route.to_dict(),
            "created_at": self.created_at,
            "last_active_at": self.last_active_at,
            "ended_at": self.ended_at,
            "end_reason": self.end_reason,
            "parent_session_id": self.parent_session_id,
            "title": self.title,
            "archived": self.archived,
        }
