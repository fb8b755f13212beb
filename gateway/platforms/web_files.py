"""Files into the web chat: ``POST /api/sessions/{id}/files``, multipart, with a
``file`` part and an optional ``text`` part (what the user typed with it).

The file is saved as it streams in, bounded by ``attachments.max_bytes`` (413
past it, nothing left behind), then handed to the session's conversation as
a message, journaled like any other: the turn gets the file's path.
"""

from __future__ import annotations

import json
import mimetypes
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote, urlencode

from aiohttp import BodyPartReader, web

from ..attachments import FILES, FileRefused, IncomingFile, conversation_dir, save, sendable
from ..events import MessageEvent

if TYPE_CHECKING:
    from ..host import AdapterHost

_CHUNK = 64 * 1024
_MAX_TEXT = 64 * 1024


def file_routes(runner: Callable[[], AdapterHost],
                error: Callable[[int, str], web.HTTPException]) -> list[web.RouteDef]:
    async def upload(request: web.Request) -> web.Response:
        gateway = runner()
        session = await gateway.store.get(request.match_info["id"])
        if session is None or session.route.platform != "web":
            raise error(404, "no such web chat session")
        if not request.content_type.startswith("multipart/"):
            raise error(400, "send multipart/form-data with a 'file' part")
        reader = await request.multipart()
        text, saved = "", None
        directory = conversation_dir(gateway.config.files_dir, session.route)
        while (part := await reader.next()) is not None:
            if not isinstance(part, BodyPartReader):
                continue
            if part.name == "text":
                text = await _bounded_text(part)
            elif part.name == "file" and saved is None:
                file = IncomingFile("upload", part.filename or "upload",
                                    part.headers.get("Content-Type"), None, "")
                try:
                    saved = await save(file, _chunks(part), directory,
                                       gateway.config.attachments.max_bytes)
                except FileRefused as exc:
                    raise web.HTTPRequestEntityTooLarge(
                        max_size=gateway.config.attachments.max_bytes, actual_size=0,
                        text=json.dumps({"error": str(exc)}), content_type="application/json"
                    ) from None
        if saved is None:
            raise error(400, "the form has no 'file' part")
        event = MessageEvent(text=text, route=session.route, metadata={FILES: [saved.to_dict()]})
        received = gateway.receive(event)
        if await received.journaled == "failed":
            Path(str(saved.path)).unlink(missing_ok=True)
            raise error(503, "the upload could not be recorded; send it again")
        return web.json_response({"file": saved.to_dict()})

    async def download(request: web.Request) -> web.StreamResponse:
        """A file the agent posted (or anyone sent), by path: only inside the roots."""
        gateway = runner()
        files = gateway.config.files_dir
        roots = [*gateway.config.send_roots,
                 *(d.resolve() for d in files.glob("web-*") if d.is_dir())]
        try:
            path = sendable(request.query.get("path", ""), roots, 2**62)
        except FileRefused as exc:
            raise error(404, str(exc)) from None
        return web.FileResponse(path, headers={
            "Content-Disposition": f"attachment; filename*=UTF-8''{quote(path.name)}",
            "X-Content-Type-Options": "nosniff"})

    return [web.post("/api/sessions/{id}/files", upload), web.get("/api/files", download)]


def file_json(path: Path) -> dict[str, object]:
    """A posted file as message frames carry it: what the page links to."""
    return {"name": path.name, "size": path.stat().st_size,
            "type": mimetypes.guess_type(path.name)[0] or "application/octet-stream",
            "url": f"/api/files?{urlencode({'path': str(path)})}"}


async def _bounded_text(part: BodyPartReader) -> str:
    data = b""
    while chunk := await part.read_chunk(_CHUNK):
        data += chunk
        if len(data) > _MAX_TEXT:
            break  # what is typed with a file is a line or two: the rest is not read
    return data[:_MAX_TEXT].decode("utf-8", "replace")


async def _chunks(part: BodyPartReader) -> AsyncIterator[bytes]:
    while chunk := await part.read_chunk(_CHUNK):
        yield chunk
