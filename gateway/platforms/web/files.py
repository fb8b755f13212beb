"""Files into the web chat: ``POST /api/sessions/{id}/files``, multipart, with a
``file`` part and an optional ``text`` part (what the user typed with it).

The file is saved as it streams in, bounded by ``attachments.max_bytes`` (413
past it, nothing left behind), then handed to the session's conversation as
a message, journaled like any other: the turn gets the file's path. A form
that breaks off or is malformed, or a name that cannot be kept (too long, a
control character, not UTF-8), is a 400 saying so, and leaves nothing either.
"""

from __future__ import annotations

import json
import mimetypes
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote, urlencode

from aiohttp import BodyPartReader, MultipartReader, web
from aiohttp.http_exceptions import HttpProcessingError, LineTooLong

from gateway.errors import RefusedInput
from gateway.inbound.checks import text_problem
from gateway.inbound.files import (
    FILES,
    FileRefused,
    IncomingFile,
    NotAPath,
    conversation_dir,
    save,
    sendable,
)
from gateway.words.events import MessageEvent

if TYPE_CHECKING:
    from gateway.contract.host import AdapterHost

_CHUNK = 64 * 1024
_MAX_TEXT = 64 * 1024
#: characters in an uploaded file's name (what file systems allow in one name)
MAX_NAME = 255


def file_routes(runner: Callable[[], AdapterHost],
                error: Callable[[int, str], web.HTTPException]) -> list[web.RouteDef]:
    async def upload(request: web.Request) -> web.Response:
        gateway = runner()
        session = await gateway.store.get(request.match_info["id"])
        if session is None or session.route.platform != "web":
            raise error(404, "no such web chat session")
        if not request.content_type.startswith("multipart/"):
            raise error(400, "send multipart/form-data with a 'file' part")
        try:
            reader = await request.multipart()
        except (KeyError, ValueError):  # aiohttp's words for a missing or long boundary
            raise error(400, "the multipart body needs a boundary of 1-70 characters in "
                             "its Content-Type") from None
        directory = conversation_dir(gateway.config.files_dir, session.route)
        try:
            text, saved = await _read_form(reader, directory,
                                           gateway.config.attachments.max_bytes)
        except FileRefused as exc:
            raise web.HTTPRequestEntityTooLarge(
                max_size=gateway.config.attachments.max_bytes, actual_size=0,
                text=json.dumps({"error": str(exc)}), content_type="application/json"
            ) from None
        except _FormRefused as exc:
            raise error(400, str(exc)) from None
        if saved is None:
            raise error(400, "the form has no 'file' part")
        event = MessageEvent(text=text, route=session.route, metadata={FILES: [saved.to_dict()]})
        received = gateway.receive(event)
        taken = await received.journaled
        if taken in ("failed", "refused"):
            Path(str(saved.path)).unlink(missing_ok=True)
        if taken == "failed":
            raise error(503, "the upload could not be recorded; send it again")
        if taken == "refused":
            raise error(400, "the upload was not taken; the conversation says why")
        return web.json_response({"file": saved.to_dict()})

    async def download(request: web.Request) -> web.StreamResponse:
        """A file the agent posted (or anyone sent), by path: only inside the roots."""
        gateway = runner()
        files = gateway.config.files_dir
        roots = [*gateway.config.send_roots,
                 *(d.resolve() for d in files.glob("web-*") if d.is_dir())]
        try:
            path = sendable(request.query.get("path", ""), roots, 2**62)
        except NotAPath as exc:
            raise error(400, str(exc)) from None
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


class _FormRefused(RefusedInput):
    """An upload form that is not taken; ``str(exc)`` says what is wrong with it."""


async def _read_form(reader: MultipartReader, directory: Path,
                     max_bytes: int) -> tuple[str, IncomingFile | None]:
    """The typed text and the saved file of an upload form. A form that cannot be read
    to its end (cut short, a malformed header) leaves no file behind."""
    text, saved, read = "", None, False
    try:
        while (part := await reader.next()) is not None:
            if not isinstance(part, BodyPartReader):
                continue
            if part.name == "text":
                text = await _bounded_text(part)
                if (problem := text_problem(text)) is not None:
                    raise _FormRefused(f"the text {problem}")
            elif part.name == "file" and saved is None:
                name = part.filename or "upload"
                if (problem := _name_problem(name)) is not None:
                    raise _FormRefused(f"the file name {problem}")
                file = IncomingFile("upload", name, part.headers.get("Content-Type"), None, "")
                saved = await save(file, _chunks(part), directory, max_bytes)
        read = True
    except LineTooLong:
        raise _FormRefused("a header line of the form is too long (a file name may have at "
                           f"most {MAX_NAME} characters)") from None
    except HttpProcessingError:
        raise _FormRefused("a part of the form has a malformed header (a file name may not "
                           "hold control characters such as NUL or a newline)") from None
    except (ValueError, RuntimeError) as exc:  # what aiohttp's reader raises
        raise _FormRefused(f"the form is cut short or malformed: {exc}") from None
    finally:
        if not read and saved is not None:
            Path(str(saved.path)).unlink(missing_ok=True)
    return text, saved


def _name_problem(name: str) -> str | None:
    """None when an uploaded file's name may be taken (it is kept in the message, the
    transcript and the file's own name); else what is wrong with it."""
    if len(name) > MAX_NAME:
        return f"is {len(name)} characters long (at most {MAX_NAME})"
    control = next((i for i, c in enumerate(name) if ord(c) < 0x20 or ord(c) == 0x7F), None)
    if control is not None:
        return (f"holds a control character (U+{ord(name[control]):04X}, character "
                f"{control + 1})")
    try:
        name.encode("utf-8")
    except UnicodeEncodeError as exc:  # aiohttp keeps bytes that are not UTF-8 as surrogates
        return f"is not UTF-8 text (character {exc.start + 1})"
    return None


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
