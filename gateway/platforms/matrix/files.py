"""Files in Matrix messages: fetched from the homeserver's authenticated media API
(``/_matrix/client/v1/media/download``) with the bot's token when the turn runs, within
``attachments.max_bytes``; and posted by uploading them, then an ``m.image`` or
``m.file`` event into the route's thread.

The token goes only to the configured homeserver: an ``mxc://`` URI names a server and
a media id, never a URL, and the download is asked of our own homeserver, which fetches
a remote server's media itself. Redirects are not followed.
"""

from __future__ import annotations

import mimetypes
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp

from gateway.inbound.files import FileRefused, IncomingFile, too_large
from gateway.platforms.matrix.routes import thread_relation
from gateway.words.route import Route

#: a download that does not finish within this is a failure (the turn says so)
DOWNLOAD_TIMEOUT = 120.0
_CHUNK = 64 * 1024


async def download(file: IncomingFile, *, homeserver: str, token: str, max_bytes: int
                   ) -> AsyncIterator[bytes]:
    if file.size is not None and file.size > max_bytes:
        raise FileRefused(too_large(file, max_bytes))
    server, _, media = file.ref.removeprefix("mxc://").partition("/")
    if not file.ref.startswith("mxc://") or not server or not media or "/" in media:
        raise FileRefused(f"{file.name} was not saved: {file.ref!r} is not a Matrix file.")
    url = (f"{homeserver}/_matrix/client/v1/media/download/{quote(server, safe='')}/"
           f"{quote(media, safe='')}")
    return _chunks(url, token, file, max_bytes)


async def _chunks(url: str, token: str, file: IncomingFile, max_bytes: int
                  ) -> AsyncIterator[bytes]:
    timeout = aiohttp.ClientTimeout(total=DOWNLOAD_TIMEOUT)
    async with aiohttp.ClientSession(timeout=timeout) as http, http.get(
            url, headers={"Authorization": f"Bearer {token}"},
            allow_redirects=False) as answer:
        if answer.status != 200:
            raise FileRefused(f"{file.name} was not saved: the homeserver answered "
                              f"{answer.status}.")
        if answer.content_length is not None and answer.content_length > max_bytes:
            raise FileRefused(too_large(file, max_bytes))
        async for chunk in answer.content.iter_chunked(_CHUNK):
            yield chunk


def file_content(route: Route, path: Path, mxc: str, size: int, caption: str | None
                 ) -> dict[str, Any]:
    """The event that shows an uploaded file: an image as ``m.image``, else ``m.file``."""
    mime = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
    msgtype = "m.image" if mime.startswith("image/") else "m.file"
    content: dict[str, Any] = {"msgtype": msgtype, "body": caption or path.name,
                               "filename": path.name, "url": mxc,
                               "info": {"mimetype": mime, "size": size}, "m.mentions": {}}
    relation = thread_relation(route)
    if relation is not None:
        content["m.relates_to"] = relation
    return content


def mime_of(path: Path) -> str:
    return mimetypes.guess_type(path.name)[0] or "application/octet-stream"
