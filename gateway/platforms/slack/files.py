"""Files in Slack messages: what a message event says of each file, as an
IncomingFile; fetching one with the bot token when its turn runs; posting one into a
conversation (``files_upload_v2``).

A file's ``url_private_download`` needs the bot token as a bearer token, so the token
goes only to Slack's own file hosts (``files.slack.com`` and the other ``*.slack.com``,
over https) or the host the Web API is configured at (a local Slack in tests) — never
to an external file's URL, and never along a redirect.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
from yarl import URL

from gateway.inbound.files import FileRefused, IncomingFile, too_large

#: a download that does not finish within this is a failure (the turn says so)
DOWNLOAD_TIMEOUT = 120.0
_CHUNK = 64 * 1024
#: what a file Slack does not hand out says of itself (a free workspace's old files,
#: a file deleted since)
_UNAVAILABLE = frozenset({"hidden_by_limit", "tombstone"})


def files_in(files: list[dict[str, Any]]) -> list[IncomingFile]:
    """The files of a message event, as the journal keeps them (no bytes)."""
    found: list[IncomingFile] = []
    for item in files:
        url = item.get("url_private_download") or item.get("url_private")
        if not isinstance(url, str) or item.get("mode") in _UNAVAILABLE:
            continue
        size = item.get("size")
        found.append(IncomingFile(
            "attachment", str(item.get("name") or item.get("title") or item.get("id") or "file"),
            item.get("mimetype") if isinstance(item.get("mimetype"), str) else None,
            size if isinstance(size, int) else None, url))
    return found


def slack_host(url: str, api_base: str) -> bool:
    """Whether ``url`` is one of Slack's file hosts (https, ``*.slack.com``) or the
    configured Web API's own host: the only places the bot token is sent to."""
    target, api = URL(url), URL(api_base)
    host = (target.host or "").lower()
    if target.scheme == "https" and (host == "slack.com" or host.endswith(".slack.com")):
        return True
    return bool(host) and (target.scheme, host, target.port) == (
        api.scheme, (api.host or "").lower(), api.port)


async def download(file: IncomingFile, *, token: str, api_base: str, max_bytes: int
                   ) -> AsyncIterator[bytes]:
    """The file's bytes, in chunks; FileRefused when it is not Slack's to fetch, or over
    ``max_bytes`` by Slack's word (``save`` counts the bytes as well)."""
    if not slack_host(file.ref, api_base):
        raise FileRefused(f"{file.name} was not fetched: {URL(file.ref).host} is not "
                          f"one of Slack's file hosts.")
    if file.size is not None and file.size > max_bytes:
        raise FileRefused(too_large(file, max_bytes))
    return _fetch(file, token)


async def _fetch(file: IncomingFile, token: str) -> AsyncIterator[bytes]:
    timeout = aiohttp.ClientTimeout(total=DOWNLOAD_TIMEOUT)
    headers = {"Authorization": f"Bearer {token}"}
    async with aiohttp.ClientSession(timeout=timeout) as http, \
            http.get(file.ref, headers=headers, allow_redirects=False) as response:
        if response.status in (301, 302, 303, 307, 308):
            # Slack answers a download it will not serve with a redirect to a sign-in
            # page: the token must not follow it, and the page is not the file
            raise FileRefused(f"{file.name} was not fetched: Slack did not hand it out "
                              f"(is files:read granted to the app?).")
        response.raise_for_status()
        if "text/html" in (response.content_type or "") and "html" not in (file.mime or ""):
            raise FileRefused(f"{file.name} was not fetched: Slack answered with a page, "
                              f"not the file (is files:read granted to the app?).")
        async for chunk in response.content.iter_chunked(_CHUNK):
            yield chunk


def upload_arguments(route_chat: str, thread: str | None, path: Path,
                     caption: str | None) -> dict[str, Any]:
    """``files_upload_v2``'s arguments for ``path`` into a conversation (its thread)."""
    return {"channel": route_chat, "thread_ts": thread, "file": str(path),
            "filename": path.name, "title": path.name, "initial_comment": caption or None}
