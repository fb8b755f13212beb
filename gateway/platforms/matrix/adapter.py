"""Matrix, through matrix-nio: ``/sync`` in, the client-server API out.

The sync loop asks the homeserver for what happened since its ``since`` token; every
person's message of a batch is handed to the core (``host.receive``, by its event id as
the platform id), and the batch's ``next_batch`` token is saved (``host.cursors``) only
once every one of them is journaled. A crash at any moment makes the next life sync
from an earlier token, never a later one; the journal knows the messages it has by
their event ids, so each is handled once. What was said while the daemon was down comes
in the first sync after it starts (a gap longer than a sync's timeline is read back
with ``/messages``). On the very first start there is no token: one sync with no
timeline takes the invites and the rooms' state and saves its token, so the rooms'
history is never replayed — only what comes after is answered.

Invites are taken from allowed users only (into ``allowed_rooms`` when that is set);
any other is rejected, and logged. End-to-end encrypted rooms are not supported: a room
with ``m.room.encryption`` state (or an ``m.room.encrypted`` event) is told so once, in
plain text, and nothing of it is read.

Sending never needs the sync: each message goes to the route it is given — its room,
and its thread (``m.thread``) — in order per room, with a transaction id derived from
the gateway's dedupe key so a send made again posts once, each ``M_LIMIT_EXCEEDED``
waited out (``api.py``).
"""

from __future__ import annotations

import asyncio
import io
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog
from nio import (  # type: ignore[import-untyped]
    AsyncClient,
    AsyncClientConfig,
    JoinedMembersResponse,
    JoinResponse,
    LoginResponse,
    RoomContextResponse,
    RoomGetEventResponse,
    RoomLeaveResponse,
    RoomMessagesResponse,
    RoomRedactResponse,
    RoomSendResponse,
    RoomTypingResponse,
    SyncResponse,
    UploadResponse,
    WhoamiResponse,
)
from nio.api import MessageDirection  # type: ignore[import-untyped]

from gateway.contract.adapter import Adapter, LiveReply
from gateway.formatting.matrix_html import message_parts
from gateway.inbound.files import FILES, FileRefused, IncomingFile
from gateway.platforms.flow import FlowControl, RateLimits
from gateway.platforms.matrix import content
from gateway.platforms.matrix.api import NOT_ALLOWED, PATIENT, MatrixApi, MatrixRefused
from gateway.platforms.matrix.approvals import (
    approval_id_in,
    outcome_markdown,
    request_markdown,
)
from gateway.platforms.matrix.files import download, file_content, mime_of
from gateway.platforms.matrix.preview import MatrixPreview
from gateway.platforms.matrix.routes import REACTIONS, Reaction, reaction, route_of, spoken
from gateway.platforms.matrix.settings import MatrixSettings
from gateway.platforms.matrix.spec import PLATFORM
from gateway.retry import RetryPolicy
from gateway.words.events import MessageEvent, MessageKind, NoticeInfo, SendResult
from gateway.words.route import Route

if TYPE_CHECKING:
    from gateway.cluster.instances import Lease
    from gateway.contract.approval import ApprovalRecord, Decision
    from gateway.contract.host import AdapterHost
    from gateway.platforms.context import PlatformContext
    from gateway.words.events import Taken

log = structlog.get_logger(__name__)

#: a part after the first: a failure would make the whole message go again
LATER_PART = PATIENT.times(3)
#: logging in, until it works
CONNECT = RetryPolicy((1.0, 2.0, 5.0, 10.0, 30.0, 60.0))
#: a sync that failed (or whose batch was not all journaled) is asked again after this
SYNC_RETRY = RetryPolicy((0.5, 1.0, 2.0, 5.0, 10.0, 30.0))
#: typing is a sign of life: asked once, never waited for
_ONCE = RetryPolicy((0.0,), attempts=1)
#: how long the homeserver holds a sync open when there is nothing new
SYNC_TIMEOUT_MS = 30_000
#: the events a sync brings per room before it says ``limited`` (then read back)
TIMELINE_LIMIT = 100
#: the most events read back into one room's gap
READ_BACK_LIMIT = 1000
_LIVE_FILTER: dict[str, Any] = {
    "presence": {"not_types": ["*"]}, "account_data": {"not_types": ["*"]},
    "room": {"timeline": {"limit": TIMELINE_LIMIT}, "ephemeral": {"not_types": ["*"]},
             "account_data": {"not_types": ["*"]}}}
#: the first start: the rooms' state and the invites, none of their history
_FIRST_FILTER: dict[str, Any] = {**_LIVE_FILTER, "room": {**_LIVE_FILTER["room"],
                                                           "timeline": {"limit": 0}}}
_REMEMBERED = 20_000
ENCRYPTED_NOTICE = ("This room is end-to-end encrypted, and homing does not support "
                    "encrypted rooms: it cannot read what is said here and will not "
                    "answer. Talk to it in a room without encryption.")


def make_adapter(settings: MatrixSettings, context: PlatformContext) -> MatrixAdapter:
    """The registry's way in (gateway/platforms/matrix/spec.py)."""
    return MatrixAdapter(settings, leases=context.leases)


class MatrixAdapter(Adapter):
    platform = "matrix"
    message_limit = PLATFORM.capabilities.message_limit

    def __init__(self, settings: MatrixSettings, *,
                 leases: Callable[[str], Lease] | None = None) -> None:
        """``leases``: on a shared store, the lease of a name, among the instances."""
        if not settings.homeserver or not settings.user_id:
            raise ValueError("platforms.matrix.homeserver and user_id are required when "
                             "Matrix is enabled")
        if settings.access_token is None and settings.password is None:
            raise ValueError("platforms.matrix.access_token (or password) is required")
        self.settings = settings
        self.homeserver = settings.homeserver
        self.user_id = settings.user_id
        # Synapse lets a user send a burst of messages, then a few a second: this keeps
        # each room's order, and a 429 is waited out per room (api.py)
        self.flow = FlowControl(RateLimits(per_second=10, group_per_minute=120))
        self.api = MatrixApi(on_rate_limit=self.flow.pause)
        self.client = AsyncClient(
            self.homeserver, self.user_id, device_id=settings.device_id,
            config=AsyncClientConfig(max_limit_exceeded=0, max_timeouts=0,
                                     request_timeout=60, store_sync_tokens=False,
                                     encryption_enabled=False))
        self._host: AdapterHost | None = None
        self._task: asyncio.Task[None] | None = None
        self._sync_task: asyncio.Task[None] | None = None
        self._polling: asyncio.Task[SyncResponse | Any] | None = None
        self._ready = asyncio.Event()
        self._logged_in = False
        self._gave_up = False
        self._receiving = True
        self._syncing = False
        #: rooms told they are encrypted (this life; the store keeps it across lives)
        self._encrypted: set[str] = set()
        #: approval request event id -> approval id
        self._requests: OrderedDict[str, str] = OrderedDict()
        self._reactions: OrderedDict[str, None] = OrderedDict()
        self._typing: set[str] = set()
        #: on a shared store: the sync runs on the instance holding this lease; every
        #: instance sends
        self.poll_lease = leases(self.poll_lease_name) if leases is not None else None

    # lifecycle ---------------------------------------------------------------

    @property
    def poll_lease_name(self) -> str:
        """One sync loop per account: two would take each message twice."""
        return f"matrix:{self.user_id}"

    @property
    def _cursor(self) -> str:
        return f"since:{self.user_id}"

    @property
    def connected(self) -> bool:
        return self._ready.is_set() and not self._gave_up

    @property
    def syncing_here(self) -> bool:
        """Whether this instance runs the account's sync loop (or is the only one)."""
        return self._syncing


    async def connect(self, runner: AdapterHost) -> None:
        """Start in the background: a homeserver outage must not hold up the daemon."""
        self._host = runner
        self._task = asyncio.create_task(self._run(), name="matrix")

    async def _run(self) -> None:
        try:
            if not await self._login():
                self._gave_up = True
                return
            self._logged_in = True
            if self.poll_lease is None:
                await self._sync_forever()
                return
            self._ready.set()
            if self._host is not None:
                self._host.platform_connected(self.platform)
            self.poll_lease.watch(self._sync_here, self._sync_elsewhere)
        except asyncio.CancelledError:
            raise
        except Exception:
            self._gave_up = True
            log.exception("matrix_stopped")

    async def _login(self) -> bool:
        settings = self.settings
        for attempt in CONNECT.tries():
            try:
                if settings.access_token is not None:
                    self.client.access_token = settings.access_token.get_secret_value()
                    me = await self.api.call("whoami", self.client.whoami, WhoamiResponse)
                    if me.user_id != self.user_id:
                        log.error("matrix_login_failed", user_id=self.user_id,
                                  token_user=me.user_id,
                                  hint="the access token is another user's: check "
                                       "platforms.matrix.user_id and access_token")
                        return False
                    if me.device_id and me.device_id != settings.device_id:
                        log.warning("matrix_device_differs", device_id=me.device_id,
                                    configured=settings.device_id,
                                    hint="the token's device is used; set "
                                         "platforms.matrix.device_id to it")
                    self.client.device_id = me.device_id or settings.device_id
                else:
                    assert settings.password is not None
                    await self.api.call(
                        "login", lambda: self.client.login(
                            settings.password.get_secret_value() if settings.password
                            else "", device_name="homing"), LoginResponse)
                log.info("matrix_logged_in", user_id=self.user_id,
                         device_id=self.client.device_id, homeserver=self.homeserver)
                return True
            except MatrixRefused as exc:
                if exc.errcode in NOT_ALLOWED or exc.errcode == "M_FORBIDDEN":
                    log.error("matrix_login_failed", error=str(exc),
                              hint="check platforms.matrix.access_token (homing setup "
                                   "makes one) or password; Matrix stays offline")
                    return False
                delay = CONNECT.delay(attempt)
                log.warning("matrix_login_retry", error=str(exc), retry_in=delay)
                await asyncio.sleep(delay)
        return False

    async def _sync_here(self, epoch: int) -> None:
        log.info("matrix_sync_here", lease=self.poll_lease_name, lease_epoch=epoch)
        self._receiving = True
        self._sync_task = asyncio.create_task(self._sync_forever(), name="matrix-sync")

    async def _sync_elsewhere(self) -> None:
        task, self._sync_task = self._sync_task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def wait_connected(self, timeout: float | None = None) -> None:
        """Until the first sync is through (or, on a shared store, the bot is logged
        in); raises when the adapter gave up."""
        async with asyncio.timeout(timeout):
            ready = asyncio.ensure_future(self._ready.wait())
            waits = {ready} | ({self._task} if self._task is not None else set())
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            if not ready.done() and self._gave_up:
                ready.cancel()
                raise ConnectionError("matrix could not connect; see the log")
            await ready

    async def stop_receiving(self) -> None:
        """Take nothing new: the sync in flight is dropped (its token never saved), so
        the next life syncs from the last batch that was all journaled."""
        self._receiving = False
        if self._polling is not None:
            self._polling.cancel()

    async def disconnect(self) -> None:
        await self.stop_receiving()
        if self.poll_lease is not None:
            await self.poll_lease.stop()
        for task in (self._sync_task, self._task):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        self._ready.clear()
        await self.client.close()

    # inbound -----------------------------------------------------------------

    async def _sync_forever(self) -> None:
        self._syncing = True
        try:
            await self._sync_loop()
        finally:
            self._syncing = False

    async def _sync_loop(self) -> None:
        host = self._host
        assert host is not None
        since = await host.cursors.get(self.platform, self._cursor)
        failures = 0
        if since is None:
            answer = await self._sync(None, _FIRST_FILTER, timeout=0)
            while answer is None:
                await SYNC_RETRY.pause(failures)
                failures += 1
                answer = await self._sync(None, _FIRST_FILTER, timeout=0)
            await self._take_batch(answer, since=None)
            since = answer.next_batch
            await host.cursors.put(self.platform, self._cursor, since)
            log.info("matrix_first_start", hint="what was said before this start is not "
                                                "read; everything after it is")
        self._ready.set()
        host.platform_connected(self.platform)
        failures = 0
        while self._receiving:
            answer = await self._sync(since, _LIVE_FILTER, timeout=SYNC_TIMEOUT_MS)
            if answer is not None and await self._take_batch(answer, since=since):
                if answer.next_batch != since:
                    since = answer.next_batch
                    await host.cursors.put(self.platform, self._cursor, since)
                failures = 0
                continue
            if not self._receiving:
                break
            await SYNC_RETRY.pause(failures)
            failures += 1

    async def _sync(self, since: str | None, sync_filter: dict[str, Any], *,
                    timeout: int) -> SyncResponse | None:
        """One sync; None when it failed (logged) or the gateway stopped receiving."""
        self._polling = asyncio.ensure_future(self.client.sync(
            timeout=timeout, sync_filter=sync_filter, since=since, full_state=None))
        try:
            answer = await self._polling
        except asyncio.CancelledError:
            if self._receiving:
                raise
            return None
        except Exception as exc:
            log.warning("matrix_sync_failed", error=str(exc) or type(exc).__name__)
            return None
        finally:
            self._polling = None
        if not isinstance(answer, SyncResponse):
            log.warning("matrix_sync_failed", error=str(answer))
            return None
        return answer

    async def _take_batch(self, answer: SyncResponse, *, since: str | None) -> bool:
        """Everything of one sync, in order: invites, then each room's events. True when
        every message is journaled (its token may be saved)."""
        for room_id, invite in answer.rooms.invite.items():
            await self._on_invite(room_id, [_stripped(e) for e in invite.invite_state])
        waiting: list[asyncio.Future[Taken]] = []
        for room_id, joined in answer.rooms.join.items():
            events = [getattr(e, "source", {}) or {} for e in joined.timeline.events]
            if joined.timeline.limited and joined.timeline.prev_batch and since is not None:
                events = await self._read_back(room_id, joined.timeline.prev_batch,
                                               since) + events
            events = self._since_joined(events)
            if self._is_encrypted(room_id, events) or await self._known_encrypted(room_id):
                await self._refuse_encrypted(room_id)
                continue
            if self.settings.allowed_rooms and room_id not in self.settings.allowed_rooms:
                continue
            for event in events:
                future = await self._take_event(room_id, event)
                if future is not None:
                    waiting.append(future)
        all_taken = True
        for future in waiting:
            try:
                taken = await future
            except Exception:
                taken = "failed"
            if taken == "failed":
                all_taken = False
        if not all_taken:
            log.warning("matrix_batch_not_journaled",
                        hint="the sync is asked again from the last saved token")
        return all_taken

    async def _take_event(self, room_id: str, event: dict[str, Any]
                          ) -> asyncio.Future[Taken] | None:
        pressed = reaction(room_id, event, bot_user_id=self.user_id)
        if pressed is not None:
            await self._on_reaction(pressed)
            return None
        message = spoken(room_id, event, bot_user_id=self.user_id)
        if message is None:
            return None
        assert self._host is not None
        is_dm = await self._is_dm(room_id)
        metadata: dict[str, Any] = {}
        if message.files:
            metadata[FILES] = [f.to_dict() for f in message.files]
        route = route_of(message, is_dm=is_dm)
        # facts only: who may talk is decided in one place (gateway/messages/auth.py)
        received = self._host.receive(
            MessageEvent(text=message.text, route=route, message_id=message.event_id,
                         metadata=metadata),
            platform_id=message.event_id, sent_at=message.sent_at or None)
        return received.journaled

    async def _read_back(self, room_id: str, prev_batch: str, since: str
                         ) -> list[dict[str, Any]]:
        """A room's events between ``since`` and a limited sync's timeline, oldest
        first: what did not fit in the sync."""
        found: list[dict[str, Any]] = []
        start = prev_batch
        while len(found) < READ_BACK_LIMIT:
            try:
                page = await self.api.call(
                    "messages", lambda start=start: self.client.room_messages(  # type: ignore[misc]
                        room_id, start, end=since, direction=MessageDirection.back,
                        limit=100), RoomMessagesResponse, room=room_id)
            except MatrixRefused as exc:
                log.warning("matrix_read_back_failed", room_id=room_id, error=str(exc),
                            hint="what was said there while homing was away is not taken")
                break
            found.extend(getattr(e, "source", {}) or {} for e in page.chunk)
            if not page.chunk or not page.end or page.end == start:
                break
            start = page.end
        if len(found) >= READ_BACK_LIMIT:
            log.warning("matrix_read_back_cut", room_id=room_id, read=len(found))
        return list(reversed(found))

    async def _on_invite(self, room_id: str, state: list[dict[str, Any]]) -> None:
        inviter = next((e.get("sender") for e in state
                        if e.get("type") == "m.room.member"
                        and e.get("state_key") == self.user_id
                        and (e.get("content") or {}).get("membership") == "invite"), None)
        allowed_rooms = self.settings.allowed_rooms
        if inviter in self.settings.allowed_users and (not allowed_rooms
                                                       or room_id in allowed_rooms):
            try:
                await self.api.call("join", lambda: self.client.join(room_id), JoinResponse,
                                    room=room_id)
                log.info("matrix_invite_accepted", room_id=room_id, inviter=inviter)
            except MatrixRefused as exc:
                log.warning("matrix_join_failed", room_id=room_id, error=str(exc))
            return
        try:
            await self.api.call("leave", lambda: self.client.room_leave(room_id),
                                RoomLeaveResponse, room=room_id)
        except MatrixRefused as exc:
            log.warning("matrix_invite_reject_failed", room_id=room_id, error=str(exc))
        log.warning("matrix_invite_refused", room_id=room_id, inviter=inviter,
                    hint="only platforms.matrix.allowed_users may invite the bot"
                         + (", into allowed_rooms" if allowed_rooms else ""))

    def _since_joined(self, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """What came after the bot's own join, where the batch holds it: a room just
        joined comes with some of its history, which is never replayed."""
        for index in range(len(events) - 1, -1, -1):
            event = events[index]
            if (event.get("type") == "m.room.member" and event.get("state_key") == self.user_id
                    and (event.get("content") or {}).get("membership") == "join"):
                return events[index + 1:]
        return events

    async def _is_dm(self, room_id: str) -> bool:
        """Whether the room is one person and the bot. A sync from a saved token brings
        no room state, so after a restart this life's client may not know who is in a
        room it hears from: its members are then asked of the homeserver once (nio
        keeps them), rather than counting a group's thread as a DM of whoever spoke."""
        room = self.client.rooms.get(room_id)
        if room is not None and (room.members_synced or _counted(room)):
            return bool(room.member_count <= 2)
        try:
            answer = await self.api.call(
                "joined_members", lambda: self.client.joined_members(room_id),
                JoinedMembersResponse, room=room_id)
        except MatrixRefused as exc:
            log.warning("matrix_members_unknown", room_id=room_id, error=str(exc),
                        hint="the room is counted from what this life has seen of it")
            return room is not None and room.member_count <= 2
        room = self.client.rooms.get(room_id)
        return bool((room.member_count if room is not None else len(answer.members)) <= 2)

    def _is_encrypted(self, room_id: str, events: list[dict[str, Any]]) -> bool:
        room = self.client.rooms.get(room_id)
        return (room is not None and room.encrypted) or any(
            e.get("type") in ("m.room.encrypted", "m.room.encryption") for e in events)

    async def _known_encrypted(self, room_id: str) -> bool:
        """Whether an earlier life found the room encrypted: a sync from a saved token
        brings no room state, so this life's client may not know it yet."""
        if room_id in self._encrypted:
            return True
        assert self._host is not None
        return await self._host.cursors.get(self.platform, f"e2e-told:{room_id}") is not None

    async def _refuse_encrypted(self, room_id: str) -> None:
        """Say once, in plain text, that the room is not supported (never pretend to
        read it); the store remembers it was said."""
        if room_id in self._encrypted:
            return
        host = self._host
        assert host is not None
        self._encrypted.add(room_id)
        log.warning("matrix_encrypted_room_refused", room_id=room_id,
                    hint="end-to-end encrypted rooms are not supported: nothing said there "
                         "is read; use a room without encryption")
        if await host.cursors.get(self.platform, f"e2e-told:{room_id}") is not None:
            return
        try:
            await self.put_event(room_id, "m.room.message",
                                 {"msgtype": "m.notice", "body": ENCRYPTED_NOTICE,
                                  "m.mentions": {}},
                                 txn=content.txn_id(f"e2e:{room_id}", 0, "m.room.message"))
        except MatrixRefused as exc:
            log.warning("matrix_encrypted_notice_failed", room_id=room_id, error=str(exc))
            return
        await host.cursors.put(self.platform, f"e2e-told:{room_id}", "told")

    async def _on_reaction(self, pressed: Reaction) -> None:
        if pressed.event_id in self._reactions:
            return
        self._reactions[pressed.event_id] = None
        while len(self._reactions) > _REMEMBERED:
            self._reactions.popitem(last=False)
        approval_id = self._requests.get(pressed.target) or await self._request_id(
            pressed.room_id, pressed.target)
        host = self._host
        if approval_id is None or host is None or host.approvals is None:
            return
        decision: Decision = "once" if REACTIONS[pressed.key] == "once" else "deny"
        click = log.bind(approval_id=approval_id, decision=decision, user_id=pressed.sender)
        try:
            result = await host.approvals.press(approval_id, decision, platform=self.platform,
                                                user_id=pressed.sender)
        except Exception:
            click.exception("matrix_approval_press_failed")
            return
        click.info("matrix_approval_pressed", ok=result.ok, note=result.note)

    async def _request_id(self, room_id: str, event_id: str) -> str | None:
        """The approval id of one of the bot's requests, read off the event."""
        try:
            answer = await self.api.call(
                "event", lambda: self.client.room_get_event(room_id, event_id),
                RoomGetEventResponse, room=room_id, patience=_ONCE)
        except MatrixRefused:
            return None
        source = getattr(answer.event, "source", {}) or {}
        if source.get("sender") != self.user_id:
            return None
        return approval_id_in(str((source.get("content") or {}).get("body", "")))

    # outbound ------------------------------------------------------------------

    async def put_event(self, room_id: str, event_type: str, body: dict[str, Any], *,
                        txn: str, wait_limit: float = 60.0,
                        patience: RetryPolicy = PATIENT) -> str:
        """One event into a room, with its transaction id; its event id."""
        answer = await self.api.call(
            f"send {event_type}", lambda: self.client.room_send(room_id, event_type, body,
                                                                tx_id=txn),
            RoomSendResponse, room=room_id, patience=patience, wait_limit=wait_limit)
        return str(answer.event_id)

    async def redact(self, room_id: str, event_id: str) -> None:
        await self.api.call("redact", lambda: self.client.room_redact(room_id, event_id),
                            RoomRedactResponse, room=room_id)

    def send_room(self, route: Route) -> int:
        return self.flow.room(route.chat_id, group=True)

    def message_count(self, text: str) -> int:
        return len(message_parts(text, self.message_limit))

    async def send(self, route: Route, text: str, *, kind: MessageKind = "reply",
                   session_id: str | None = None, dedupe_key: str | None = None,
                   notice: NoticeInfo | None = None) -> SendResult:
        return await self._send_parts(route, message_parts(text, self.message_limit),
                                      dedupe_key=dedupe_key, first=True)

    async def send_parts(self, route: Route, parts: list[str]) -> SendResult:
        """A streamed reply's parts after the first (which took the preview's place)."""
        return await self._send_parts(route, parts, dedupe_key=None, first=False)

    async def _send_parts(self, route: Route, parts: list[str], *, dedupe_key: str | None,
                          first: bool) -> SendResult:
        if not self._logged_in:
            return SendResult.failed("matrix is not connected")
        last: str | None = None
        async with self.flow.chat(route.chat_id):
            for index, part in enumerate(parts):
                # once part one is out, a failure would make the whole text go again
                patience = PATIENT if first and index == 0 else LATER_PART
                await self.flow.admit(route.chat_id, group=True)
                try:
                    last = await self.put_event(
                        route.chat_id, "m.room.message", content.message(route, part),
                        txn=content.txn_id(dedupe_key, index, "m.room.message"),
                        patience=patience)
                except MatrixRefused as exc:
                    return SendResult.failed(str(exc), retry_after=exc.retry_after,
                                             permanent=exc.permanent,
                                             route_gone=exc.route_gone)
        return SendResult.sent(last)

    async def delivered(self, route: Route, dedupe_key: str) -> bool | None:
        """Whether the bot's events after the message ``route`` answers hold the send
        keyed ``dedupe_key``: its first part, or the final edit of its preview. The
        homeserver shows the bot's own events to its device with the transaction id they
        were sent with (``unsigned.transaction_id``), and the id is derived from the key,
        so this life finds what a killed one sent. None when it cannot be told."""
        anchor = route.message_id
        if not self._logged_in or anchor is None:
            return None
        room = route.chat_id
        wanted = {content.txn_id(dedupe_key, 0, "m.room.message"),
                  content.txn_id(dedupe_key, 0, content.FINAL_EDIT)}

        def sent(events: list[Any]) -> bool:
            return any(((getattr(e, "source", {}) or {}).get("unsigned") or {})
                       .get("transaction_id") in wanted for e in events)

        only_ours = {"senders": [self.user_id], "types": ["m.room.message"]}
        try:
            # the message and what came right after it; then onwards from there
            around = await self.api.call(
                "context", lambda: self.client.room_context(room, anchor, limit=10),
                RoomContextResponse, room=room)
            if sent(around.events_after):
                return True
            start, read = around.end, len(around.events_after)
            while start and read < READ_BACK_LIMIT:
                page = await self.api.call(
                    "messages", lambda start=start: self.client.room_messages(  # type: ignore[misc]
                        room, start, direction=MessageDirection.front, limit=100,
                        message_filter=only_ours), RoomMessagesResponse, room=room)
                if sent(page.chunk):
                    return True
                read += len(page.chunk)
                if not page.chunk or not page.end or page.end == start:
                    return False
                start = page.end
        except MatrixRefused as exc:
            log.warning("matrix_delivery_unknown", room_id=room, event_id=anchor,
                        error=str(exc))
        return None

    def live_reply(self, route: Route, session_id: str | None) -> LiveReply:
        return MatrixPreview(self, route)

    async def typing(self, route: Route, active: bool) -> None:
        """The room shows the bot typing (one sign per room: threads share it)."""
        room = route.chat_id
        if active == (room in self._typing) and not active:
            return
        if active:
            self._typing.add(room)
        else:
            self._typing.discard(room)
        try:
            await self.api.call("typing", lambda: self.client.room_typing(
                room, typing_state=active, timeout=30_000), RoomTypingResponse, room=room,
                patience=_ONCE, wait_limit=0)
        except MatrixRefused as exc:
            log.debug("matrix_typing_failed", room_id=room, error=str(exc))

    async def send_file(self, route: Route, path: Path, caption: str | None = None, *,
                        session_id: str | None = None) -> SendResult:
        if not self._logged_in:
            return SendResult.failed("matrix is not connected")
        data = await asyncio.to_thread(path.read_bytes)
        try:
            uploaded = await self.api.call(
                "upload", lambda: self.client.upload(
                    io.BytesIO(data), content_type=mime_of(path), filename=path.name,
                    filesize=len(data)), UploadResponse, room=route.chat_id)
            async with self.flow.chat(route.chat_id):
                await self.flow.admit(route.chat_id, group=True)
                event_id = await self.put_event(
                    route.chat_id, "m.room.message",
                    file_content(route, path, uploaded.content_uri, len(data), caption),
                    txn=content.txn_id(None, 0, "m.room.message"))
        except MatrixRefused as exc:
            return SendResult.failed(f"matrix refused the file: {exc}",
                                     retry_after=exc.retry_after, permanent=exc.permanent,
                                     route_gone=exc.route_gone)
        return SendResult.sent(event_id)

    async def download(self, file: IncomingFile) -> AsyncIterator[bytes]:
        """A file from the homeserver's authenticated media API, with the bot's token."""
        if self._host is None or not self.client.access_token:
            raise FileRefused(f"{file.name} was not saved: Matrix is not connected.")
        return await download(file, homeserver=self.homeserver,
                              token=self.client.access_token,
                              max_bytes=self._host.config.attachments.max_bytes)

    # approvals (gateway/platforms/matrix/approvals.py) --------------------------------

    async def ask_approval(self, route: Route, record: ApprovalRecord) -> SendResult:
        result = await self._send_parts(route, [request_markdown(record)],
                                        dedupe_key=f"approval:{record.id}", first=True)
        if result.ok and result.message_id is not None:
            self._requests[result.message_id] = record.id
            while len(self._requests) > _REMEMBERED:
                self._requests.popitem(last=False)
        return result

    async def settle_approval(self, route: Route, record: ApprovalRecord) -> None:
        """Edit the request into its outcome. Best effort: the decision stands whether
        or not it is shown, so a failure is logged for the operator, not raised."""
        if record.message_id is None:
            return
        new = content.formatted(outcome_markdown(record))
        try:
            async with self.flow.chat(route.chat_id):
                await self.flow.admit(route.chat_id, group=True)
                await self.put_event(
                    route.chat_id, "m.room.message", content.edit(record.message_id, new),
                    txn=content.txn_id(f"settle:{record.id}", 0, "m.room.message"))
        except MatrixRefused as exc:
            log.warning("matrix_approval_outcome_not_shown", approval_id=record.id,
                        room_id=route.chat_id, error=str(exc),
                        hint="the decision stands; the request shows as it was asked")


def _stripped(event: Any) -> dict[str, Any]:
    """An invite's stripped member event as a dict (nio takes the content out of its
    ``source``)."""
    return {"type": "m.room.member" if hasattr(event, "membership") else None,
            "sender": getattr(event, "sender", None),
            "state_key": getattr(event, "state_key", None),
            "content": {"membership": getattr(event, "membership", None)}}


def _counted(room: Any) -> bool:
    """Whether a sync told the client how many are in ``room`` (its summary's counts)."""
    summary = room.summary
    return summary is not None and summary.joined_member_count is not None \
        and summary.invited_member_count is not None
