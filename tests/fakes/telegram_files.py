"""Files in the fake Telegram server: what users send the bot (photos, documents, voice
notes, audio, videos), how the bot fetches them (getFile, then the download path), and
the photos and documents the bot sends.

Kept apart from the text messages because files are a store of their own — bytes by
``file_id``, paths handed out by getFile — with the Bot API's own limits: getFile
refuses files over 20 MB ("file is too big", the cloud Bot API's limit), an upload is
at most 50 MB (413), a photo at most 10 MB and must be an image whose sides add up to
at most 10000 and have a ratio of at most 20. A download works only for a path getFile
handed out, with the bot's token. Mixed into
:class:`~tests.fakes.telegram_server.FakeTelegram`, which builds the inbound messages
(``_inbound``), numbers the bot's (``_new_message``) and wakes the waiters (``_wake``).
"""

from __future__ import annotations

import asyncio
import mimetypes
import secrets
from dataclasses import dataclass, field
from typing import Any, TypedDict, Unpack

from aiohttp import web

from tests.fakes.media import image_size
from tests.fakes.telegram_api import (
    ApiError,
    Failure,
    as_int,
    as_json,
    consume_failure,
    error_response,
)
from tests.fakes.telegram_buttons import inline_markup
from tests.fakes.telegram_entities import auto_entities, render, utf16_len
from tests.fakes.telegram_messages import Posted, check_thread

__all__ = ["MAX_CAPTION_LENGTH", "MAX_DOWNLOAD_SIZE", "MAX_PHOTO_SIZE", "MAX_UPLOAD_SIZE",
           "BotFiles", "FileRecord", "MessageOptions", "StoredFile"]

JSON = dict[str, Any]

MAX_DOWNLOAD_SIZE = 20 * 1024 * 1024
MAX_UPLOAD_SIZE = 50 * 1024 * 1024
MAX_PHOTO_SIZE = 10 * 1024 * 1024
MAX_CAPTION_LENGTH = 1024

#: per kind: file_id prefix (as Telegram's), the directory of its file_path, extension
_KINDS = {"photo": ("AgAC", "photos", "jpg"), "document": ("BQAC", "documents", "bin"),
          "voice": ("AwAC", "voice", "oga"), "audio": ("CQAC", "music", "mp3"),
          "video": ("BAAC", "videos", "mp4")}
_THUMBNAIL_BOXES = (90, 320, 800)  # the smaller sizes Telegram adds to a photo


class MessageOptions(TypedDict, total=False):
    """Who sends an inbound message, and where: as :meth:`FakeTelegram.user_message`."""

    user_id: int
    username: str | None
    first_name: str
    chat_type: str
    is_forum: bool
    thread_id: int | None
    is_topic_message: bool
    reply_to_message_id: int | None
    is_bot: bool
    chat_title: str | None
    date: float | None


@dataclass
class StoredFile:
    """A file on "Telegram's servers", by ``file_id``."""

    file_id: str
    file_unique_id: str
    kind: str  # photo, document, voice, audio or video
    data: bytes = field(repr=False)
    size: int  # what Telegram says its size is (``size_override`` may claim more)
    file_path: str
    mime_type: str | None = None


@dataclass
class FileRecord:
    """One successful sendPhoto or sendDocument, as the fake received it."""

    method: str  # "sendPhoto" or "sendDocument"
    chat_id: int
    message_thread_id: int | None
    reply_to_message_id: int | None
    caption: str | None  # as sent, markup and all
    parse_mode: str | None
    filename: str | None  # of the uploaded part; None when sent by file_id
    data: bytes = field(repr=False)
    mime_type: str | None  # the uploaded part's content type
    message_id: int
    file_id: str  # the file as now stored (the largest size, for a photo)
    params: dict[str, Any] = field(repr=False)  # the request parameters (uploads as FileField)


class BotFiles:
    """The file half of :class:`~tests.fakes.telegram_server.FakeTelegram`."""

    token: str
    sent_files: list[FileRecord]
    _posted: dict[tuple[int, int], Posted]

    def _init_files(self) -> None:
        self.sent_files = []
        self._files: dict[str, StoredFile] = {}
        self._issued_paths: dict[str, StoredFile] = {}  # file_path -> file, after getFile
        self._file_failures: list[Failure] = []
        self._sent_files_changed = asyncio.Event()
        self._file_count = 0

    # ------------------------------------------------------------------ inbound

    def add_file(self, kind: str, data: bytes, *, size_override: int | None = None,
                 mime_type: str | None = None, extension: str | None = None) -> StoredFile:
        """Store a file as Telegram would hold it; its ``file_id`` can then be sent or
        fetched. ``size_override`` claims a size without holding the bytes (a 30 MB
        document in a test costs nothing)."""
        prefix, folder, default_extension = _KINDS[kind]
        self._file_count += 1
        stored = StoredFile(
            file_id=f"{prefix}AgADAQ{self._file_count:05d}{secrets.token_urlsafe(18)}",
            file_unique_id=f"AQAD{self._file_count:04d}{secrets.token_urlsafe(6)}",
            kind=kind, data=data, size=len(data) if size_override is None else size_override,
            file_path=f"{folder}/file_{self._file_count - 1}.{extension or default_extension}",
            mime_type=mime_type)
        self._files[stored.file_id] = stored
        return stored

    def file_data(self, file_id: str) -> bytes:
        """The bytes stored under ``file_id`` (a user's file, or one the bot sent)."""
        return self._files[file_id].data

    def user_photo(self, *, chat_id: int, data: bytes, width: int | None = None,
                   height: int | None = None, caption: str | None = None,
                   caption_entities: list[JSON] | None = None, size_override: int | None = None,
                   **options: Unpack[MessageOptions]) -> JSON:
        """Queue a photo from a user: ``photo`` is a list of PhotoSize, smallest first,
        the last one the photo itself (``data``; its width and height read from the
        image, else as given, else 1280×960). The smaller sizes hold placeholder bytes,
        not the photo: a bot that downloads ``photo[0]`` does not get the picture."""
        sniffed = image_size(data)
        full = (width or (sniffed or (1280, 960))[0], height or (sniffed or (1280, 960))[1])
        stored = self.add_file("photo", data, size_override=size_override, mime_type="image/jpeg")
        return self._user_file(chat_id, {"photo": self._photo_sizes(stored, *full)},
                               caption, caption_entities, options)

    def user_document(self, *, chat_id: int, data: bytes, file_name: str = "file.bin",
                      mime_type: str | None = None, caption: str | None = None,
                      caption_entities: list[JSON] | None = None,
                      size_override: int | None = None,
                      **options: Unpack[MessageOptions]) -> JSON:
        """Queue a document (any file) from a user; ``mime_type`` defaults to the one
        its name suggests, as Telegram's clients fill it in."""
        mime = mime_type or mimetypes.guess_type(file_name)[0] or "application/octet-stream"
        stored = self.add_file("document", data, size_override=size_override, mime_type=mime,
                               extension=_extension(file_name))
        document = {**_file_fields(stored), "file_name": file_name, "mime_type": mime}
        return self._user_file(chat_id, {"document": document}, caption, caption_entities,
                               options)

    def user_voice(self, *, chat_id: int, data: bytes, duration: int = 1,
                   mime_type: str = "audio/ogg", caption: str | None = None,
                   caption_entities: list[JSON] | None = None, size_override: int | None = None,
                   **options: Unpack[MessageOptions]) -> JSON:
        """Queue a voice note from a user (Opus in OGG, as Telegram's clients record)."""
        stored = self.add_file("voice", data, size_override=size_override, mime_type=mime_type)
        voice = {**_file_fields(stored), "duration": duration, "mime_type": mime_type}
        return self._user_file(chat_id, {"voice": voice}, caption, caption_entities, options)

    def user_audio(self, *, chat_id: int, data: bytes, duration: int = 1,
                   file_name: str = "audio.mp3", mime_type: str = "audio/mpeg",
                   performer: str | None = None, title: str | None = None,
                   caption: str | None = None, caption_entities: list[JSON] | None = None,
                   size_override: int | None = None, **options: Unpack[MessageOptions]) -> JSON:
        """Queue an audio file (music) from a user."""
        stored = self.add_file("audio", data, size_override=size_override, mime_type=mime_type,
                               extension=_extension(file_name))
        audio: JSON = {**_file_fields(stored), "duration": duration, "file_name": file_name,
                       "mime_type": mime_type}
        audio.update({k: v for k, v in (("performer", performer), ("title", title)) if v})
        return self._user_file(chat_id, {"audio": audio}, caption, caption_entities, options)

    def user_video(self, *, chat_id: int, data: bytes, duration: int = 1, width: int = 640,
                   height: int = 360, file_name: str = "video.mp4", mime_type: str = "video/mp4",
                   caption: str | None = None, caption_entities: list[JSON] | None = None,
                   size_override: int | None = None, **options: Unpack[MessageOptions]) -> JSON:
        """Queue a video from a user."""
        stored = self.add_file("video", data, size_override=size_override, mime_type=mime_type,
                               extension=_extension(file_name))
        video = {**_file_fields(stored), "width": width, "height": height,
                 "duration": duration, "file_name": file_name, "mime_type": mime_type}
        return self._user_file(chat_id, {"video": video}, caption, caption_entities, options)

    def _user_file(self, chat_id: int, media: JSON, caption: str | None,
                   caption_entities: list[JSON] | None, options: MessageOptions) -> JSON:
        if caption is not None:
            media["caption"] = caption
            entities = auto_entities(caption) if caption_entities is None else caption_entities
            if entities:
                media["caption_entities"] = entities
        return self._inbound(chat_id, media, **options)

    def _photo_sizes(self, stored: StoredFile, width: int, height: int) -> list[JSON]:
        """Smaller sizes (their own placeholder files) then the photo itself."""
        sizes: list[JSON] = []
        for box in _THUMBNAIL_BOXES:
            if max(width, height) <= box:
                break
            scale = box / max(width, height)
            placeholder = f"thumbnail {box} of {stored.file_unique_id}".encode()
            small = self.add_file("photo", placeholder, mime_type="image/jpeg")
            sizes.append({**_file_fields(small), "width": max(1, round(width * scale)),
                          "height": max(1, round(height * scale))})
        sizes.append({**_file_fields(stored), "width": width, "height": height})
        return sizes

    # ------------------------------------------------------------------ outbound

    def fail_next_file(self, *, chat_id: int | None = None, status: int = 429,
                       retry_after: int | None = None,
                       description: str = "Too Many Requests: retry after 1",
                       count: int = 1) -> None:
        """Make the next ``count`` sendPhoto/sendDocument calls fail, as
        :meth:`~FakeTelegram.fail_next_send` does for sendMessage."""
        if status == 429 and retry_after is None:
            retry_after = 1
        self._file_failures.append(Failure(chat_id, status, description, retry_after, count))

    async def wait_for_files(self, count: int, timeout: float = 10) -> list[FileRecord]:
        """Wait until at least ``count`` files were sent; return all of them."""
        await self._wait_for("sent_files", count, timeout)
        return list(self.sent_files)

    # ------------------------------------------------------------------ methods

    async def _get_file(self, params: dict[str, Any]) -> JSON:
        stored = self._files.get(str(params.get("file_id") or ""))
        if stored is None:
            raise ApiError(400, "Bad Request: invalid file_id")
        if stored.size > MAX_DOWNLOAD_SIZE:
            raise ApiError(400, "Bad Request: file is too big")
        self._issued_paths[stored.file_path] = stored
        return {"file_id": stored.file_id, "file_unique_id": stored.file_unique_id,
                "file_size": stored.size, "file_path": stored.file_path}

    async def _download(self, request: web.Request) -> web.Response:
        """GET /file/bot<token>/<file_path>: the bytes of a file getFile handed out."""
        stored = self._issued_paths.get(request.match_info["path"])
        if request.match_info["token"] != self.token or stored is None:
            return error_response(404, "Not Found")
        return web.Response(body=stored.data,
                            content_type=stored.mime_type or "application/octet-stream")

    async def _send_photo(self, params: dict[str, Any]) -> JSON:
        return await self._send_file("sendPhoto", "photo", params)

    async def _send_document(self, params: dict[str, Any]) -> JSON:
        return await self._send_file("sendDocument", "document", params)

    async def _send_file(self, method: str, kind: str, params: dict[str, Any]) -> JSON:
        """In the Bot API's order: the chat, the file, the caption, the topic, then
        what Telegram checks of the file itself."""
        try:
            chat_id = int(params.get("chat_id", ""))
        except (TypeError, ValueError):
            raise ApiError(400, "Bad Request: chat not found") from None
        consume_failure(self._file_failures, chat_id)
        data, filename, mime, reused = self._file_in_request(kind, params.get(kind))
        caption, parse_mode = params.get("caption"), params.get("parse_mode")
        rendered = render(caption or "", parse_mode)
        if utf16_len(rendered.text) > MAX_CAPTION_LENGTH:
            raise ApiError(400, "Bad Request: message caption is too long")
        thread_id = as_int(params.get("message_thread_id"))
        check_thread(self, chat_id, thread_id)
        reply = as_json(params.get("reply_parameters"))
        reply_to = as_int(reply.get("message_id")) if isinstance(reply, dict) \
            else as_int(params.get("reply_to_message_id"))

        message: JSON = self._new_message(chat_id, thread_id, reply_to)
        if kind == "photo":
            size = _checked_photo(data) if reused is None else None
            stored = reused or self.add_file("photo", data, mime_type="image/jpeg")
            width, height = size or image_size(stored.data) or (1280, 960)
            message["photo"] = self._photo_sizes(stored, width, height)
        else:
            name = filename or "document"
            stored = reused or self.add_file(
                "document", data, extension=_extension(name),
                mime_type=_document_mime(mime, name))
            message["document"] = {**_file_fields(stored), "file_name": name,
                                   "mime_type": stored.mime_type or "application/octet-stream"}
        if rendered.text:
            message["caption"] = rendered.text
            if rendered.entities:
                message["caption_entities"] = rendered.entities
        self._posted[(chat_id, message["message_id"])] = Posted(
            message, caption or "", parse_mode, inline_markup(params.get("reply_markup")))
        self.sent_files.append(FileRecord(
            method=method, chat_id=chat_id, message_thread_id=thread_id,
            reply_to_message_id=reply_to, caption=caption, parse_mode=parse_mode,
            filename=filename, data=stored.data, mime_type=mime,
            message_id=message["message_id"], file_id=stored.file_id, params=params))
        self._wake("sent_files")
        return message

    def _file_in_request(self, kind: str, value: Any
                         ) -> tuple[bytes, str | None, str | None, StoredFile | None]:
        """(bytes, file name, content type, the stored file when sent by file_id)."""
        if value is None or value == "":
            raise ApiError(400, f"Bad Request: there is no {kind} in the request")
        if isinstance(value, web.FileField):
            data = value.file.read()
            if not data:
                raise ApiError(400, "Bad Request: file must be non-empty")
            return data, value.filename, value.content_type, None
        text = str(value)
        if text.startswith(("http://", "https://")):
            raise ApiError(400, "Bad Request: failed to get HTTP URL content")
        stored = self._files.get(text)
        if stored is None:
            raise ApiError(400, "Bad Request: wrong file identifier/HTTP URL specified")
        if stored.kind != kind and not (kind == "document" and stored.kind != "photo"):
            raise ApiError(400, "Bad Request: type of file mismatch")
        return stored.data, None, None, stored


# ---------------------------------------------------------------------- module helpers

def _file_fields(stored: StoredFile) -> JSON:
    return {"file_id": stored.file_id, "file_unique_id": stored.file_unique_id,
            "file_size": stored.size}


def _checked_photo(data: bytes) -> tuple[int, int]:
    """A photo's size, as Telegram takes photos: an image of at most 10 MB, its sides
    adding up to at most 10000, their ratio at most 20."""
    if len(data) > MAX_PHOTO_SIZE:
        raise ApiError(400, "Bad Request: PHOTO_SAVE_FILE_INVALID")
    size = image_size(data)
    if size is None or min(size) <= 0:
        raise ApiError(400, "Bad Request: IMAGE_PROCESS_FAILED")
    width, height = size
    if width + height > 10_000 or max(width, height) / min(width, height) > 20:
        raise ApiError(400, "Bad Request: PHOTO_INVALID_DIMENSIONS")
    return size


def _extension(file_name: str) -> str | None:
    stem, dot, extension = file_name.rpartition(".")
    return extension.lower() if dot and stem and extension.isalnum() else None


def _document_mime(sent: str | None, file_name: str) -> str:
    """Telegram goes by the name when the upload says no more than "octet-stream"."""
    if sent and sent != "application/octet-stream":
        return sent
    return mimetypes.guess_type(file_name)[0] or "application/octet-stream"
