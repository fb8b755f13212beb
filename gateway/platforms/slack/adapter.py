"""Slack, through slack-sdk: Socket Mode in, the Web API out.

Every event comes in an envelope that Slack wants acknowledged; an envelope with a
person's message is acknowledged only once the message is journaled (``received.
journaled``), so a crash at any moment loses nothing — Slack delivers an unacked
envelope again, and the journal knows the message by its platform id (channel and
ts), whichever way it comes: redelivered, as an ``app_mention`` beside its
``message``, or read back from history. A press on an approval's button is acknowledged
at once (Slack wants that within three seconds) and decided after; a press on a choice's
is the presser sending its command, journaled and then acknowledged like a message.

Each (re)connection's ``hello`` reads back what was said while the socket was down
(``history.py``); live messages that come meanwhile wait, so the missed ones keep
their order. Sending never needs the socket: every message goes out over the Web API
to the route it is given — its channel, and its thread (``thread_ts``) — in order per
conversation, each method's rate limit waited out (``api.py``). A send with a dedupe key
carries it in its metadata, so that after a crash the next life can tell from the
channel whether it went out (``sends.py``).
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog
from slack_sdk.socket_mode.aiohttp import SocketModeClient
from slack_sdk.web.async_client import AsyncWebClient

from gateway.contract.adapter import Adapter, LiveReply
from gateway.formatting.mrkdwn import message_parts
from gateway.inbound.files import FILES, FileRefused, IncomingFile
from gateway.platforms.flow import FlowControl, RateLimits
from gateway.platforms.slack import history, sends
from gateway.platforms.slack.api import NOT_ALLOWED, PATIENT, SlackRefused, WebApi
from gateway.platforms.slack.approvals import (
    answer_press,
    button_press,
    post_request,
    show_outcome,
)
from gateway.platforms.slack.choices import choice_blocks, chosen_command
from gateway.platforms.slack.files import download, files_in, upload_arguments
from gateway.platforms.slack.presses import Press, press_of
from gateway.platforms.slack.preview import SlackPreview
from gateway.platforms.slack.routes import (
    SpokenMessage,
    press_route,
    route_of,
    spoken,
    text_as_typed,
)
from gateway.platforms.slack.settings import SlackSettings
from gateway.platforms.slack.spec import PLATFORM
from gateway.retry import RetryPolicy
from gateway.words.events import Choice, MessageEvent, MessageKind, NoticeInfo, SendResult
from gateway.words.route import Route

if TYPE_CHECKING:
    from gateway.cluster.instances import Lease
    from gateway.contract.approval import ApprovalRecord
    from gateway.contract.host import AdapterHost
    from gateway.platforms.context import PlatformContext

log = structlog.get_logger(__name__)

#: a part after the first: a failure would make the whole message go again
LATER_PART = PATIENT.times(3)
#: logging in and opening the socket, until it works
CONNECT = RetryPolicy((1.0, 2.0, 5.0, 10.0, 30.0, 60.0))
#: a status is a sign of life: asked once, never waited for
_ONCE = RetryPolicy((0.0,), attempts=1)
#: event ids, client message ids and platform ids remembered to drop a second copy
_REMEMBERED = 20_000
#: what the thread's status says while a turn runs and nothing more is known
_TYPING = "is typing…"

Ack = Callable[[], Awaitable[None]]


def make_adapter(settings: SlackSettings, context: PlatformContext) -> SlackAdapter:
    """The registry's way in (gateway/platforms/slack/spec.py)."""
    return SlackAdapter(settings, leases=context.leases)


class SlackAdapter(Adapter):
    platform = "slack"
    message_limit = PLATFORM.capabilities.message_limit
    supports_pairing = True

    def __init__(self, settings: SlackSettings, *,
                 leases: Callable[[str], Lease] | None = None) -> None:
        """``leases``: on a shared store, the lease of a name, among the instances."""
        if settings.bot_token is None or settings.app_token is None:
            raise ValueError("platforms.slack.bot_token and app_token are required when "
                             "Slack is enabled")
        self.settings = settings
        self._bot_token = settings.bot_token.get_secret_value()
        self._app_token = settings.app_token.get_secret_value()
        # Slack allows about one post a second per channel, with short bursts; this keeps
        # each conversation's order, and a 429 is waited out per method (api.py)
        self.flow = FlowControl(RateLimits(per_second=20, group_per_minute=60))
        self._host: AdapterHost | None = None
        self._api: WebApi | None = None
        self._socket: SocketModeClient | None = None
        self._task: asyncio.Task[None] | None = None
        self._catching_up: asyncio.Task[None] | None = None
        self._ready = asyncio.Event()
        self._logged_in = False
        self._hello = False
        #: a token was refused: Slack stays offline until the config is fixed
        self._gave_up = False
        self._receiving = True
        #: who the bot is (auth.test): its own messages come back as events
        self.bot_user_id: str | None = None
        #: live messages that came while the history is read back (None: not holding)
        self._held: list[tuple[SpokenMessage, Ack, list[str]]] | None = None
        #: a message's keys (event id, client message id, platform id) -> whether its
        #: first copy was journaled; a second copy is acked once the first is
        self._seen: OrderedDict[str, asyncio.Future[bool]] = OrderedDict()
        self._presses: OrderedDict[str, None] = OrderedDict()
        #: the app has no agent feature (assistant.threads.setStatus refused): statuses
        #: go into the preview instead, from then on
        self._no_thread_status = False
        self._typing: set[tuple[str, str]] = set()
        #: on a shared store: the socket is opened by the instance holding this lease;
        #: every instance sends over the Web API
        self.poll_lease = leases(self.poll_lease_name) if leases is not None else None

    # lifecycle ---------------------------------------------------------------

    @property
    def poll_lease_name(self) -> str:
        """One socket per app: Slack would share the app's events among several."""
        parts = self._app_token.split("-")
        return f"slack:{parts[2] if len(parts) > 3 else parts[-1][:16]}"

    @property
    def api(self) -> WebApi:
        if self._api is None:
            raise ConnectionError("slack is not connected")
        return self._api

    async def connect(self, runner: AdapterHost) -> None:
        """Start in the background: a Slack outage must not hold up the daemon."""
        self._host = runner
        client = AsyncWebClient(token=self._bot_token, base_url=self.settings.api_base,
                                retry_handlers=[])
        self._api = WebApi(client, on_rate_limit=self.flow.pause)
        self._task = asyncio.create_task(self._run(), name="slack")

    async def _run(self) -> None:
        try:
            if not await self._login():
                self._gave_up = True
                return
            self._logged_in = True
            if self.poll_lease is None:
                self._gave_up = not await self._open_socket()
                return
            # the Web API works here at once; the socket only where the lease is held
            self._ready.set()
            if self._host is not None:
                self._host.platform_connected(self.platform)
            self.poll_lease.watch(self._socket_here, self._socket_elsewhere)
        except asyncio.CancelledError:
            raise
        except Exception:
            self._gave_up = True
            log.exception("slack_stopped")

    async def _login(self) -> bool:
        for attempt in CONNECT.tries():
            try:
                me = await self.api.call("auth.test")
                self.bot_user_id = str(me.get("user_id") or "") or None
                log.info("slack_logged_in", bot_user_id=self.bot_user_id, team=me.get("team"))
                return True
            except SlackRefused as exc:
                if exc.error in NOT_ALLOWED:
                    log.error("slack_login_failed", error=exc.error,
                              hint="check platforms.slack.bot_token (xoxb-…, OAuth & "
                                   "Permissions); Slack stays offline")
                    return False
                delay = CONNECT.delay(attempt)
                log.warning("slack_login_retry", error=str(exc), retry_in=delay)
                await asyncio.sleep(delay)
        return False

    async def _open_socket(self) -> bool:
        """Ask for a Socket Mode URL with the app token (refused for good: the token is
        wrong, and Slack stays offline), then connect; slack-sdk reconnects by itself."""
        web = AsyncWebClient(base_url=self.settings.api_base, retry_handlers=[])
        for attempt in CONNECT.tries():
            try:
                url = (await WebApi(web).call("apps.connections.open",
                                              app_token=self._app_token))["url"]
                break
            except SlackRefused as exc:
                if exc.error in NOT_ALLOWED:
                    log.error("slack_socket_refused", error=exc.error,
                              hint="check platforms.slack.app_token (xapp-…, with "
                                   "connections:write, Basic Information) and that Socket "
                                   "Mode is on for the app; Slack stays offline")
                    return False
                delay = CONNECT.delay(attempt)
                log.warning("slack_socket_retry", error=str(exc), retry_in=delay)
                await asyncio.sleep(delay)
        socket = SocketModeClient(app_token=self._app_token, web_client=web,
                                  auto_reconnect_enabled=True)
        socket.wss_uri = str(url)
        socket.message_listeners.append(self._on_frame)
        self._socket = socket
        await socket.connect()  # type: ignore[no-untyped-call]
        return True

    async def _socket_here(self, epoch: int) -> None:
        log.info("slack_socket_here", lease=self.poll_lease_name, lease_epoch=epoch)
        self._receiving = True
        if not await self._open_socket():
            raise ConnectionError("slack refused the app token")  # the lease goes back

    async def _socket_elsewhere(self) -> None:
        """Close the socket (not the Web API client: sending goes on)."""
        socket, self._socket = self._socket, None
        self._hello = False
        if socket is not None:
            await socket.close()  # type: ignore[no-untyped-call]

    async def wait_connected(self, timeout: float | None = None) -> None:
        """Until the socket said hello (or, on a shared store, the bot is logged in);
        raises when the adapter gave up."""
        async with asyncio.timeout(timeout):
            ready = asyncio.ensure_future(self._ready.wait())
            waits = {ready} | ({self._task} if self._task is not None else set())
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            if not ready.done() and self._gave_up:
                ready.cancel()
                raise ConnectionError("slack could not connect; see the log")
            await ready  # the socket is open: its hello is on its way

    async def stop_receiving(self) -> None:
        """On a shared store, let the socket go: another instance opens it and reads back
        what came meanwhile. Alone on its store, what arrives is journaled for the next
        life (and acked, so Slack does not send it again)."""
        if self.poll_lease is not None:
            self._receiving = False
            await self.poll_lease.stop()

    async def disconnect(self) -> None:
        self._receiving = False
        if self.poll_lease is not None:
            await self.poll_lease.stop()
        if self._catching_up is not None:
            self._catching_up.cancel()
            await asyncio.gather(self._catching_up, return_exceptions=True)
        socket, self._socket = self._socket, None
        self._hello = False
        if socket is not None:
            await socket.close()  # type: ignore[no-untyped-call]
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    @property
    def connected(self) -> bool:
        """The socket is up — or, on a shared store, another instance has it and this one
        is logged in to send."""
        socket = self._socket
        session = socket.current_session if socket is not None else None
        up = (self._hello and socket is not None and not socket.closed and not socket.stale
              and session is not None and not session.closed)
        return up or (self.poll_lease is not None and self._logged_in
                      and not self.poll_lease.held)

    # Socket Mode ---------------------------------------------------------------

    async def _on_frame(self, client: Any, frame: dict[str, Any], raw: str | None) -> None:
        """Every frame the socket receives (slack-sdk runs each in a task of its own, in
        the order they came: what must keep that order happens before the first await)."""
        kind = frame.get("type")
        envelope = frame.get("envelope_id")
        ack = self._acker(client, envelope) if isinstance(envelope, str) else None
        if kind == "hello":
            self._came_back()
        elif kind == "events_api" and ack is not None:
            await self._on_event(frame.get("payload") or {}, ack)
        elif kind == "interactive" and ack is not None:
            payload = frame.get("payload") or {}
            press = press_of(payload)
            command = chosen_command(press) if press is not None else None
            if press is not None and command is not None:
                await self._take_press(press, command, ack)
                return
            await ack()  # at once: an approval's press is decided after
            await self._on_interaction(payload)
        elif ack is not None:
            await ack()  # slash commands, options: nothing of ours

    def _acker(self, client: Any, envelope_id: str) -> Ack:
        async def ack() -> None:
            try:
                await client.send_socket_mode_response({"envelope_id": envelope_id})
            except Exception as exc:  # the socket went: Slack sends the envelope again
                log.info("slack_ack_failed", envelope_id=envelope_id, error=str(exc))
        return ack

    def _came_back(self) -> None:
        self._hello = True
        self._ready.set()
        log.info("slack_connected")
        if self._held is None:
            self._held = []
        if self._catching_up is None or self._catching_up.done():
            self._catching_up = asyncio.create_task(self._catch_up(), name="slack-catch-up")
        if self._host is not None:
            self._host.platform_connected(self.platform)  # notices that waited go now

    async def _on_event(self, payload: dict[str, Any], ack: Ack) -> None:
        event = payload.get("event") or {}
        message = spoken(event, bot_user_id=self.bot_user_id)
        if message is None or not self._wanted(message.channel, dm=message.is_dm):
            await ack()  # not a person's message for us: nothing to journal
            return
        if not self._receiving:
            return  # left unacked: the instance that takes the socket over gets it
        event_id = payload.get("event_id")
        keys = [f"event:{event_id}"] if isinstance(event_id, str) else []
        if self._held is not None:
            self._held.append((message, ack, keys))  # after the history read back
            return
        await self._take(message, ack, extra_keys=keys)

    async def _take(self, message: SpokenMessage, ack: Ack | None, *,
                    extra_keys: list[str] | None = None) -> None:
        """A message, live or read back: journaled, then its envelope acked. A second
        copy (by event id, client message id or platform id) is acked once the first
        is journaled, and not taken in again."""
        keys = [*(extra_keys or []), message.platform_id,
                *([f"client:{message.client_msg_id}"] if message.client_msg_id else [])]
        first = next((self._seen[k] for k in keys if k in self._seen), None)
        if first is not None:
            for key in keys:
                self._remember(key, first)
            if await asyncio.shield(first) and ack is not None:
                await ack()
            return
        journaled: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        for key in keys:
            self._remember(key, journaled)
        assert self._host is not None
        route = route_of(message, reply_in_thread=self.settings.reply_in_thread)
        metadata: dict[str, Any] = {}
        files = files_in(message.files)
        if files:
            metadata[FILES] = [f.to_dict() for f in files]
        # facts only: who may talk is decided in one place (gateway/messages/auth.py)
        received = self._host.receive(
            MessageEvent(text=text_as_typed(message.text, self.bot_user_id), route=route,
                         message_id=message.ts, metadata=metadata),
            platform_id=message.platform_id, sent_at=message.sent_at)
        try:
            taken = await received.journaled
        except Exception:
            taken = "failed"
        if taken == "failed":
            # not journaled, so not acked: Slack sends it again, and it is taken then
            for key in keys:
                if self._seen.get(key) is journaled:
                    del self._seen[key]
            journaled.set_result(False)
            return
        journaled.set_result(True)
        if ack is not None:
            await ack()

    def _remember(self, key: str, journaled: asyncio.Future[bool]) -> None:
        self._seen[key] = journaled
        self._seen.move_to_end(key)
        while len(self._seen) > _REMEMBERED:
            self._seen.popitem(last=False)

    def _wanted(self, channel: str, *, dm: bool) -> bool:
        """DMs always (the runner decides who may talk); channels as configured."""
        allowed = self.settings.allowed_channels
        return dm or not allowed or channel in allowed

    async def _catch_up(self) -> None:
        """Take in what each recently active conversation missed (the journal drops any
        it already has), then the live messages held meanwhile, in order."""
        try:
            host, api = self._host, self._api
            if host is not None and api is not None:
                alive = await host.inbound.last_received(self.platform) or time.time()
                since = alive - host.config.inbound.max_age_seconds
                sessions = await host.store.list_sessions("include", platform=self.platform)
                where = history.places(
                    (s.route for s in sessions if s.last_active_at >= since), since)
                missed = await history.missed(api, where, bot_user_id=self.bot_user_id)
                for message in missed:
                    if self._wanted(message.channel, dm=message.is_dm):
                        await self._take(message, None)
                if missed:
                    log.info("slack_caught_up", conversations=len(where), messages=len(missed))
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("slack_catch_up_failed")
        finally:
            await self._release_held()

    async def _release_held(self) -> None:
        while self._held:
            message, ack, keys = self._held.pop(0)
            await self._take(message, ack, extra_keys=keys)
        self._held = None

    async def _take_press(self, press: Press, command: str, ack: Ack) -> None:
        """A press on a choice: the one who pressed sending its command where the message
        is, journaled by the press's trigger id, then acked (Slack wants that within three
        seconds; the journal commits in far less). Who may send it is the runner's rule: a
        press by someone who may not is refused there, as a message of theirs would be."""
        assert self._host is not None
        route = press_route(press.channel, press.message_ts, press.thread_ts, press.user_id,
                            reply_in_thread=self.settings.reply_in_thread)
        if not self._wanted(press.channel, dm=route.chat_type == "dm"):
            await ack()  # a channel no longer served (allowed_channels changed since)
            return
        received = self._host.receive(
            MessageEvent(text=command, route=route, message_id=press.message_ts),
            platform_id=f"press:{press.trigger_id}", sent_at=press.pressed_at)
        if await received.journaled == "failed":
            return  # not journaled, so not acked: the press shows it failed
        await ack()

    async def _on_interaction(self, payload: dict[str, Any]) -> None:
        button = button_press(payload)
        if button is None:
            return
        if button.press.trigger_id in self._presses:
            return  # the same press delivered again
        self._presses[button.press.trigger_id] = None
        while len(self._presses) > _REMEMBERED:
            self._presses.popitem(last=False)
        host = self._host
        await answer_press(button, host.approvals if host is not None else None, self._api)

    # outbound ------------------------------------------------------------------

    def send_room(self, route: Route) -> int:
        return self.flow.room(route.chat_id, group=True)

    def message_count(self, text: str) -> int:
        return len(message_parts(text, self.message_limit))  # rendered, as :meth:`send` cuts

    async def send(self, route: Route, text: str, *, kind: MessageKind = "reply",
                   session_id: str | None = None, dedupe_key: str | None = None,
                   notice: NoticeInfo | None = None) -> SendResult:
        return await self.send_parts(route, message_parts(text, self.message_limit),
                                     first=True, dedupe_key=dedupe_key)

    async def send_choices(self, route: Route, text: str, choices: Sequence[Choice], *,
                           kind: MessageKind = "system", session_id: str | None = None
                           ) -> SendResult:
        """``text`` as :meth:`send` sends it, its last part as Block Kit with a button per
        choice (gateway/platforms/slack/choices.py); a press is taken in ``_take_press``."""
        return await self.send_parts(route, message_parts(text, self.message_limit),
                                     first=True, choices=choices)

    async def send_parts(self, route: Route, parts: list[str], *, first: bool = False,
                         choices: Sequence[Choice] = (), dedupe_key: str | None = None
                         ) -> SendResult:
        """``parts`` in order, as one message, into the route's thread (or channel, or
        DM); ``first``: they start it (a streamed reply's rest comes after its preview
        took the first part); ``choices``: buttons under the last part; ``dedupe_key``:
        each part carries it (with its index) in its metadata, for :meth:`delivered`."""
        if self._api is None or not self._logged_in:
            return SendResult.failed("slack is not connected")
        last: str | None = None
        async with self.flow.chat(route.chat_id):
            for index, part in enumerate(parts):
                # once part one is out, a failure would make the whole text be sent
                # again: push the rest through patiently
                patience = PATIENT if first and index == 0 else LATER_PART
                blocks = choice_blocks(part, choices) \
                    if choices and index == len(parts) - 1 else None
                extra: dict[str, Any] = {"blocks": blocks} if blocks is not None else {}
                metadata = sends.send_metadata(dedupe_key, index if first else index + 1)
                if metadata is not None:
                    extra["metadata"] = metadata
                await self.flow.admit(route.chat_id, group=True)
                try:
                    data = await self._api.call(
                        "chat.postMessage", patience=patience, channel=route.chat_id,
                        thread_ts=route.thread_id, text=part, link_names=False,
                        unfurl_links=False, unfurl_media=False, **extra)
                except SlackRefused as exc:
                    return SendResult.failed(str(exc), retry_after=exc.retry_after,
                                             permanent=exc.permanent,
                                             route_gone=exc.route_gone)
                last = str(data.get("ts"))
        return SendResult.sent(last)

    async def delivered(self, route: Route, dedupe_key: str) -> bool | None:
        """Whether the bot's messages after ``route``'s anchor hold the send keyed
        ``dedupe_key`` (its first part, or the preview its final edit turned into), by
        the key each carries in its metadata (gateway/platforms/slack/sends.py)."""
        if self._api is None or not self._logged_in:
            return None
        return await sends.delivered(self._api, route, dedupe_key,
                                     bot_user_id=self.bot_user_id)

    def live_reply(self, route: Route, session_id: str | None) -> LiveReply:
        return SlackPreview(self, route)

    async def typing(self, route: Route, active: bool) -> None:
        """Slack shows a bot typing only as an agent thread's status."""
        key = (route.chat_id, route.thread_id or "")
        if active and key not in self._typing:
            self._typing.add(key)
            await self.thread_status(route, _TYPING)
        elif not active and key in self._typing:
            self._typing.discard(key)
            await self.thread_status(route, "")

    async def status(self, route: Route, text: str) -> None:
        await self.thread_status(route, text)

    async def thread_status(self, route: Route, text: str) -> bool:
        """``text`` as the thread's status (``assistant.threads.setStatus``); False where
        the app cannot show one (no agent feature, no thread), remembered once refused."""
        if self._no_thread_status or route.thread_id is None or self._api is None:
            return False
        try:
            await self._api.call("assistant.threads.setStatus", patience=_ONCE,
                                 wait_limit=0, channel_id=route.chat_id,
                                 thread_ts=route.thread_id, status=text[:250])
            return True
        except SlackRefused as exc:
            if exc.permanent:
                log.info("slack_thread_status_off", error=exc.error,
                         hint="statuses show in the reply's preview instead; turn on "
                              "Agents & AI Apps for the app to show them as Slack does")
                self._no_thread_status = True
            return False

    async def send_file(self, route: Route, path: Path, caption: str | None = None, *,
                        session_id: str | None = None) -> SendResult:
        if self._api is None or not self._logged_in:
            return SendResult.failed("slack is not connected")
        async with self.flow.chat(route.chat_id):
            await self.flow.admit(route.chat_id, group=True)
            try:
                data = await self._api.call(
                    "files_upload_v2", **upload_arguments(route.chat_id, route.thread_id,
                                                          path, caption))
            except SlackRefused as exc:
                return SendResult.failed(f"slack refused the file: {exc}",
                                         retry_after=exc.retry_after, permanent=exc.permanent,
                                         route_gone=exc.route_gone)
        uploaded = data.get("files") or [data.get("file") or {}]
        return SendResult.sent(str(uploaded[0].get("id")) if uploaded else None)

    async def download(self, file: IncomingFile) -> AsyncIterator[bytes]:
        """A file from Slack's file host, fetched with the bot token."""
        if self._host is None:
            raise FileRefused(f"{file.name} was not saved: Slack is not connected.")
        return await download(file, token=self._bot_token, api_base=self.settings.api_base,
                              max_bytes=self._host.config.attachments.max_bytes)

    # approvals (gateway/platforms/slack/approvals.py) --------------------------------

    async def ask_approval(self, route: Route, record: ApprovalRecord) -> SendResult:
        return await post_request(self._api, self.flow, route, record)

    async def settle_approval(self, route: Route, record: ApprovalRecord) -> None:
        await show_outcome(self._api, self.flow, route, record)
