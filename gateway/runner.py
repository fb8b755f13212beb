"""The message pipeline: authorize, resolve the session, set the context, run a turn.

Each session key has a lane: a FIFO of events served by one task, so a
conversation's turns run one at a time and in arrival order, while different
conversations run in parallel. A lane exists only while it has work, so idle
conversations cost nothing.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import structlog

from .auth import is_authorized
from .commands import parse_command, run_gateway_command
from .config import Config
from .context import SessionContext, session_context
from .database import Op
from .events import MessageEvent, MessageKind, SendResult
from .metrics import Metrics
from .notifications import Notification
from .pairing import Pairing, pairing_message
from .route import Route
from .session_key import build_session_key
from .store import SessionEntry, SessionStore
from .turn import Turn

if TYPE_CHECKING:
    from agent.base import Agent
    from tools.scheduler import Scheduler

    from .platforms.base import Adapter

log = structlog.get_logger(__name__)

Outcome = Literal["handled", "unauthorized", "failed", "shutdown"]


class GatewayClosed(RuntimeError):
    """The gateway is shutting down and takes no new messages."""


Work = Callable[[], Awaitable[Any]]


@dataclass(slots=True)
class _Lane:
    queue: deque[tuple[Work, asyncio.Future[Any]]] = field(default_factory=deque)
    task: asyncio.Task[None] | None = None
    busy: bool = False


class GatewayRunner:
    def __init__(self, config: Config, store: SessionStore, agent: Agent,
                 pairing: Pairing | None = None) -> None:
        self.config = config
        self.store = store
        self.agent = agent
        self.pairing = pairing
        self.metrics = Metrics()
        #: how many background jobs run (the daemon wires in the job manager)
        self.jobs_running: Callable[[], int] = lambda: 0
        #: the schedules, for the REST API (the daemon wires in the scheduler)
        self.scheduler: Scheduler | None = None
        self.adapters: dict[str, Adapter] = {}
        self._lanes: dict[str, _Lane] = {}
        self._accepting = True
        #: called with the ended session when a session ends for good (not
        #: when it is compressed, which continues it)
        self.session_end_listeners: list[Callable[[SessionEntry], Awaitable[None]]] = []
        #: called with a platform's name when it (re)connects
        self.platform_listeners: list[Callable[[str], None]] = []

    # wiring ------------------------------------------------------------------

    def add_adapter(self, adapter: Adapter) -> None:
        self.adapters[adapter.platform] = adapter

    def session_key_for(self, route: Route) -> str:
        opts = self.config.sessions
        return build_session_key(
            route,
            group_sessions_per_user=opts.group_sessions_per_user,
            thread_sessions_per_user=opts.thread_sessions_per_user,
        )

    # intake ------------------------------------------------------------------

    def submit(self, event: MessageEvent) -> asyncio.Future[Outcome]:
        """Queue a platform message behind its conversation's earlier ones.

        Platform adapters call this; an event claiming to be internal is
        refused, so no platform update can pose as a gateway notification.
        """
        if event.internal:
            raise ValueError("platform events cannot be internal")
        if not self._accepting:
            raise GatewayClosed("the gateway is shutting down")
        key = self.session_key_for(event.route)
        self.metrics.messages_in.labels(event.route.platform).inc()
        return self.run_in_lane(key, lambda: self._handle(key, event))

    def run_in_lane(self, session_key: str, work: Work) -> asyncio.Future[Any]:
        """Run ``work`` after everything already queued for this conversation.

        This is a busy session's inbox: a notification for a session that is
        mid-turn waits here, in order, and runs right after that turn.
        """
        lane = self._lanes.get(session_key)
        if lane is None:
            lane = self._lanes[session_key] = _Lane()
        done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        lane.queue.append((work, done))
        if lane.task is None:
            lane.task = asyncio.create_task(self._serve(session_key, lane),
                                            name=f"lane:{session_key}")
        return done

    async def _serve(self, key: str, lane: _Lane) -> None:
        try:
            while lane.queue:
                work, done = lane.queue.popleft()
                lane.busy = True
                try:
                    result = await work()
                except asyncio.CancelledError:
                    if not done.done():
                        done.set_result("shutdown")
                    raise
                except Exception as exc:
                    if not done.done():
                        done.set_exception(exc)
                    continue
                finally:
                    lane.busy = False
                if not done.done():
                    done.set_result(result)
        finally:
            for _, done in lane.queue:
                if not done.done():
                    done.set_result("shutdown")
            lane.queue.clear()
            if self._lanes.get(key) is lane:
                del self._lanes[key]

    async def _handle(self, key: str, event: MessageEvent) -> Outcome:
        if not await self._authorized(event):
            log.info("message_unauthorized", platform=event.route.platform,
                     chat_id=event.route.chat_id, user_id=event.route.user_id)
            await self._offer_pairing(event)
            return "unauthorized"
        with structlog.contextvars.bound_contextvars(session_key=key):
            try:
                session = await self.store.get_or_create(key, event.route)
                session = self.store.touch(session, event.route)
                self.store.record_message(session.id, "user", event.text)
            except Exception:
                # the store failed: say so, and keep the conversation's lane alive
                log.exception("message_not_recorded", platform=event.route.platform)
                await self._apologise_without_session(event)
                return "failed"
            turn = Turn(event=event, session=session, runner=self)
            self.metrics.turns.labels("message").inc()
            ctx = SessionContext(route=event.route, session_key=key, session_id=session.id,
                                 tab_id=event.tab_id)
            with session_context(ctx), structlog.contextvars.bound_contextvars(
                session_id=session.id
            ):
                try:
                    await self._run_turn(turn)
                except Exception:
                    log.exception("turn_failed")
                    await self._apologise(turn)
                    return "failed"
        return "handled"

    async def _authorized(self, event: MessageEvent) -> bool:
        adapter = self.adapters.get(event.route.platform)
        vouched = adapter is not None and adapter.authenticates_users
        if is_authorized(event, self.config, vouched=vouched):
            return True
        return self.pairing is not None and await self.pairing.is_approved(
            event.route.platform, event.route.user_id)

    async def _offer_pairing(self, event: MessageEvent) -> None:
        """An unknown user in a direct message may ask to be let in; in groups: silence."""
        adapter = self.adapters.get(event.route.platform)
        route = event.route
        if (self.pairing is None or adapter is None or not adapter.supports_pairing
                or route.chat_type != "dm" or route.user_id is None):
            return
        request = await self.pairing.request(route.platform, route.user_id, route.user_name)
        if request is not None:
            await adapter.send(route, pairing_message(request), kind="system")

    async def notification_turn(
            self, session: SessionEntry, route: Route, notification: Notification,
            sent_ops: Callable[[SendResult], Sequence[Op]] | None = None) -> Turn:
        """Give ``session`` a turn for a notification: an internal event, never user text.

        Call it from the session's lane (see :meth:`run_in_lane`).
        """
        event = MessageEvent(
            text=notification.text, route=route, message_id=route.message_id, internal=True,
            metadata={"notification_id": notification.id, "kind": notification.kind,
                      "job_id": notification.job_id})
        turn = Turn(event=event, session=session, runner=self, sent_ops=sent_ops)
        self.metrics.turns.labels("notification").inc()
        ctx = SessionContext(route=route, session_key=session.session_key,
                             session_id=session.id, tab_id=notification.tab_id)
        with session_context(ctx), structlog.contextvars.bound_contextvars(
            session_key=session.session_key, session_id=session.id,
            notification_id=notification.id, job_id=notification.job_id,
        ):
            await self.agent.run_notification(turn, notification)
        return turn

    async def _run_turn(self, turn: Turn) -> None:
        command = parse_command(turn.event.text)
        if command is not None and await run_gateway_command(turn, *command):
            return
        await self.agent.run_turn(turn)

    async def _apologise(self, turn: Turn) -> None:
        try:
            await turn.reply("Sorry, that message could not be handled; the error is in "
                             "the gateway log.", kind="system")
        except Exception:
            log.exception("apology_failed")

    async def _apologise_without_session(self, event: MessageEvent) -> None:
        adapter = self.adapters.get(event.route.platform)
        if adapter is None:
            return
        try:
            await adapter.send(event.route, "Sorry, that message could not be recorded; "
                               "the error is in the gateway log.", kind="system")
        except Exception:
            log.exception("apology_failed")

    async def rotate_session(self, session: SessionEntry, reason: str, *,
                             route: Route | None = None,
                             seed: Callable[[str], Sequence[Op]] | None = None
                             ) -> SessionEntry:
        """End ``session`` and start its successor under the same key.

        ``compression`` continues the conversation (the successor records the
        lineage); any other reason ends it, and whatever it had running is
        told (delegations are interrupted). ``seed``: see :meth:`SessionStore.rotate`.
        """
        lineage = reason == "compression"
        successor = await self.store.rotate(session.id, reason, lineage=lineage, route=route,
                                            seed=seed)
        if not lineage:
            for listener in self.session_end_listeners:
                await listener(session)
        return successor

    # output ------------------------------------------------------------------

    async def send(self, session: SessionEntry, route: Route, text: str, *,
                   kind: MessageKind = "reply",
                   recorded_with: Callable[[SendResult], Sequence[Op]] | None = None
                   ) -> SendResult:
        """Send ``text`` to ``route`` and record it in the session's transcript.

        Recorded once it went out, in one write with ``recorded_with(result)`` (a
        notification's sent id): a crash leaves the transcript and the outbox
        agreeing on whether the notice was said — never a second copy in the
        transcript when the outbox sends it again.
        """
        result = await self.post(route, text, kind=kind, session_id=session.id)
        if result.ok:
            extra = recorded_with(result) if recorded_with is not None else ()
            self.store.record_message(session.id, kind, text, with_ops=extra)
        return result

    async def post(self, route: Route, text: str, *, kind: MessageKind = "reply",
                   session_id: str | None = None) -> SendResult:
        """Send ``text`` to ``route`` without recording it in any transcript."""
        adapter = self.adapters.get(route.platform)
        if adapter is None:
            log.error("send_no_adapter", platform=route.platform, session_id=session_id)
            return SendResult.failed(f"platform {route.platform!r} is not running")
        result = await adapter.send(route, text, kind=kind, session_id=session_id)
        if result.ok:
            self.metrics.messages_out.labels(route.platform).inc()
        else:
            log.warning("send_failed", platform=route.platform, chat_id=route.chat_id,
                        thread_id=route.thread_id, error=result.error)
        return result

    # introspection and shutdown ----------------------------------------------

    def platform_connected(self, platform: str) -> None:
        """An adapter is (back) online: whatever waited for it may go now."""
        for listener in self.platform_listeners:
            listener(platform)

    def open_tabs(self, platform: str, chat_id: str) -> set[str]:
        """Tabs open on a conversation, for platforms that have tabs (the web chat)."""
        adapter = self.adapters.get(platform)
        return adapter.open_tabs(chat_id) if adapter is not None else set()

    def status_lines(self, turn: Turn) -> list[str]:
        lane = self._lanes.get(turn.session.session_key)
        waiting = len(lane.queue) if lane else 0
        busy = sum(1 for ln in self._lanes.values() if ln.busy)
        return [
            f"messages waiting in this conversation: {waiting}",
            f"conversations mid-turn: {busy}",
            *self.agent.status_lines(turn),
        ]

    @property
    def busy_session_keys(self) -> Iterable[str]:
        return [key for key, lane in self._lanes.items() if lane.busy]

    def lane_route(self, session_key: str) -> Route | None:
        """Where a conversation lives, from the live-session cache (no I/O)."""
        entry = self.store.cached_live(session_key)
        return entry.route if entry is not None else None

    def is_busy(self, session_key: str) -> bool:
        lane = self._lanes.get(session_key)
        return bool(lane and lane.busy)

    def stop_accepting(self) -> None:
        """Refuse new platform messages from now on (turns already queued still run)."""
        self._accepting = False

    async def drain(self, timeout: float) -> bool:
        """Stop taking messages and let queued turns finish; True when all did."""
        self._accepting = False
        tasks = [lane.task for lane in self._lanes.values() if lane.task]
        if not tasks:
            return True
        _, pending = await asyncio.wait(tasks, timeout=timeout)
        for task in pending:
            task.cancel()
        if pending:
            log.warning("drain_timeout", unfinished_conversations=len(pending))
            await asyncio.gather(*pending, return_exceptions=True)
        return not pending
