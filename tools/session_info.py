"""The ``session_info`` tool: where the current turn is and who it belongs to."""

from __future__ import annotations

from typing import Any

from gateway.words.context import current_session


def session_info() -> dict[str, Any]:
    """The conversation this call runs in; safe in a worker thread of the turn."""
    ctx = current_session()
    return {
        "session_key": ctx.session_key,
        "session_id": ctx.session_id,
        "tab_id": ctx.tab_id,
        "route": ctx.route.to_dict(),
    }
