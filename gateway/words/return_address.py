"""The return address: where background work reports back, captured from the
task-local session context when the work starts (ARCHITECTURE: return address)."""

from __future__ import annotations

import functools
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
        return _encoded(self)

    @classmethod
    def from_json(cls, text: str) -> ReturnAddress:
        data = json.loads(text)
        return cls(session_key=data["session_key"], session_id=data["session_id"],
                   tab_id=data.get("tab_id"), route=Route.from_dict(data["route"]))


def anchor_of(text: str) -> str | None:
    """The reply anchor (``route.message_id``) of an encoded address: all the ownership
    rule takes from it, read without building the address. Raises ValueError (or
    KeyError, TypeError) when it is not an address (the rule then fails closed)."""
    data = json.loads(text)
    route = data["route"]
    if not (isinstance(data["session_key"], str) and isinstance(data["session_id"], str)
            and route["platform"] and route["chat_id"] and route["chat_type"]):
        raise ValueError("not a return address")
    anchor = route.get("message_id")
    return None if anchor is None else str(anchor)


@functools.lru_cache(maxsize=4096)
def _encoded(address: ReturnAddress) -> str:
    """An address as stored: made once for a job's many notices (its address is one
    value from its start on)."""
    return json.dumps({"session_key": address.session_key, "session_id": address.session_id,
                       "tab_id": address.tab_id, "route": address.route.to_dict()})
