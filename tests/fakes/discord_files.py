"""Attachments in the fake Discord: files users attach to their messages, files the bot
uploads, and the CDN that serves both.

Kept apart from the REST handlers because files are a store with rules of their own.
Uploads come as discord.py sends them: multipart/form-data with a ``payload_json``
part and one ``files[n]`` part per file, ``payload_json.attachments`` naming them by
index. The files of one request may add up to ``upload_limit`` bytes (10 MiB, the
default for a guild without boosts and discord.py's ``DEFAULT_FILE_SIZE_LIMIT_BYTES``);
more is 413 with code 40005 "Request entity too large", as Discord answers. Every
attachment's ``url`` and ``proxy_url`` point at this server's CDN path
``/attachments/<channel>/<id>/<filename>`` (``proxy_url`` under ``/media``), signed as
Discord's CDN links are (``ex``, ``is``, ``hm``): a link without its signature, or
after :meth:`DiscordFiles.expire_attachment_links`, is 404 "This content is no longer
available.", as on Discord. Mixed into
:class:`~tests.fakes.discord_server.FakeDiscord`, which numbers with ``_snowflake``.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import mimetypes
import secrets
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from aiohttp import web

from tests.fakes.media import image_size

__all__ = ["DEFAULT_UPLOAD_LIMIT", "DiscordFiles", "SentFile", "read_message_payload"]

JSON = dict[str, Any]

DEFAULT_UPLOAD_LIMIT = 10 * 1024 * 1024
_LINK_LIFETIME = 24 * 3600  # Discord's signed links last about a day
_ATTACHMENT_KEYS = ("description", "duration_secs", "waveform", "flags", "title", "ephemeral",
                    "width", "height")


@dataclass
class SentFile:
    """One file the bot uploaded with a message."""

    filename: str
    data: bytes = field(repr=False)
    content_type: str | None  # of the multipart part (discord.py sends octet-stream)
    description: str | None = None  # alt text, from ``payload_json.attachments``

    @property
    def size(self) -> int:
        return len(self.data)


class PayloadTooLarge(Exception):
    """The files of a request are over the upload limit (answered 413 / 40005)."""


class DiscordFiles:
    """The attachment half of :class:`~tests.fakes.discord_server.FakeDiscord`."""

    port: int

    def _init_files(self) -> None:
        self.upload_limit = DEFAULT_UPLOAD_LIMIT
        """Bytes the files of one upload may add up to (raise it for a boosted guild)."""
        self.attachment_downloads: list[str] = []  # CDN paths served, in order
        self._attachment_data: dict[tuple[int, int], tuple[str, bytes]] = {}
        """(channel id, attachment id) -> (file name, bytes)"""
        self._link_secret = secrets.token_bytes(16)

    def attachment(self, channel_id: int, filename: str, data: bytes, *,
                   content_type: str | None = None, size: int | None = None,
                   **extra: Any) -> JSON:
        """A Discord attachment object for ``data``, served from this fake's CDN.

        ``content_type`` defaults to what Discord guesses from the name (text with
        ``; charset=utf-8``); an image gets its ``width`` and ``height``; ``size``
        claims a size without holding the bytes; ``extra`` keys (``description``,
        ``duration_secs``, ``waveform``, ``flags``, ...) are copied in.
        """
        attachment_id: int = self._snowflake()
        self._attachment_data[(channel_id, attachment_id)] = (filename, data)
        path = f"/attachments/{channel_id}/{attachment_id}/{quote(filename)}"
        content_type = content_type or _guess_content_type(filename)
        attachment: JSON = {"id": str(attachment_id), "filename": filename,
                            "size": len(data) if size is None else size,
                            "url": self._signed(path, channel_id, attachment_id),
                            "proxy_url": self._signed("/media" + path, channel_id, attachment_id),
                            "content_type": content_type}
        dimensions = image_size(data) if content_type.startswith("image/") else None
        if dimensions is not None:
            attachment["width"], attachment["height"] = dimensions
        attachment.update({k: v for k, v in extra.items() if k in _ATTACHMENT_KEYS})
        return attachment

    def attachment_data(self, url: str) -> bytes:
        """The bytes behind an attachment's ``url`` (or ``proxy_url``)."""
        path = url.split("?", 1)[0].split("/attachments/", 1)[1]
        channel_id, attachment_id = path.split("/")[:2]
        return self._attachment_data[(int(channel_id), int(attachment_id))][1]

    def expire_attachment_links(self) -> None:
        """Every attachment link handed out so far stops working, as Discord's do after
        their ``ex`` time: fetch a message again for fresh links."""
        self._link_secret = secrets.token_bytes(16)

    def _attachments_from(self, channel_id: int, files: list[SentFile]) -> list[JSON]:
        return [self.attachment(channel_id, f.filename, f.data,
                                **({"description": f.description} if f.description else {}))
                for f in files]

    async def _serve_attachment(self, request: web.Request) -> web.Response:
        """GET a CDN link: the bytes, if the link is known, signed and not expired."""
        key = (int(request.match_info["channel_id"]), int(request.match_info["attachment_id"]))
        stored = self._attachment_data.get(key)
        query = request.query
        expected = self._signature(key, query.get("ex", ""), query.get("is", ""))
        if stored is None or stored[0] != request.match_info["filename"] \
                or _hex_time(query.get("ex", "")) <= time.time() \
                or not hmac.compare_digest(query.get("hm", ""), expected):
            return web.Response(status=404, text="This content is no longer available.")
        self.attachment_downloads.append(request.path)
        filename, data = stored
        return web.Response(body=data, content_type=_guess_content_type(filename).split(";")[0])

    def _signed(self, path: str, channel_id: int, attachment_id: int) -> str:
        issued = int(time.time())
        ex, is_ = f"{issued + _LINK_LIFETIME:x}", f"{issued:x}"
        signature = self._signature((channel_id, attachment_id), ex, is_)
        return f"http://127.0.0.1:{self.port}{path}?ex={ex}&is={is_}&hm={signature}&"

    def _signature(self, key: tuple[int, int], ex: str, is_: str) -> str:
        return hmac.new(self._link_secret, f"{key}|{ex}|{is_}".encode(),
                        hashlib.sha256).hexdigest()


async def read_message_payload(request: web.Request, upload_limit: int
                               ) -> tuple[JSON, list[SentFile]]:
    """The JSON body; or, for multipart, ``payload_json`` and each ``files[n]`` part,
    named as ``payload_json.attachments`` names them. Raises PayloadTooLarge."""
    if not request.content_type.startswith("multipart/"):
        return (await request.json() if request.body_exists else {}), []
    payload: JSON = {}
    parts: list[tuple[str, SentFile]] = []
    total = 0
    reader = await request.multipart()
    async for part in reader:
        if part.name == "payload_json":
            payload = json.loads(await part.text())
            continue
        data = await part.read()
        total += len(data)
        parts.append((part.name or "", SentFile(part.filename or part.name or "file", bytes(data),
                                                part.headers.get("Content-Type"))))
    if total > upload_limit:  # read to the end first: the client is still sending
        raise PayloadTooLarge
    described = {str(a.get("id")): a for a in payload.get("attachments") or []
                 if isinstance(a, dict)}
    for name, sent in parts:
        index = name.removeprefix("files[").removesuffix("]")
        meta = described.get(index, {})
        sent.filename = str(meta.get("filename") or sent.filename)
        sent.description = meta.get("description")
    return payload, [sent for _, sent in parts]


def _hex_time(value: str) -> int:
    try:
        return int(value, 16)
    except ValueError:
        return 0


def _guess_content_type(filename: str) -> str:
    """Discord's guess from the name: text types get ``; charset=utf-8``."""
    guessed = mimetypes.guess_type(filename)[0] or "application/octet-stream"
    return f"{guessed}; charset=utf-8" if guessed.startswith("text/") else guessed
