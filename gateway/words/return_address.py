"""The return address: where background work reports back, captured from the
task-local session context when the work starts (ARCHITECTURE: return address)."""

from __future__ import annotations

import json
from dataclasses import dataclass

from gateway.words.context import current_session
from gateway.words.route import Route


@dataclass(frozen=True, slots=True)
class ReturnAddress:
    """Where background work reports back, captured when the work starts."""

    session_key: str
    session_id: str
    route: Route
    tab_id: str | None = None

    @classmethod
    def capture(cls) -> ReturnAddress:
        """The current turn's address; raises NoSessionContext outside a turn."""
        ctx = current_session()
        return cls(session_key=ctx.session_key, session_id=ctx.session_id,
                   route=ctx.route, tab_id=ctx.tab_id)

    def to_json(self) -> str:
        return json.dumps({"session_key": self.session_key, "session_id": self.session_id,
                           "tab_id": self.tab_id, "route": self.route.to_dict()})

    @classmethod
    def from_json(cls, text: str) -> ReturnAddress:
        data = json.loads(text)
        return cls(session_key=data["session_key"], session_id=data["session_id"],
                   tab_id=data.get("tab_id"), route=Route.from_dict(data["route"]))
