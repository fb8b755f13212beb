"""The conversations part of the web chat's REST API: what the page's sidebar,
header and transcript show.

``GET /api/conversations`` lists the web chat's conversations (title, last
message, live session); ``PATCH /api/conversations/{conversation}`` renames or
archives one, whichever session is live; ``GET
/api/conversations/{conversation}/messages`` is its whole transcript, earlier
sessions included, each line with its rendered HTML.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from aiohttp import web

from gateway.formatting.web_html import render as render_html
from gateway.messages.command_line import new_session_ids
from gateway.messages.conversations import (
    latest_session,
    line_json,
    list_conversations,
    sessions_of,
    transcript,
)
from gateway.platforms.web.input import CONVERSATION_RULE, Error, json_object, valid_conversation
from gateway.sessions.store import ARCHIVED_FILTERS
from gateway.words.route import Route

if TYPE_CHECKING:
    from gateway.contract.host import AdapterHost

MAX_TITLE = 200


async def session_patch(request: web.Request, error: Error) -> tuple[str | None, bool | None]:
    """The title and/or archived flag a PATCH body asks for, checked."""
    body = await json_object(request, error)
    unknown = set(body) - {"title", "archived"}
    if unknown:
        raise error(400, f"unknown fields: {', '.join(sorted(unknown))}")
    title, archived = body.get("title"), body.get("archived")
    if title is None and archived is None:
        raise error(400, "give a title and/or archived")
    if title is not None and (not isinstance(title, str) or len(title) > MAX_TITLE):
        raise error(400, f"title must be a string of at most {MAX_TITLE} characters")
    if archived is not None and not isinstance(archived, bool):
        raise error(400, "archived must be true or false")
    return title, archived


def conversation_routes(runner: Callable[[], AdapterHost],
                        error: Error) -> list[web.RouteDef]:
    def key_of(request: web.Request) -> str:
        conversation = request.match_info["conversation"]
        if not valid_conversation(conversation):
            raise error(400, CONVERSATION_RULE)
        return runner().session_key_for(Route(platform="web", chat_type="dm",
                                              chat_id=conversation, user_id="web"))

    async def list_all(request: web.Request) -> web.Response:
        archived = request.query.get("archived", "exclude")
        if archived not in ARCHIVED_FILTERS:
            raise error(400, f"archived must be one of {', '.join(ARCHIVED_FILTERS)}")
        found = await list_conversations(runner().store, "web", archived)  # type: ignore[arg-type]
        return web.json_response({"conversations": [c.to_dict() for c in found]})

    async def patch(request: web.Request) -> web.Response:
        key = key_of(request)
        title, archived = await session_patch(request, error)
        store = runner().store
        latest = await latest_session(store, key)
        if latest is None:
            raise error(404, "no such conversation")
        await store.update_session(latest.id, title=title, archived=archived)
        found = [c for c in await list_conversations(store, "web", "include")
                 if c.session.session_key == key]
        return web.json_response(found[0].to_dict() if found else {})

    async def messages(request: web.Request) -> web.Response:
        key = key_of(request)
        store = runner().store
        sessions = await sessions_of(store, key)
        if not sessions:
            raise error(404, "no such conversation")
        lines = await transcript(store, key)
        live = next((s.id for s in reversed(sessions) if s.is_live), None)
        return web.json_response({
            "conversation": request.match_info["conversation"], "session_key": key,
            "live_session_id": live,
            "sessions": [_session_summary(s) for s in sessions],
            "messages": [line_json(line, shown_fields(line.role, line.text))
                         for line in lines]})

    return [web.get("/api/conversations", list_all),
            web.patch("/api/conversations/{conversation}", patch),
            web.get("/api/conversations/{conversation}/messages", messages)]


def shown_fields(kind: str, text: str) -> dict[str, Any]:
    """What a tab is sent with a line besides its text, live or in the transcript: its
    HTML, and for the ``/new`` line the sessions it names (``new_session``: the page
    says "New session" and keeps the ids under its details)."""
    fields: dict[str, Any] = {"html": render_html(text)}
    if (ids := new_session_ids(kind, text)) is not None:
        fields["new_session"] = {"session_id": ids[0], "previous_session_id": ids[1]}
    return fields


def _session_summary(s: Any) -> dict[str, Any]:
    return {"id": s.id, "created_at": s.created_at, "ended_at": s.ended_at,
            "end_reason": s.end_reason, "title": s.title}
