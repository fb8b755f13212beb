"""The fake Slack's files: people's files the bot downloads, and the bot's uploads with
``files_upload_v2``.

Downloads as on Slack: a file's ``url_private`` / ``url_private_download`` serve the
bytes only with ``Authorization: Bearer <bot token>``; without it (or with another
token) the answer is still HTTP 200, with an HTML sign-in page, which is how an adapter
that forgot the header ends up saving a web page.

Uploads as on Slack (docs.slack.dev, files.getUploadURLExternal and
files.completeUploadExternal): ``files.getUploadURLExternal`` (filename, length) gives
an ``upload_url`` and a ``file_id``; the bytes are POSTed there (raw or as a multipart
``file``; no token needed, the URL is the ticket), and must be exactly ``length``
bytes, else the POST is refused with HTTP 400 and the file stays empty;
``files.completeUploadExternal`` (files ``[{"id", "title"}]``, ``channel_id``,
``thread_ts``, ``initial_comment``) shares them: an :class:`Upload` per file and one
message with the files in that channel or thread. A file never uploaded is
``file_not_found`` ("Could not find the file from the upload ticket").
"""

from __future__ import annotations

import mimetypes
import time
import uuid
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from tests.fakes.slack_api import ApiError, SlackApi, json_text
from tests.fakes.slack_world import Channel, SlackMessage, Upload

__all__ = ["SIGN_IN_PAGE", "SlackFiles", "StoredFile"]

JSON = dict[str, Any]

#: what Slack serves a file URL without the bot token
SIGN_IN_PAGE = ("<!DOCTYPE html><html lang=\"en-US\"><head><title>Sign in | Slack</title>"
                "</head><body><h1>Sign in to Homing Test</h1></body></html>")


@dataclass
class StoredFile:
    """A file on the fake: its Slack file object and its bytes (None: not uploaded yet)."""

    info: JSON
    content: bytes | None
    length: int  # the bytes promised (files.getUploadURLExternal) or held


class SlackFiles(SlackApi):
    """The files half of :class:`~tests.fakes.slack_server.FakeSlack`."""

    uploads: list[Upload]

    def _init_files(self) -> None:
        self.uploads = []
        self._files: dict[str, StoredFile] = {}
        self._upload_tickets: dict[str, str] = {}  # upload URL ticket -> file id
        self._file_count = 0

    def _add_file_routes(self, app: web.Application) -> None:
        app.router.add_get("/files-pri/{owner}/{name}", self._handle_download)
        app.router.add_get("/files-pri/{owner}/download/{name}", self._handle_download)
        app.router.add_post("/upload/v1/{ticket}", self._handle_upload)

    # ------------------------------------------------------------------ control

    def add_file(self, *, name: str, content: bytes, mimetype: str = "text/plain",
                 user: str = "U0123ABCD") -> JSON:
        """A file a person shared (pass it to ``user_message(files=[...])``): its Slack
        file object, served at ``url_private`` to the bot token only."""
        if not self.port:
            raise RuntimeError("add_file needs the fake started: its URLs name the port")
        stored = self._new_file(name, mimetype, user, len(content))
        stored.content = content
        return dict(stored.info)

    def file_content(self, file_id: str) -> bytes | None:
        """The bytes of a file on the fake (None: not uploaded)."""
        return self._files[file_id].content

    # ------------------------------------------------------------------ downloads

    async def _handle_download(self, request: web.Request) -> web.Response:
        owner = request.match_info["owner"]
        file_id = owner.rpartition("-")[2]
        stored = self._files.get(file_id)
        if stored is None or stored.content is None or not owner.startswith(self.team_id):
            return web.Response(status=404, text="file not found")
        if request.headers.get("Authorization", "") != f"Bearer {self.bot_token}":
            return web.Response(text=SIGN_IN_PAGE, content_type="text/html")
        disposition = "attachment" if "/download/" in request.path else "inline"
        return web.Response(body=stored.content, content_type=stored.info["mimetype"],
                            headers={"Content-Disposition":
                                     f'{disposition}; filename="{stored.info["name"]}"'})

    # ------------------------------------------------------------------ uploads

    async def _api_files_getUploadURLExternal(self, params: JSON) -> JSON:
        self._need("files:write")
        filename = params.get("filename")
        if not isinstance(filename, str) or not filename:
            raise ApiError("invalid_arguments")
        try:
            length = int(params.get("length") or 0)
        except (TypeError, ValueError):
            raise ApiError("invalid_arguments") from None
        if length <= 0:
            raise ApiError("missing_argument")
        mimetype = mimetypes.guess_type(filename)[0] or "application/octet-stream"
        stored = self._new_file(filename, mimetype, self.bot_user_id, length)
        ticket = uuid.uuid4().hex
        self._upload_tickets[ticket] = stored.info["id"]
        return {"upload_url": f"{self.base_url}/upload/v1/{ticket}",
                "file_id": stored.info["id"]}

    async def _handle_upload(self, request: web.Request) -> web.Response:
        file_id = self._upload_tickets.get(request.match_info["ticket"])
        if file_id is None:
            return web.Response(status=404, text="upload ticket not found")
        if request.content_type == "multipart/form-data":
            form = await request.post()
            part = form.get("file") or form.get("filename")
            if isinstance(part, str):
                content = part.encode()
            elif isinstance(part, (bytes, bytearray)):
                content = bytes(part)
            elif part is not None:
                content = part.file.read()
            else:
                content = b""
        else:
            content = await request.read()
        stored = self._files[file_id]
        if len(content) != stored.length:
            return web.Response(status=400, text=f"length mismatch: {stored.length} bytes "
                                                 f"promised, {len(content)} sent")
        del self._upload_tickets[request.match_info["ticket"]]
        stored.content = content
        stored.info["size"] = len(content)
        return web.Response(text=f"OK - {len(content)}")

    async def _api_files_completeUploadExternal(self, params: JSON) -> JSON:
        self._need("files:write")
        listed = json_text(params.get("files"))
        if not isinstance(listed, list) or not listed:
            raise ApiError("invalid_arguments")
        chosen: list[tuple[StoredFile, str | None]] = []
        for item in listed:
            stored = self._files.get(str(item.get("id"))) if isinstance(item, dict) else None
            if stored is None or stored.content is None:
                raise ApiError("file_not_found")
            chosen.append((stored, item.get("title")))
        channel_ids = [str(params["channel_id"])] if params.get("channel_id") else [
            c for c in str(params.get("channels") or "").split(",") if c]
        rooms = [self._conversation({"channel": c}) for c in channel_ids]
        for room in rooms:
            if not room.member:
                raise ApiError("not_in_channel")
        thread_ts = str(params["thread_ts"]) if params.get("thread_ts") else None
        if thread_ts is not None and (len(rooms) != 1 or rooms[0].find(thread_ts) is None):
            raise ApiError("invalid_thread_ts")
        comment = params.get("initial_comment") or None
        for stored, title in chosen:
            stored.info["title"] = title or stored.info["name"]
        infos = [dict(stored.info) for stored, _ in chosen]
        shares: list[tuple[str | None, str | None]] = [
            (room.id, self._share(room, infos, thread_ts, comment)) for room in rooms]
        for channel, message_ts in shares or [(None, None)]:  # no channel: kept private
            for stored, title in chosen:
                self.uploads.append(Upload(stored.info["id"], channel, thread_ts,
                                           stored.info["name"], title, stored.content or b"",
                                           comment, message_ts))
        self._wake()
        return {"files": infos}

    async def _api_files_info(self, params: JSON) -> JSON:
        self._need("files:read")
        stored = self._files.get(str(params.get("file") or ""))
        if stored is None:
            raise ApiError("file_not_found")
        return {"file": dict(stored.info), "comments": [],
                "response_metadata": {"next_cursor": ""}}

    # ------------------------------------------------------------------ helpers

    def _share(self, room: Channel, infos: list[JSON], thread_ts: str | None,
               comment: str | None) -> str:
        """The message that shares the files: into the history, and pushed."""
        ts = self._next_ts()
        message = self._bot_message(ts, comment or "", thread_ts=thread_ts)
        message.update(subtype="file_share", files=infos, upload=True, display_as_bot=False)
        if not comment:
            message["blocks"] = []
        self._append(room, message)
        self._bot_messages[(room.id, ts)] = SlackMessage(
            ts, room.id, thread_ts, comment or "", None, self.bot_user_id, files=infos)
        if self._subscribed_to_messages(room):
            self._push_event({**message, "channel": room.id, "event_ts": ts,
                              "channel_type": room.kind})
        return ts

    def _new_file(self, name: str, mimetype: str, user: str, length: int) -> StoredFile:
        self._file_count += 1
        file_id = f"F0{self._file_count:08d}"
        owner = f"{self.team_id}-{file_id}"
        url = f"{self.base_url}/files-pri/{owner}/{name}"
        now = int(time.time())
        info: JSON = {
            "id": file_id, "created": now, "timestamp": now, "name": name, "title": name,
            "mimetype": mimetype, "filetype": name.rpartition(".")[2] if "." in name else "",
            "pretty_type": mimetype, "user": user, "user_team": self.team_id,
            "editable": False, "size": length, "mode": "hosted", "is_external": False,
            "external_type": "", "is_public": False, "public_url_shared": False,
            "display_as_bot": False, "username": "",
            "url_private": url,
            "url_private_download": f"{self.base_url}/files-pri/{owner}/download/{name}",
            "permalink": f"https://{self.team_domain}.slack.com/files/{user}/{file_id}/{name}",
            "permalink_public": f"https://slack-files.com/{owner}-{uuid.uuid4().hex[:10]}",
            "channels": [], "groups": [], "ims": [], "comments_count": 0}
        stored = StoredFile(info, None, length)
        self._files[file_id] = stored
        return stored
