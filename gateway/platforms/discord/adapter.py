"""Discord, through discord.py: the gateway in, REST out.

A thread is a channel: it gets its own route (chat id and thread id = the
thread's id, parent channel recorded) and its own session. Sends go to the
stored route's channel id through a partial messageable, so the library's
channel cache — which may not know a thread — never decides where a message
goes. discord.py resumes dropped gateway sessions itself; while the gateway
is down the adapter reports itself disconnected, notices wait in the outbox,
and the router is woken when the session is back.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp
import discord
import structlog
import yarl

from gateway.config.platform import account_platform
from gateway.config.settings import secret
from gateway.contract.adapter import Adapter, LiveReply
from gateway.formatting.discord_text import NO_MENTIONS, message_parts
from gateway.inbound.files import FILES, IncomingFile, fetch_url
from gateway.messages.auth import ROLES
from gateway.platforms.discord.approvals import answer_click, post_request, show_outcome
from gateway.platforms.discord.choices import choice_buttons, clicked_command
from gateway.platforms.discord.clicks import answer_once
from gateway.platforms.discord.preview import DiscordPreview
from gateway.platforms.discord.routes import (
    bot_id,
    click_route,
    nonce_of,
    point_library_at,
    rate_limit_report,
    route_of,
)
from gateway.platforms.discord.settings import DiscordConfig
from gateway.platforms.discord.spec import PLATFORM
from gateway.platforms.flow import FlowControl, RateLimits
from gateway.retry import RetryPolicy
from gateway.words.events import Choice, MessageEvent, MessageKind, NoticeInfo, SendResult
from gateway.words.route import Route

if TYPE_CHECKING:
    from gateway.cluster.instances import Lease
    from gateway.contract.approval import ApprovalRecord
    from gateway.contract.host import AdapterHost
    from gateway.platforms.context import PlatformContext

log = structlog.get_logger(__name__)

MESSAGE_LIMIT = PLATFORM.capabilities.message_limit
LOCKED_THREAD = 50083
#: a part of a message: a first part gives up sooner (the whole text can go again)
SEND = RetryPolicy((0.5, 1.0, 2.0, 4.0), attempts=4)
#: a part after the first: a failure would make the whole message go again
SEND_LATER_PART = SEND.times(3)
#: logging in, until it works
CONNECT = RetryPolicy((1.0, 2.0, 5.0, 10.0, 30.0, 60.0))
_CATCH_UP_LIMIT = 200  # messages read back per channel after a new session


class DiscordAdapter(Adapter):
    platform = "discord"
    message_limit = MESSAGE_LIMIT

    def __init__(self, config: DiscordConfig, *,
                 leases: Callable[[str], Lease] | None = None) -> None:
        """``leases``: on a shared store, the lease of a name, among the instances."""
        if not config.token:
            raise ValueError("platforms.discord.token is required when Discord is enabled")
        self.config = config
        #: the bot's routes' platform: ``discord``, or ``discord/<account>`` for one of
        #: several bots (gateway/config/platform.py)
        self.platform = account_platform(PLATFORM.name, config.name)
        # discord.py rate-limits REST itself; this keeps each channel's order
        self.flow = FlowControl(RateLimits(per_second=50, group_per_minute=10_000))
        self._runner: AdapterHost | None = None
        self._client: discord.Client | None = None
        self._task: asyncio.Task[None] | None = None
        self._ready = asyncio.Event()
        self._gateway_up = False
        self._receiving = True
        self._channel_kinds: dict[int, tuple[discord.ChannelType | None, int | None]] = {}
        self._catching_up: asyncio.Task[None] | None = None
        #: each channel's last journaled message when the session was lost: the history
        #: after it is read back once a new session is ready
        self._marks: dict[str, str] = {}
        #: the snowflake of the moment read back from in a guild channel or thread with
        #: no mark (the first message there was said while we were away); None before
        #: the gateway was ever alive on this store
        self._floor: int | None = None
        #: live messages that came while the session was lost or catching up: taken in
        #: after the history, so the missed ones keep their order (None: not holding)
        self._held: list[discord.Message] | None = None
        #: on a shared store: the gateway session is opened by the instance holding
        #: this lease; every instance sends over REST
        self.poll_lease = leases(self.poll_lease_name) if leases is not None else None
        self._session: asyncio.Task[None] | None = None
        self._logged_in = False

    # lifecycle ---------------------------------------------------------------

    async def connect(self, runner: AdapterHost) -> None:
        self._runner = runner
        await self._lost()  # before any live message can be journaled
        point_library_at(self.config)
        intents = discord.Intents.none()
        intents.guilds = intents.guild_messages = intents.dm_messages = True
        intents.message_content = True  # privileged, and needed; member intents stay off
        client = discord.Client(intents=intents,
                                guild_ready_timeout=self.config.guild_ready_timeout_seconds,
                                chunk_guilds_at_startup=False, max_messages=None,
                                http_trace=self._rate_limit_trace())
        client.event(self.on_ready)
        client.event(self.on_resumed)
        client.event(self.on_disconnect)
        client.event(self.on_message)
        client.event(self.on_interaction)
        self._client = client
        self._task = asyncio.create_task(self._run(client), name="discord")

    async def _run(self, client: discord.Client) -> None:
        try:
            if not await self._login(client):
                return
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("discord_stopped")
            return
        self._logged_in = True
        if self.poll_lease is None:
            await self._open_session(client)
            return
        # REST works here at once; the session only where the lease is held
        self._ready.set()
        if self._runner is not None:
            self._runner.platform_connected(self.platform)
        self.poll_lease.watch(self._session_here, self._session_elsewhere)

    async def _login(self, client: discord.Client) -> bool:
        for attempt in CONNECT.tries():
            try:
                await client.login(secret(self.config.token) or "")
                return True
            except discord.LoginFailure:
                log.error("discord_login_failed", hint="check platforms.discord.token; "
                          "Discord stays offline")
                return False
            except (discord.HTTPException, OSError) as exc:
                delay = CONNECT.delay(attempt)
                log.warning("discord_login_retry", error=str(exc), retry_in=delay)
                await asyncio.sleep(delay)
        return False

    @property
    def poll_lease_name(self) -> str:
        """One gateway session per bot: Discord would dispatch every message to each."""
        return f"discord:{bot_id(secret(self.config.token) or '')}"

    @property
    def gateway_here(self) -> bool:
        """Whether this instance has the bot's gateway session (or is the only one)."""
        return self._gateway_up

    async def _session_here(self, epoch: int) -> None:
        assert self._client is not None
        await self._lost()  # read back from where the journal stands now
        log.info("discord_session_here", lease=self.poll_lease_name, lease_epoch=epoch)
        self._session = asyncio.create_task(self._open_session(self._client),
                                            name="discord-session")

    async def _session_elsewhere(self) -> None:
        """Close the session (not the client: sending goes on over REST)."""
        session, self._session = self._session, None
        self._gateway_up = False
        if session is not None:
            session.cancel()
            await asyncio.gather(session, return_exceptions=True)
        client = self._client
        if client is not None and client.ws is not None:
            await client.ws.close(code=1000)

    async def _open_session(self, client: discord.Client) -> None:
        try:
            await client.connect(reconnect=True)  # resumes and reconnects on its own
        except discord.PrivilegedIntentsRequired:
            log.error("discord_intent_missing", hint="turn on the message content intent for "
                      "the bot in the Discord developer portal; Discord stays offline")
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("discord_stopped")
        finally:
            self._gateway_up = False

    async def wait_connected(self, timeout: float | None = None) -> None:
        """Until the gateway session is ready; raises when the adapter gave up."""
        async with asyncio.timeout(timeout):
            ready = asyncio.ensure_future(self._ready.wait())
            waits = {ready} | ({self._task} if self._task is not None else set())
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            if not ready.done():
                ready.cancel()
                raise ConnectionError("discord could not connect; see the log")

    async def stop_receiving(self) -> None:
        """On a shared store, let the gateway session go: another instance opens it at
        once and reads back from the journal what came meanwhile (sending goes on over
        REST). Alone on its store, what arrives is journaled for the next life."""
        if self.poll_lease is not None:
            self._receiving = False
            await self.poll_lease.stop()

    async def disconnect(self) -> None:
        self._receiving = False
        if self.poll_lease is not None:  # the session closes first, then the lease goes
            await self.poll_lease.stop()
        self._gateway_up = False
        if self._catching_up is not None:
            self._catching_up.cancel()
            await asyncio.gather(self._catching_up, return_exceptions=True)
        if self._client is not None and not self._client.is_closed():
            await self._client.close()
        if self._task is not None:
            # close() does not cut short discord.py's reconnect back-off
            _, pending = await asyncio.wait({self._task}, timeout=5)
            for task in pending:
                task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    @property
    def connected(self) -> bool:
        """The session is up — or, on a shared store, another instance has it and this
        one is logged in to send."""
        return self._gateway_up or self._session_is_elsewhere

    @property
    def _session_is_elsewhere(self) -> bool:
        return (self.poll_lease is not None and self._logged_in
                and not self.poll_lease.held)

    # gateway events --------------------------------------------------------------

    async def on_ready(self) -> None:
        self._came_back("discord_ready")
        # a new session (a restart, or an outage longer than a resume): what was said
        # meanwhile was never dispatched to us; read it from the channels' history
        if self._catching_up is None or self._catching_up.done():
            self._catching_up = asyncio.create_task(self._catch_up(), name="discord-catch-up")

    async def _lost(self) -> None:
        """The session is gone (or not there yet): note where each channel stood, and hold
        live messages until what was missed has been read back."""
        runner = self._runner
        if runner is None:
            return
        if self._held is None:
            self._held = []
        # conversations active within max_age of the last moment the gateway was alive
        # (older messages would be skipped as too old anyway)
        last = await runner.inbound.last_received(self.platform)
        since = (last or time.time()) - runner.config.inbound.max_age_seconds
        self._marks = await runner.inbound.last_ids(self.platform, since)
        self._floor = None if last is None else discord.utils.time_snowflake(
            datetime.fromtimestamp(since, tz=UTC))

    async def _catch_up(self) -> None:
        """Take in each marked channel's messages after its last journaled one, and
        those of each guild channel or thread with no mark that Discord shows a message
        in since the floor (a conversation whose first message came while we were away),
        after the floor — the journal drops any it already has; then the live ones held
        meanwhile."""
        client = self._client
        marks, self._marks = self._marks, {}
        floor, self._floor = self._floor, None
        try:
            if client is not None:
                for chat_id, last_id in marks.items():
                    await self._read_back(client, int(chat_id), int(last_id))
                new = _unmarked_since(client, marks, floor) if floor is not None else []
                for channel in new:
                    assert floor is not None
                    await self._read_back(client, channel.id, floor, channel)
                if marks or new:
                    log.info("discord_caught_up", channels=len(marks) + len(new),
                             unmarked=len(new))
        finally:
            await self._release_held()

    async def _read_back(self, client: discord.Client, channel_id: int, after: int,
                         channel: discord.abc.Messageable | None = None) -> None:
        """The messages of one channel or thread after the id ``after``, oldest first,
        each taken in (journaled) before the next."""
        read = 0
        try:
            channel = channel or await _history_of(client, channel_id)
            if channel is None:
                log.warning("discord_catch_up_skipped", channel_id=str(channel_id),
                            error="not a channel with messages")
                return
            async for message in channel.history(after=discord.Object(id=after),
                                                 oldest_first=True, limit=_CATCH_UP_LIMIT):
                read += 1
                await self._take(message, catching_up=True)
        except (discord.HTTPException, discord.InvalidData, OSError) as exc:
            log.warning("discord_catch_up_failed", channel_id=str(channel_id), error=str(exc))
        if read == _CATCH_UP_LIMIT:
            log.warning("discord_catch_up_cut", channel_id=str(channel_id), read=read,
                        hint="only the oldest messages missed in this channel were read back")

    async def _release_held(self) -> None:
        held, self._held = self._held or [], None
        for message in held:
            await self._take(message, catching_up=True)

    async def on_resumed(self) -> None:
        self._came_back("discord_resumed")
        self._marks, self._floor = {}, None  # resumed: Discord replays what we missed
        await self._release_held()

    async def on_disconnect(self) -> None:
        if self._gateway_up:
            log.warning("discord_disconnected", hint="discord.py reconnects and resumes")
            self._gateway_up = False
            await self._lost()
        self._gateway_up = False

    def _came_back(self, event: str) -> None:
        self._gateway_up = True
        self._ready.set()
        log.info(event)
        if self._runner is not None:
            self._runner.platform_connected(self.platform)  # notices that waited go now

    async def on_message(self, message: discord.Message) -> None:
        if self._held is not None:
            self._held.append(message)  # after the history read back (see _catch_up)
            return
        await self._take(message)

    async def _take(self, message: discord.Message, *, catching_up: bool = False) -> None:
        """A message, live or read back from history: journaled on receipt."""
        client = self._client
        if not self._receiving or client is None or message.author.bot or (
                client.user and message.author.id == client.user.id):
            return  # other bots and our own messages are never served
        if message.type not in (discord.MessageType.default, discord.MessageType.reply):
            return
        if message.guild is not None and not self._wanted_in_channel(message):
            return
        kind, parent = await self._channel_kind(message)
        route = route_of(message, kind, parent, self.platform)
        assert self._runner is not None
        files = [IncomingFile("attachment", a.filename, a.content_type, a.size, a.url)
                 for a in message.attachments]
        # facts only: who may talk is decided in one place (gateway/messages/auth.py)
        metadata: dict[str, Any] = {
            ROLES: [str(r.id) for r in getattr(message.author, "roles", [])]}
        if files:
            metadata[FILES] = [f.to_dict() for f in files]
        # while the gateway stops, it is journaled and left for the next life
        received = self._runner.receive(
            MessageEvent(text=self._without_mention(message.content), route=route,
                         message_id=str(message.id), metadata=metadata),
            platform_id=str(message.id), sent_at=message.created_at.timestamp())
        if catching_up:
            await received.journaled  # in order, one after another

    def _wanted_in_channel(self, message: discord.Message) -> bool:
        if not self.config.require_mention:
            return True
        client = self._client
        # @everyone and @here do not count as mentioning us
        mentioned = client is not None and client.user is not None and any(
            user.id == client.user.id for user in message.mentions)
        return mentioned or message.content.startswith("/")

    async def _channel_kind(self, message: discord.Message
                            ) -> tuple[discord.ChannelType | None, int | None]:
        """The channel's type and parent, asked of Discord when the cache does not know
        it (a thread created after we connected arrives on a bare channel object)."""
        channel = message.channel
        kind = getattr(channel, "type", None)
        if message.guild is None or kind is not None:
            return kind, getattr(channel, "parent_id", None)
        known = self._channel_kinds.get(channel.id)
        if known is not None:
            return known
        assert self._client is not None
        try:
            fetched = await self._client.fetch_channel(channel.id)
        except discord.HTTPException as exc:
            log.warning("discord_channel_unknown", channel_id=channel.id, error=str(exc))
            return None, None
        known = (getattr(fetched, "type", None), getattr(fetched, "parent_id", None))
        if len(self._channel_kinds) > 10_000:
            self._channel_kinds.clear()
        self._channel_kinds[channel.id] = known
        return known

    def _without_mention(self, content: str) -> str:
        client = self._client
        if client is None or client.user is None:
            return content
        for form in (f"<@{client.user.id}>", f"<@!{client.user.id}>"):
            content = content.replace(form, "")
        return content.strip()

    # outbound ------------------------------------------------------------------

    async def typing(self, route: Route, active: bool) -> None:
        client = self._client
        if not active or client is None or client.is_closed() or not self._gateway_up:
            return  # Discord's typing ends by itself after ten seconds, or with a message
        await client.http.send_typing(int(route.chat_id))

    def send_room(self, route: Route) -> int:
        """What Discord last said the channel takes (its rate limit headers, a 429)."""
        return self.flow.room(route.chat_id, group=False)

    def message_count(self, text: str) -> int:
        return len(message_parts(text))  # rendered, as :meth:`send` cuts

    def _rate_limit_trace(self) -> aiohttp.TraceConfig:
        """discord.py waits out Discord's rate limits itself; what Discord says of a
        channel's limit in each answer to a post also tells :meth:`send_room`."""
        trace = aiohttp.TraceConfig()
        trace.on_request_end.append(self._on_answer)
        return trace

    async def _on_answer(self, session: aiohttp.ClientSession, context: Any,
                         params: aiohttp.TraceRequestEndParams) -> None:
        report = rate_limit_report(params.method, params.url, params.response.status,
                                   params.response.headers)
        if report is not None:
            self.flow.report(*report)

    async def send(self, route: Route, text: str, *, kind: MessageKind = "reply",
                   session_id: str | None = None, dedupe_key: str | None = None,
                   notice: NoticeInfo | None = None) -> SendResult:
        return await self._send_text(route, text, kind=kind, dedupe_key=dedupe_key)

    async def send_choices(self, route: Route, text: str, choices: Sequence[Choice], *,
                           kind: MessageKind = "system", session_id: str | None = None
                           ) -> SendResult:
        """``text`` as :meth:`send` sends it, with a button per choice under its last part
        (gateway/platforms/discord/choices.py); a click is taken in :meth:`on_interaction`."""
        return await self._send_text(route, text, kind=kind, buttons=choice_buttons(choices))

    async def _send_text(self, route: Route, text: str, *, kind: MessageKind,
                         dedupe_key: str | None = None,
                         buttons: discord.ui.View | None = None) -> SendResult:
        client = self._client
        if client is None or client.is_closed():
            return SendResult.failed("discord is not connected")
        if kind == "notification" and not self.connected:
            # REST would work, but notices wait for the session, in the outbox
            return SendResult.failed("discord gateway is reconnecting")
        return await self.send_parts(route, message_parts(text), dedupe_key=dedupe_key,
                                     first=True, buttons=buttons)

    async def send_parts(self, route: Route, parts: list[str], *,
                         dedupe_key: str | None = None, first: bool = False,
                         buttons: discord.ui.View | None = None) -> SendResult:
        """``parts`` in order, as one message; ``first``: they start it (a streamed
        reply's rest comes after its preview took the first part); ``buttons`` go under
        the last part."""
        client = self._client
        if client is None or client.is_closed():
            return SendResult.failed("discord is not connected")
        channel = client.get_partial_messageable(int(route.chat_id))
        last: str | None = None
        start = 0 if first else 1
        async with self.flow.chat(route.chat_id):
            for index, part in enumerate(parts, start=start):
                reference = None
                if index == 0 and route.message_id is not None:
                    reference = discord.MessageReference(
                        message_id=int(route.message_id), channel_id=int(route.chat_id),
                        fail_if_not_exists=False)
                # once part one is out, a failure would make the whole text be sent
                # again: push the rest through patiently
                policy = SEND_LATER_PART if index > 0 else SEND
                nonce = nonce_of(dedupe_key, index) if dedupe_key else None
                under = buttons if index == start + len(parts) - 1 else None
                result = await self._send_part(channel, route, part, reference, policy,
                                               nonce, under)
                if not result.ok:
                    return result
                last = result.message_id
        return SendResult.sent(last)

    def live_reply(self, route: Route, session_id: str | None) -> LiveReply:
        return DiscordPreview(self, route)

    async def send_file(self, route: Route, path: Path, caption: str | None = None, *,
                        session_id: str | None = None) -> SendResult:
        client = self._client
        if client is None or client.is_closed():
            return SendResult.failed("discord is not connected")
        channel = client.get_partial_messageable(int(route.chat_id))
        async with self.flow.chat(route.chat_id):
            await self.flow.admit(route.chat_id, group=False)
            try:
                message = await channel.send(content=caption or None,
                                             file=discord.File(str(path), filename=path.name),
                                             allowed_mentions=NO_MENTIONS)
            except discord.HTTPException as exc:
                return SendResult.failed(f"discord refused the file: {exc.text}",
                                         permanent=exc.status in (400, 403, 404, 413))
        return SendResult.sent(str(message.id))

    async def download(self, file: IncomingFile) -> AsyncIterator[bytes]:
        """An attachment from its URL (Discord's CDN), in chunks."""
        hosts = {"cdn.discordapp.com", "media.discordapp.net",
                 yarl.URL(self.config.api_base).host or ""}
        return fetch_url(file.ref, hosts)

    # approvals (gateway/platforms/discord/approvals.py) ------------------------------

    async def ask_approval(self, route: Route, record: ApprovalRecord) -> SendResult:
        return await post_request(self._client, self.flow, route, record)

    async def settle_approval(self, route: Route, record: ApprovalRecord) -> None:
        await show_outcome(self._client, self.flow, route, record)

    async def on_interaction(self, interaction: discord.Interaction) -> None:
        """A button click, on any message (one posted before a restart too): a choice's,
        or else an approval's (approvals.py leaves any other interaction alone)."""
        command = clicked_command(interaction)
        if command is not None:
            await self._take_click(interaction, command)
            return
        await answer_click(interaction, self._runner.approvals if self._runner else None)

    async def _take_click(self, interaction: discord.Interaction, command: str) -> None:
        """A click on a choice: the one who clicked sending its command where the message
        is, journaled by its interaction's id, then answered with a deferred update (what
        the command says comes as a reply under the clicked message). Who may send it is
        the runner's rule: a click by someone who may not is refused there, as a message
        of theirs would be."""
        user = interaction.user
        click = log.bind(command=command, user_id=user.id, interaction_id=interaction.id)
        route = click_route(interaction, self.platform)
        if self._runner is None or route is None:
            # unanswered, the click shows "This interaction failed": it did
            click.warning("discord_choice_click_not_taken",
                          error="the interaction names no channel or message"
                          if route is None else "discord is not connected")
            return
        metadata: dict[str, Any] = {ROLES: [str(r.id) for r in getattr(user, "roles", [])]}
        # an interaction's id is a snowflake: as a channel's newest journaled id, the
        # history after it is read back after a lost session (on_ready), as for a message
        received = self._runner.receive(
            MessageEvent(text=command, route=route, message_id=route.message_id,
                         metadata=metadata),
            platform_id=str(interaction.id), sent_at=interaction.created_at.timestamp())
        await received.journaled  # journaled before anything acknowledges it
        await answer_once(interaction.response.defer, click,
                          "discord_choice_click_not_answered")

    @property
    def client(self) -> discord.Client | None:
        return self._client

    async def _send_part(self, channel: Any, route: Route, text: str,
                         reference: discord.MessageReference | None,
                         policy: RetryPolicy, nonce: str | None = None,
                         buttons: discord.ui.View | None = None) -> SendResult:
        """One part (with ``buttons`` under it). With a ``nonce`` (discord.py sends
        ``enforce_nonce`` with it), a part sent again — after a crash between its send and
        its record — is not posted twice: Discord answers with the message it already
        has."""
        for attempt in policy.tries():
            await self.flow.admit(route.chat_id, group=False)
            try:
                # nobody is pinged by what the agent or a job's output says
                kwargs: dict[str, Any] = {"allowed_mentions": NO_MENTIONS}
                if reference:
                    kwargs["reference"] = reference
                if nonce is not None:
                    kwargs["nonce"] = nonce
                if buttons is not None:
                    kwargs["view"] = buttons
                message = await channel.send(text, **kwargs)
                return SendResult.sent(str(message.id))
            except discord.Forbidden as exc:
                if exc.code == LOCKED_THREAD:
                    return SendResult.failed(f"route gone: thread is locked ({exc.text})",
                                             permanent=True)
                return SendResult.failed(f"route gone: {exc.text}", permanent=True)
            except discord.NotFound as exc:
                return SendResult.failed(f"route gone: {exc.text}", permanent=True)
            except (TimeoutError, discord.HTTPException, OSError) as exc:
                # discord.py waits out 429s and retries some 5xx itself; what comes here
                # is a server error or a broken connection
                if policy.is_last(attempt):
                    what = (f"discord server error: {exc.text}"
                            if isinstance(exc, discord.DiscordServerError)
                            else f"discord send failed: {exc}")
                    return SendResult.failed(what)
                await policy.pause(attempt)
        return SendResult.failed("discord did not accept the message")


def _unmarked_since(client: discord.Client, marks: dict[str, str], floor: int
                    ) -> list[discord.TextChannel | discord.Thread]:
    """The guild channels and threads (from the guilds' announcements, no request) that
    have no mark and whose last message is newer than ``floor``, where the bot may read
    the history."""
    found: list[discord.TextChannel | discord.Thread] = []
    for guild in client.guilds:
        me = guild.me
        channels: list[discord.TextChannel | discord.Thread] = [*guild.text_channels,
                                                                *guild.threads]
        for channel in channels:
            last = channel.last_message_id
            if str(channel.id) in marks or last is None or last <= floor:
                continue
            if me is not None and not channel.permissions_for(me).read_message_history:
                continue
            found.append(channel)
    return found


async def _history_of(client: discord.Client, channel_id: int
                      ) -> discord.abc.Messageable | None:
    """The channel or thread itself, from the cache or asked of Discord: its history's
    messages then carry the guild and the channel's type (a message over REST names
    neither), so a thread's missed messages take the thread's route. Read through a
    bare partial messageable, each would look like a DM. None for a channel that holds
    no messages (a category, a forum itself)."""
    channel = client.get_channel(channel_id) or await client.fetch_channel(channel_id)
    return channel if isinstance(channel, discord.abc.Messageable) else None


def make_adapter(settings: DiscordConfig, context: PlatformContext) -> DiscordAdapter:
    """The registry's way in (gateway/platforms/discord/spec.py)."""
    return DiscordAdapter(settings, leases=context.leases)
