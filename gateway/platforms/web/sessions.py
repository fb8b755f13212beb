"""The sessions part of the web chat's REST API: every platform's sessions, for
scripts and the CLI's peers.

``GET /api/sessions?archived=exclude|only|include&limit=&offset=`` lists a page of
them with the ``total`` and the ``next_offset`` (null on the last page); ``PATCH
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

#: the most sessions one ``GET /api/sessions`` returns (``limit``'s default and ceiling)
MAX_PAGE = 1000
#: a number of more digits than this is past the end of any store (and of its integers)
_DIGITS = 18


def session_routes(store: Callable[[], SessionStore], error: Error) -> list[web.RouteDef]:
    """The routes, over the gateway's store (looked up per request)."""

    async def list_sessions(request: web.Request) -> web.Response:
        archived = request.query.get("archived", "exclude")
        if archived not in ARCHIVED_FILTERS:
            raise error(400, f"archived must be one of {', '.join(ARCHIVED_FILTERS)}")
        limit = _page_number(request, "limit", 1, MAX_PAGE, default=MAX_PAGE, error=error)
        offset = _page_number(request, "offset", 0, None, default=0, error=error)
        sessions = await store().list_sessions(archived, limit=limit,  # type: ignore[arg-type]
                                               offset=offset)
        total = await store().count_sessions(archived)  # type: ignore[arg-type]
        more = offset + len(sessions) < total
        return web.json_response({"sessions": [session_json(s) for s in sessions],
                                  "total": total,
                                  "next_offset": offset + len(sessions) if more else None})

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


def _page_number(request: web.Request, name: str, lowest: int, highest: int | None, *,
                 default: int, error: Error) -> int:
    """``limit`` or ``offset`` from the query: a whole number in its range, else 400."""
    text = request.query.get(name)
    if text is None:
        return default
    rule = (f"{name} must be a whole number from {lowest} to {highest}" if highest is not None
            else f"{name} must be a whole number of at least {lowest}")
    if not (text.isascii() and text.isdigit()):
        raise error(400, rule)
    # more digits are past any store's end: int() need not read a query's worth of them
    number = int(text) if len(text) <= _DIGITS else 10**_DIGITS
    if number < lowest or (highest is not None and number > highest):
        raise error(400, rule)
    return number


def session_json(entry: SessionEntry) -> dict[str, Any]:
    data = entry.to_dict()
    data["conversation"] = entry.route.chat_id if entry.route.platform == "web" else None
    return data
