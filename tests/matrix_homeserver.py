"""A throwaway Synapse homeserver for the tests, started on demand, and a plain
client-server API client for the human on the other side of the Matrix adapter.

Synapse (``pip install matrix-synapse``) runs as a subprocess of the test process:
SQLite and the media store in a temporary directory (in /dev/shm where there is one),
one HTTP listener with only the client API on a free 127.0.0.1 port, no federation
(no federation listener, no outbound federation, no key servers), no registration
but through the shared secret, no URL previews, no presence, no stats; the rate
limits are far above what a test does, and :meth:`Homeserver.limit_messages` puts one
user under a tight one (Synapse's per-user override) to provoke ``M_LIMIT_EXCEEDED``.
It starts in about 5 s, so there is one per test session (one per xdist worker),
stopped with SIGTERM (SIGKILL when that is not enough) at the end; its log stays in
its directory until then and is shown when it does not start.

:class:`HumanClient` speaks the client-server API with aiohttp, not with matrix-nio,
so what the tests see does not depend on the library the adapter under test uses.

Fixtures (tests/conftest.py imports them):

- ``homeserver``: the running :class:`Homeserver`, one per test session;
- ``matrix_user``: registers a user of the test's own (``await matrix_user("alice")``)
  and returns a :class:`HumanClient` for them; names get a unique suffix, so no two
  tests share a user, and each test makes its own rooms.

Without Synapse the tests that ask for these skip, saying how to install it; with
``HOMING_REQUIRE_MATRIX=1`` (CI) they fail instead.

``python -m tests.matrix_homeserver`` starts one by hand and prints its URL and an
admin's access token until Ctrl-C.
"""

from __future__ import annotations

import asyncio
import base64
import ctypes
import hashlib
import hmac
import importlib.util
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import quote

import aiohttp
import pytest
import yaml
from yarl import URL

MISSING = ("Synapse is not installed: pip install matrix-synapse "
           "(or set HOMING_REQUIRE_MATRIX=1 to fail instead)")
SERVER_NAME = "homing.test"
START_ATTEMPTS = 5  # another process may take the free port between choosing and binding
#: far from the 5 s a start takes on an idle machine, for a loaded CI
START_TIMEOUT = 120.0
STOP_GRACE = 15.0
#: each action of a test user is far under these: only :meth:`Homeserver.limit_messages`
#: (or a test's own override) limits anyone
RELAXED = {"per_second": 10_000, "burst_count": 100_000}
RATE_LIMITS = {
    "rc_message": RELAXED,
    "rc_registration": RELAXED,
    "rc_login": {"address": RELAXED, "account": RELAXED, "failed_attempts": RELAXED},
    "rc_joins": {"local": RELAXED, "remote": RELAXED},
    "rc_joins_per_room": RELAXED,
    "rc_invites": {"per_room": RELAXED, "per_user": RELAXED, "per_issuer": RELAXED},
    "rc_room_creation": RELAXED,
    "rc_media_create": RELAXED,
    "rc_presence": {"per_user": RELAXED},
    "rc_profile": RELAXED,
    "rc_user_directory": RELAXED,
    "rc_3pid_validation": RELAXED,
    "rc_delayed_event_mgmt": RELAXED,
    "rc_reports": RELAXED,
    "rc_admin_redaction": RELAXED,
}
_LINUX_PR_SET_PDEATHSIG = 1


class HomeserverMissing(RuntimeError):
    """Synapse cannot be imported by the interpreter meant to run it."""


class MatrixError(Exception):
    """The homeserver answered a request with an error (the Matrix ``errcode`` and
    ``error``, and ``retry_after_ms`` for ``M_LIMIT_EXCEEDED``)."""

    def __init__(self, method: str, path: str, status: int, body: Mapping[str, Any]) -> None:
        self.status = status
        self.errcode = str(body.get("errcode", ""))
        self.error = str(body.get("error", ""))
        retry = body.get("retry_after_ms")
        self.retry_after_ms = int(retry) if isinstance(retry, int | float) else None
        self.body = dict(body)
        super().__init__(f"{method} {path}: {status} {self.errcode} {self.error}".rstrip())


@dataclass(frozen=True)
class Account:
    """A registered user and one logged-in device of theirs."""

    user_id: str
    access_token: str
    device_id: str
    password: str

    @property
    def localpart(self) -> str:
        return self.user_id[1:].split(":", 1)[0]


@dataclass(frozen=True)
class Message:
    """An ``m.room.message`` as a reader sees it: with its latest edit applied."""

    event_id: str
    sender: str
    #: the latest content: the ``m.new_content`` of the latest edit, else the original's
    content: Mapping[str, Any]
    #: the root of the thread it is in (``m.thread``), None in the main timeline
    thread_root: str | None
    #: the event it answers (``m.in_reply_to``), the thread's fallback included
    reply_to: str | None
    edited: bool
    event: Mapping[str, Any] = field(repr=False)

    @property
    def body(self) -> str:
        return str(self.content.get("body", ""))

    @property
    def msgtype(self) -> str:
        return str(self.content.get("msgtype", ""))

    @property
    def url(self) -> str | None:
        """The ``mxc://`` URI of a file, image, audio or video message."""
        url = self.content.get("url")
        return str(url) if url else None


@dataclass(frozen=True)
class Reaction:
    event_id: str
    sender: str
    key: str


@dataclass(frozen=True)
class Sync:
    """One ``/sync`` answer, the parts the tests look at (the rest in ``raw``)."""

    next_batch: str
    #: new timeline events by joined room, oldest first
    timeline: Mapping[str, list[Mapping[str, Any]]]
    #: rooms the user is invited to
    invited: frozenset[str]
    #: who is typing, by joined room, for the rooms whose typing changed
    typing: Mapping[str, frozenset[str]]
    raw: Mapping[str, Any] = field(repr=False)


# the homeserver ---------------------------------------------------------------------------


def find_python() -> str | None:
    """This interpreter when it can import Synapse (found without importing it), or None."""
    return sys.executable if importlib.util.find_spec("synapse") is not None else None


class Homeserver:
    """One Synapse in a directory of its own; ``start`` and ``stop`` it, or use it as a
    context manager. Its async methods open a connection of their own each time, so
    one server serves tests that each run in an event loop of their own.

    ``python`` is the interpreter that runs Synapse: this one by default, or one of a
    virtual environment of Synapse's own should its dependencies ever clash with ours.
    """

    def __init__(self, python: str | None = None, server_name: str = SERVER_NAME) -> None:
        found = python or find_python()
        if found is None:
            raise HomeserverMissing(MISSING)
        self.python = found
        self.server_name = server_name
        self.root: Path | None = None
        self.port = 0
        #: seconds the last start took (config written, server answering)
        self.start_seconds = 0.0
        self._process: subprocess.Popen[bytes] | None = None
        self._shared_secret = secrets.token_urlsafe(32)
        self._admin: Account | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        assert self.root is not None, "the homeserver is not started"
        return self.root / "homeserver.log"

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def start(self) -> None:
        began = time.monotonic()
        self.root = Path(tempfile.mkdtemp(prefix="homing-synapse-", dir=_scratch()))
        try:
            (self.root / "signing.key").write_text(_signing_key())
            for attempt in range(START_ATTEMPTS):
                self.port = _free_port()
                self._write_config()
                if self._run_until_ready():
                    break
                if attempt == START_ATTEMPTS - 1:
                    raise RuntimeError(f"Synapse could not bind a port:\n{self.log_tail()}")
        except BaseException:
            self.stop()
            raise
        self.start_seconds = time.monotonic() - began

    def restart(self) -> None:
        """Stop the server and start it again on its port and database, as an upgrade
        would: what is only in its memory (the transaction cache) is gone."""
        self._terminate()
        if not self._run_until_ready():
            raise RuntimeError(f"Synapse did not start again on {self.port}:\n"
                               f"{self.log_tail()}")

    def stop(self) -> None:
        """Stop the server and remove its directory."""
        if self.root is None:
            return
        try:
            self._terminate()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)
            self.root = None
            self._admin = None

    def log_tail(self, chars: int = 4000) -> str:
        if self.root is None or not self.log_path.exists():
            return ""
        return self.log_path.read_text(errors="replace")[-chars:]

    def __enter__(self) -> Homeserver:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _write_config(self) -> None:
        assert self.root is not None
        config = {
            "server_name": self.server_name,
            "pid_file": str(self.root / "homeserver.pid"),
            "public_baseurl": f"{self.url}/",
            "listeners": [{
                "port": self.port, "bind_addresses": ["127.0.0.1"], "type": "http",
                "tls": False, "x_forwarded": False,
                "resources": [{"names": ["client"], "compress": False}],
            }],
            "database": {"name": "sqlite3",
                         "args": {"database": str(self.root / "homeserver.db")}},
            "media_store_path": str(self.root / "media"),
            "max_upload_size": "50M",
            "signing_key_path": str(self.root / "signing.key"),
            "registration_shared_secret": self._shared_secret,
            "macaroon_secret_key": secrets.token_urlsafe(32),
            "form_secret": secrets.token_urlsafe(32),
            "enable_registration": False,
            # a password hash takes 250 ms at the default 12 rounds, 2 ms at 4 (bcrypt's
            # least): two users a test
            "bcrypt_rounds": 4,
            "report_stats": False,
            "enable_metrics": False,
            "url_preview_enabled": False,
            "presence": {"enabled": False},
            # nobody to federate with: no server is trusted, reached or sent to
            "trusted_key_servers": [],
            "suppress_key_server_warning": True,
            "federation_domain_whitelist": [],
            "federation_sender_instances": [],
            **RATE_LIMITS,
        }
        (self.root / "homeserver.yaml").write_text(yaml.safe_dump(config))

    def _run_until_ready(self) -> bool:
        """Start Synapse and wait for its client API; False when the port was taken."""
        assert self.root is not None
        with self.log_path.open("ab") as log:
            attempt_began = log.tell()  # an earlier attempt's lines are not this one's
            self._process = subprocess.Popen(
                [self.python, "-m", "synapse.app.homeserver",
                 "-c", str(self.root / "homeserver.yaml")],
                cwd=self.root, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                # the death signal follows the thread that started the child: one from
                # asyncio.to_thread (a restart in a test) would die with that thread
                preexec_fn=_die_with_parent
                if threading.current_thread() is threading.main_thread() else None)
        deadline = time.monotonic() + START_TIMEOUT
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        while True:
            if self._process.poll() is not None:
                self._process = None
                with self.log_path.open("rb") as log:
                    log.seek(attempt_began)
                    if b"Address already in use" in log.read():
                        return False
                raise RuntimeError(f"Synapse exited while starting:\n{self.log_tail()}")
            try:
                with opener.open(f"{self.url}/_matrix/client/versions", timeout=5) as answer:
                    if answer.status == 200:
                        return True
            except (urllib.error.URLError, OSError):
                pass  # not listening yet
            if time.monotonic() > deadline:
                self._terminate()
                raise RuntimeError(f"Synapse did not answer within {START_TIMEOUT:.0f} s:\n"
                                   f"{self.log_tail()}")
            time.sleep(0.05)

    def _terminate(self) -> None:
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(STOP_GRACE)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    # the admin's side ---------------------------------------------------------------------

    async def register(self, username: str, password: str | None = None, *,
                       admin: bool = False) -> Account:
        """A new user, registered through the shared secret (the way ``register_new_
        matrix_user`` does: a nonce, then an HMAC-SHA1 of nonce, name, password and
        admin flag), with an access token and a device of their own."""
        password = password or secrets.token_urlsafe(12)
        path = "/_synapse/admin/v1/register"
        async with aiohttp.ClientSession() as http:
            nonce = (await _call(http, "GET", self.url + path))["nonce"]
            mac = hmac.new(self._shared_secret.encode(), digestmod=hashlib.sha1)
            mac.update(b"\0".join([nonce.encode(), username.encode(), password.encode(),
                                   b"admin" if admin else b"notadmin"]))
            body = {"nonce": nonce, "username": username, "password": password,
                    "admin": admin, "mac": mac.hexdigest()}
            answer = await _call(http, "POST", self.url + path, json=body)
        return Account(answer["user_id"], answer["access_token"], answer["device_id"],
                       password)

    async def login(self, account: Account, *, device_id: str | None = None) -> Account:
        """Another access token for the account: on ``device_id`` (the same device
        logged in again, as after a restart of a client that lost its token), else
        on a new device."""
        body: dict[str, Any] = {
            "type": "m.login.password", "password": account.password,
            "identifier": {"type": "m.id.user", "user": account.localpart}}
        if device_id is not None:
            body["device_id"] = device_id
        async with aiohttp.ClientSession() as http:
            answer = await _call(http, "POST", f"{self.url}/_matrix/client/v3/login",
                                 json=body)
        return Account(answer["user_id"], answer["access_token"], answer["device_id"],
                       account.password)

    async def admin(self) -> Account:
        """The server admin (registered on first use)."""
        if self._admin is None:
            self._admin = await self.register(f"admin-{uuid.uuid4().hex[:8]}", admin=True)
        return self._admin

    async def limit_messages(self, user_id: str, *, per_second: int = 1,
                             burst_count: int = 1) -> None:
        """Put the user's event sending under a rate limit of their own (Synapse's admin
        API ``override_ratelimit``; whole numbers only): sends past ``burst_count``,
        refilled at ``per_second``, get 429 ``M_LIMIT_EXCEEDED`` with ``retry_after_ms``.
        Both 0 exempts the user from every rate limit instead."""
        admin = await self.admin()
        async with aiohttp.ClientSession() as http:
            await _call(http, "POST",
                        f"{self.url}/_synapse/admin/v1/users/{_q(user_id)}/override_ratelimit",
                        json={"messages_per_second": per_second, "burst_count": burst_count},
                        token=admin.access_token)


# the human's client -----------------------------------------------------------------------


class HumanClient:
    """The person on the other side: a plain client-server API client with one
    account's access token, on an aiohttp session the caller owns."""

    def __init__(self, http: aiohttp.ClientSession, base_url: str, account: Account) -> None:
        self.http = http
        self.base_url = base_url
        self.account = account

    @property
    def user_id(self) -> str:
        return self.account.user_id

    # rooms

    async def create_room(self, *, invite: Sequence[str] = (),
                          is_direct: bool = False, name: str | None = None) -> str:
        """A private room with ``invite`` invited; ``is_direct`` makes it a DM the way
        Element does (the invites flagged ``is_direct``, the room in the creator's
        ``m.direct``)."""
        body: dict[str, Any] = {"preset": "trusted_private_chat" if is_direct
                                else "private_chat",
                                "invite": list(invite), "is_direct": is_direct}
        if name is not None:
            body["name"] = name
        room_id = str((await self._request("POST", "/_matrix/client/v3/createRoom",
                                           json=body))["room_id"])
        if is_direct:
            await self._mark_direct(room_id, invite)
        return room_id

    async def invite(self, room_id: str, user_id: str) -> None:
        await self._request("POST", f"/_matrix/client/v3/rooms/{_q(room_id)}/invite",
                            json={"user_id": user_id})

    async def join(self, room_id: str) -> None:
        await self._request("POST", f"/_matrix/client/v3/join/{_q(room_id)}", json={})

    async def leave(self, room_id: str) -> None:
        await self._request("POST", f"/_matrix/client/v3/rooms/{_q(room_id)}/leave", json={})

    async def _mark_direct(self, room_id: str, invited: Sequence[str]) -> None:
        path = f"/_matrix/client/v3/user/{_q(self.user_id)}/account_data/m.direct"
        try:
            direct: dict[str, list[str]] = await self._request("GET", path)
        except MatrixError as exc:
            if exc.errcode != "M_NOT_FOUND":
                raise
            direct = {}
        for user_id in invited:
            direct.setdefault(user_id, []).append(room_id)
        await self._request("PUT", path, json=direct)

    # sending

    async def send_event(self, room_id: str, event_type: str, content: Mapping[str, Any], *,
                         txn_id: str | None = None) -> str:
        """Send a room event; its event ID. The same ``txn_id`` again (from this device)
        is the same send: Synapse answers with the first event's ID."""
        txn_id = txn_id or uuid.uuid4().hex
        path = (f"/_matrix/client/v3/rooms/{_q(room_id)}/send/{_q(event_type)}/"
                f"{_q(txn_id)}")
        return str((await self._request("PUT", path, json=dict(content)))["event_id"])

    async def send_text(self, room_id: str, body: str, *, txn_id: str | None = None) -> str:
        return await self.send_event(room_id, "m.room.message",
                                     {"msgtype": "m.text", "body": body}, txn_id=txn_id)

    async def reply(self, room_id: str, event_id: str, body: str) -> str:
        """A reply in the main timeline (``m.in_reply_to``)."""
        return await self.send_event(room_id, "m.room.message", {
            "msgtype": "m.text", "body": body,
            "m.relates_to": {"m.in_reply_to": {"event_id": event_id}}})

    async def reply_in_thread(self, room_id: str, thread_root: str, body: str, *,
                              reply_to: str | None = None) -> str:
        """A message in the thread of ``thread_root``, as Element sends it: an
        ``m.thread`` relation with, for clients without threads, a reply to the
        thread's latest message (``is_falling_back``), or a real reply to ``reply_to``."""
        fallback = reply_to is None
        if reply_to is None:
            latest = await self.thread(room_id, thread_root)
            reply_to = latest[-1].event_id if latest else thread_root
        return await self.send_event(room_id, "m.room.message", {
            "msgtype": "m.text", "body": body,
            "m.relates_to": {"rel_type": "m.thread", "event_id": thread_root,
                             "is_falling_back": fallback,
                             "m.in_reply_to": {"event_id": reply_to}}})

    async def edit(self, room_id: str, event_id: str, body: str) -> str:
        """Replace the text of one of this user's messages (``m.replace``)."""
        return await self.send_event(room_id, "m.room.message", {
            "msgtype": "m.text", "body": f"* {body}",
            "m.new_content": {"msgtype": "m.text", "body": body},
            "m.relates_to": {"rel_type": "m.replace", "event_id": event_id}})

    async def react(self, room_id: str, event_id: str, key: str) -> str:
        return await self.send_event(room_id, "m.reaction", {
            "m.relates_to": {"rel_type": "m.annotation", "event_id": event_id, "key": key}})

    async def set_typing(self, room_id: str, typing: bool = True,
                         timeout_ms: int = 30_000) -> None:
        body: dict[str, Any] = {"typing": typing}
        if typing:
            body["timeout"] = timeout_ms
        await self._request(
            "PUT", f"/_matrix/client/v3/rooms/{_q(room_id)}/typing/{_q(self.user_id)}",
            json=body)

    # media

    async def upload(self, data: bytes, *, filename: str, content_type: str) -> str:
        """Store a file in the media repository; its ``mxc://`` URI."""
        answer = await self._request("POST", "/_matrix/media/v3/upload", data=data,
                                     params={"filename": filename},
                                     headers={"Content-Type": content_type})
        return str(answer["content_uri"])

    async def download(self, mxc: str) -> bytes:
        """A file of the media repository, through the authenticated media API."""
        server_and_id = mxc.removeprefix("mxc://")
        async with self.http.get(
                URL(f"{self.base_url}/_matrix/client/v1/media/download/{server_and_id}",
                    encoded=True),
                headers=self._auth()) as answer:
            if answer.status != 200:
                raise MatrixError("GET", server_and_id, answer.status,
                                  await _json_or_empty(answer))
            return await answer.read()

    async def send_file(self, room_id: str, data: bytes, *, filename: str,
                        content_type: str) -> str:
        """Upload and send a file: ``m.image``, ``m.audio`` or ``m.video`` by its
        content type, else ``m.file``."""
        url = await self.upload(data, filename=filename, content_type=content_type)
        kind = content_type.split("/", 1)[0]
        msgtype = f"m.{kind}" if kind in ("image", "audio", "video") else "m.file"
        return await self.send_event(room_id, "m.room.message", {
            "msgtype": msgtype, "body": filename, "filename": filename, "url": url,
            "info": {"mimetype": content_type, "size": len(data)}})

    # reading

    async def events(self, room_id: str, *, direction: Literal["b", "f"] = "f",
                     page_size: int = 50) -> list[dict[str, Any]]:
        """Every event of the room's timeline the user can see, oldest first
        (``direction="f"``) or newest first (``"b"``), page by page from
        ``/rooms/{id}/messages``."""
        path = f"/_matrix/client/v3/rooms/{_q(room_id)}/messages"
        params: dict[str, str] = {"dir": direction, "limit": str(page_size)}
        found: list[dict[str, Any]] = []
        while True:
            page = await self._request("GET", path, params=params)
            found += page.get("chunk", [])
            if not page.get("chunk") or "end" not in page:
                return found
            params["from"] = page["end"]

    async def messages(self, room_id: str, *,
                       direction: Literal["b", "f"] = "f") -> list[Message]:
        """The room's messages as Element shows them: each with its latest edit applied
        (the edits themselves not listed), threads' messages included."""
        return [message for event in await self.events(room_id, direction=direction)
                if (message := _message(event)) is not None]

    async def thread(self, room_id: str, thread_root: str) -> list[Message]:
        """The messages the server counts in the thread (its ``m.thread`` relations),
        oldest first, edits applied; the root not included."""
        return [message for event in await self._relations(room_id, thread_root, "m.thread")
                if (message := _message(event)) is not None]

    async def reactions(self, room_id: str, event_id: str) -> list[Reaction]:
        """The reactions (``m.annotation``) to an event, oldest first."""
        return [Reaction(event["event_id"], event["sender"],
                         event["content"]["m.relates_to"]["key"])
                for event in await self._relations(room_id, event_id,
                                                   "m.annotation/m.reaction")]

    async def _relations(self, room_id: str, event_id: str, relation: str
                         ) -> list[dict[str, Any]]:
        path = (f"/_matrix/client/v1/rooms/{_q(room_id)}/relations/{_q(event_id)}/"
                f"{relation}")
        params = {"dir": "f", "limit": "50"}
        found: list[dict[str, Any]] = []
        while True:
            page = await self._request("GET", path, params=params)
            found += page.get("chunk", [])
            if not page.get("next_batch"):
                return found
            params["from"] = page["next_batch"]

    async def sync(self, since: str | None = None, *, timeout_ms: int = 0) -> Sync:
        """One ``/sync``: everything (since ``since``), waiting up to ``timeout_ms`` for
        something new when there is a ``since``."""
        params = {"timeout": str(timeout_ms)}
        if since is not None:
            params["since"] = since
        raw = await self._request("GET", "/_matrix/client/v3/sync", params=params,
                                  timeout=timeout_ms / 1000 + 30)
        joined = raw.get("rooms", {}).get("join", {})
        typing: dict[str, frozenset[str]] = {}
        for room_id, room in joined.items():
            for event in room.get("ephemeral", {}).get("events", []):
                if event.get("type") == "m.typing":
                    typing[room_id] = frozenset(event["content"].get("user_ids", []))
        return Sync(
            next_batch=raw["next_batch"],
            timeline={room_id: room.get("timeline", {}).get("events", [])
                      for room_id, room in joined.items()},
            invited=frozenset(raw.get("rooms", {}).get("invite", {})),
            typing=typing, raw=raw)

    async def wait_for_message(self, room_id: str, match: Callable[[Message], bool], *,
                               timeout: float = 30) -> Message:
        """The room's first message (oldest first, edits applied) that matches; when
        there is none yet, each new event in the room (seen through ``/sync``) is a
        reason to look again, until ``timeout``."""
        deadline = time.monotonic() + timeout
        position = await self.sync()  # before looking: nothing after the look is missed
        while True:
            found = next((m for m in await self.messages(room_id) if match(m)), None)
            if found is not None:
                return found
            while True:  # until something new happens in the room
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"timed out waiting for a matching message in "
                                         f"{room_id}")
                position = await self.sync(position.next_batch,
                                           timeout_ms=int(min(left, 10) * 1000))
                if position.timeline.get(room_id):
                    break

    async def wait_for_typing(self, room_id: str, match: Callable[[frozenset[str]], bool],
                              *, timeout: float = 30) -> frozenset[str]:
        """Who is typing in the room, once that matches (e.g. ``lambda who: bot in who``)."""
        deadline = time.monotonic() + timeout
        position = await self.sync()
        typing = position.typing.get(room_id, frozenset())
        while not match(typing):
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"timed out waiting for typing in {room_id}: "
                                     f"{sorted(typing)} are typing")
            position = await self.sync(position.next_batch,
                                       timeout_ms=int(min(left, 10) * 1000))
            typing = position.typing.get(room_id, typing)
        return typing

    # the wire

    def _auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.account.access_token}"}

    async def _request(self, method: str, path: str, *, json: Any = None,
                       data: bytes | None = None, params: Mapping[str, str] | None = None,
                       headers: Mapping[str, str] | None = None,
                       timeout: float = 30) -> Any:
        return await _call(self.http, method, self.base_url + path, json=json, data=data,
                           params=params, headers=headers,
                           token=self.account.access_token, timeout=timeout)


async def _call(http: aiohttp.ClientSession, method: str, url: str, *, json: Any = None,
                data: bytes | None = None, params: Mapping[str, str] | None = None,
                headers: Mapping[str, str] | None = None, token: str | None = None,
                timeout: float = 30) -> Any:
    """One request; its JSON answer, or :class:`MatrixError` for an error status."""
    all_headers = dict(headers or {})
    if token is not None:
        all_headers["Authorization"] = f"Bearer {token}"
    target = URL(url, encoded=True)
    if params:
        target = target.with_query(params)
    async with http.request(method, target, json=json, data=data, headers=all_headers,
                            timeout=aiohttp.ClientTimeout(total=timeout)) as answer:
        body = await _json_or_empty(answer)
        if answer.status >= 400:
            raise MatrixError(method, target.path, answer.status, body)
        return body


async def _json_or_empty(answer: aiohttp.ClientResponse) -> dict[str, Any]:
    try:
        body = await answer.json(content_type=None)
    except (ValueError, aiohttp.ContentTypeError):
        return {}
    return body if isinstance(body, dict) else {}


def _message(event: Mapping[str, Any]) -> Message | None:
    """The message an event is, edits applied; None for anything else (state, reactions,
    the edits themselves, redacted messages)."""
    content = event.get("content", {})
    if event.get("type") != "m.room.message" or "msgtype" not in content:
        return None
    relates = content.get("m.relates_to", {})
    if relates.get("rel_type") == "m.replace":
        return None
    # Synapse bundles the latest edit (by the same sender) with the event it replaces
    edit = event.get("unsigned", {}).get("m.relations", {}).get("m.replace")
    new_content = edit.get("content", {}).get("m.new_content") if edit else None
    return Message(
        event_id=event["event_id"], sender=event["sender"],
        content=new_content if new_content is not None else content,
        thread_root=relates.get("event_id") if relates.get("rel_type") == "m.thread" else None,
        reply_to=relates.get("m.in_reply_to", {}).get("event_id"),
        edited=new_content is not None, event=event)


def _q(part: str) -> str:
    """A path segment, percent-encoded: room IDs hold ``!`` and ``:``, event IDs ``$``."""
    return quote(part, safe="")


def _signing_key() -> str:
    """A fresh ed25519 signing key in Synapse's file format (``ed25519 <version> <seed>``,
    the seed in unpadded base64), written without Synapse's own tools."""
    seed = base64.b64encode(secrets.token_bytes(32)).decode().rstrip("=")
    return f"ed25519 a_test {seed}\n"


def _die_with_parent() -> None:
    """In the child before Synapse runs: on Linux it is killed when the test process
    dies, so a worker that is killed (kill -9, a crash) leaves no server behind."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_LINUX_PR_SET_PDEATHSIG, signal.SIGKILL)


def _scratch() -> str | None:
    """Memory when there is a tmpfs for it, as tests/pg_cluster.py does: Synapse's
    SQLite commits every event."""
    shm = Path("/dev/shm")
    return str(shm) if shm.is_dir() and os.access(shm, os.W_OK | os.X_OK) else None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# fixtures ---------------------------------------------------------------------------------


def start_homeserver() -> Homeserver:
    """A started homeserver; without Synapse, skip the test asking for it (fail it when
    HOMING_REQUIRE_MATRIX=1, as in CI)."""
    try:
        server = Homeserver()
    except HomeserverMissing as exc:
        if os.environ.get("HOMING_REQUIRE_MATRIX") == "1":
            pytest.fail(str(exc), pytrace=False)
        pytest.skip(str(exc))
    server.start()
    return server


@pytest.fixture(scope="session")
def homeserver() -> Iterator[Homeserver]:
    """A Synapse of this test session's own."""
    server = start_homeserver()
    try:
        yield server
    finally:
        server.stop()


MakeUser = Callable[[str], Awaitable[HumanClient]]


@pytest.fixture
async def matrix_user(homeserver: Homeserver) -> AsyncIterator[MakeUser]:
    """Registers users of this test's own: ``alice = await matrix_user("alice")`` is a
    :class:`HumanClient` for ``@alice-<unique>:homing.test``."""
    async with aiohttp.ClientSession() as http:
        async def make(name: str) -> HumanClient:
            account = await homeserver.register(f"{name}-{uuid.uuid4().hex[:8]}")
            return HumanClient(http, homeserver.url, account)

        yield make


async def _print_admin(server: Homeserver) -> None:
    admin = await server.admin()
    print(f"{server.url}  server_name {server.server_name}  "
          f"(started in {server.start_seconds:.2f} s; Ctrl-C stops it)\n"
          f"admin {admin.user_id}  password {admin.password}\n"
          f"access token {admin.access_token}\n"
          f"log {server.log_path}", flush=True)


if __name__ == "__main__":
    # SIGTERM (kill, a script's cleanup) stops the server as Ctrl-C does
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    with Homeserver() as running:
        asyncio.run(_print_admin(running))
        try:
            signal.pause()
        except KeyboardInterrupt:
            pass
