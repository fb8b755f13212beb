"""The sessions part of the web chat's REST API: every platform's sessions, for
scripts and the CLI's peers.

``GET /api/sessions?archived=exclude|only|include`` lists them; ``PATCH
/api/sessions/{id}`` renames or archives one; ``GET /api/sessions/{id}/messages``
is its transcript, each line with its rendered HTML.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aiohttp import web

from gateway.messages.conversations import line_json
from gateway.platforms.web.conversations import session_patch, shown_fields
from gateway.platforms.web.input import Error
from gateway.sessions.store import ARCHIVED_FILTERS, SessionNotFound, SessionStore
from gateway.words.session_entry import SessionEntry


def session_routes(store: Callable[[], SessionStore], error: Error) -> list[web.RouteDef]:
    """The routes, over the gateway's store (looked up per request)."""

    async def list_sessions(request: web.Request) -> web.Response:
        archived = request.query.get("archived", "exclude")
        if archived not in ARCHIVED_FILTERS:
            raise error(400, f"archived must be one of {', '.join(ARCHIVED_FILTERS)}")
        sessions = await store().list_sessions(archived)  # type: ignore[arg-type]
        return web.json_response({"sessions": [session_json(s) for s in sessions]})

    async def patch_session(request: web.Request) -> web.Response:
        title, archived = await session_patch(request, error)
        try:
            entry = await store().update_session(request.match_info["id"], title=title,
                                                 archived=archived)
        except SessionNotFound:
            raise error(404, "no such session") from None
        return web.json_response(session_json(entry))

    async def session_messages(request: web.Request) -> web.Response:
        session_id = request.match_info["id"]
        if await store().get(session_id) is None:
            raise error(404, "no such session")
        lines = await store().messages(session_id)
        return web.json_response({"messages": [line_json(line, shown_fields(line.role, line.text))
                                               for line in lines]})

    return [web.get("/api/sessions", list_sessions),
            web.patch("/api/sessions/{id}", patch_session),
            web.get("/api/sessions/{id}/messages", session_messages)]


def session_json(entry: SessionEntry) -> dict[str, Any]:
    data = entry.to_dict()
    data["conversation"] = entry.route.chat_id if entry.route.platform == "web" else None
    return data
