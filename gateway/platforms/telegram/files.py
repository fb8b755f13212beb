"""Files in Telegram messages: what the Bot API says about a photo, document,
voice note, audio or video, as an IncomingFile; and fetching one (``getFile``,
then the download) when its turn runs."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from telegram import Bot
from telegram.error import BadRequest

from gateway.inbound.files import FileRefused, IncomingFile, too_large

#: the Bot API's own limit for a bot's downloads (cloud API)
DOWNLOAD_LIMIT = 20 * 1024 * 1024


def files_in(message: Any) -> list[IncomingFile]:
    found: list[IncomingFile] = []
    if message.photo:
        best = max(message.photo, key=lambda p: (p.file_size or 0, p.width * p.height))
        found.append(IncomingFile("photo", f"photo-{best.file_unique_id}.jpg", "image/jpeg",
                                  best.file_size, best.file_id))
    for kind, default, mime in (("document", "document", None),
                                ("voice", "voice.ogg", "audio/ogg"),
                                ("audio", "audio.mp3", "audio/mpeg"),
                                ("video", "video.mp4", "video/mp4")):
        item = getattr(message, kind, None)
        if item is None:
            continue
        name = getattr(item, "file_name", None) or f"{kind}-{item.file_unique_id}" + (
            "." + default.rsplit(".", 1)[1] if "." in default else "")
        found.append(IncomingFile(kind, name, getattr(item, "mime_type", None) or mime,
                                  item.file_size, item.file_id))
    return found


async def download(bot: Bot, file: IncomingFile, max_bytes: int) -> AsyncIterator[bytes]:
    try:
        remote = await bot.get_file(file.ref)
    except BadRequest as exc:
        if "too big" in exc.message.lower():
            raise FileRefused(too_large(file, min(max_bytes, DOWNLOAD_LIMIT))) from exc
        raise
    if remote.file_size is not None and remote.file_size > max_bytes:
        raise FileRefused(too_large(file, max_bytes))
    data = await remote.download_as_bytearray()
    return _once(bytes(data))


async def _once(data: bytes) -> AsyncIterator[bytes]:
    yield data


_PHOTO_TYPES = {".jpg", ".jpeg", ".png", ".webp"}
#: Telegram takes photos up to 10 MB; a larger image goes as a document
_PHOTO_LIMIT = 10 * 1024 * 1024
#: how Telegram refuses an image as a photo (then it goes as a document)
_NOT_A_PHOTO = ("PHOTO_INVALID_DIMENSIONS", "IMAGE_PROCESS_FAILED", "PHOTO_SAVE_FILE_INVALID")


async def post_file(bot: Bot, arguments: dict[str, Any], path: Path,
                    caption: str | None) -> str:
    """Send ``path`` as a photo (an image Telegram takes as one) or a document; the
    message id. ``arguments``: the chat, topic and reply anchor (send_arguments)."""
    photo = path.suffix.lower() in _PHOTO_TYPES and path.stat().st_size <= _PHOTO_LIMIT
    if photo:
        try:
            with path.open("rb") as data:
                message = await bot.send_photo(photo=data, caption=caption, **arguments)
            return str(message.message_id)
        except BadRequest as exc:
            if not any(word in exc.message.upper() for word in _NOT_A_PHOTO):
                raise
            # an image Telegram will not take as a photo (its sides, its format) still
            # goes, as the file it is
    with path.open("rb") as data:
        message = await bot.send_document(document=data, filename=path.name,
                                          caption=caption, **arguments)
    return str(message.message_id)
