"""The built-in web chat: an aiohttp server with a WebSocket API and a small page.

A conversation is a chat (route: platform ``web``, chat_type ``dm``, chat_id =
conversation id); every browser tab is a *tab* with its own id. Whatever is
said into a conversation goes to every tab open on it and to no other.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import re
import time
import uuid
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import structlog
from aiohttp import WSMsgType, web

from gateway.config.settings import secret
from gateway.contract.adapter import Adapter, LiveReply
from gateway.contract.approval import DECISIONS, ApprovalRecord
from gateway.formatting.web_html import render as render_html
from gateway.inbound.checks import InputRefused, load_json, string_members
from gateway.platforms.web.conversations import conversation_routes, shown_fields
from gateway.platforms.web.fanout import FrameFanout
from gateway.platforms.web.files import file_json, file_routes
from gateway.platforms.web.input import CONVERSATION_RULE, valid_conversation
from gateway.platforms.web.live import StreamsElsewhere, WebLiveReply
from gateway.platforms.web.ops import ops_routes
from gateway.platforms.web.schedules import schedule_routes
from gateway.platforms.web.sessions import session_routes
from gateway.platforms.web.settings import WebConfig
from gateway.platforms.web.spec import PLATFORM
from gateway.words.events import MessageEvent, MessageKind, NoticeInfo, SendResult
from gateway.words.route import Route

if TYPE_CHECKING:
    from gateway.contract.host import AdapterHost
    from gateway.platforms.context import PlatformContext
    from gateway.store.state import StateDatabase
    from tools.scheduler import Scheduler

log = structlog.get_logger(__name__)

MAX_FRAME_BYTES = 64 * 1024
# aiohttp closes the socket on frames past its own limit; keep that far above
# ours so an oversized frame gets an error frame instead of a dropped tab.
_TRANSPORT_LIMIT = 16 * 1024 * 1024
_FRAME_ID = re.compile(r".{1,64}", re.DOTALL)
_LOOPBACK_NAMES = {"127.0.0.1", "localhost", "::1"}
#: the page loads nothing from elsewhere: whatever a message says cannot make it
_PAGE_POLICY = ("default-src 'self'; img-src 'self' data: blob:; "
                "style-src 'self' 'unsafe-inline'; script-src 'self' 'unsafe-inline'; "
                "connect-src 'self' ws: wss:; frame-ancestors 'none'; base-uri 'none'")


class WebAdapter(Adapter):
    platform = "web"
    message_limit = PLATFORM.capabilities.message_limit
    authenticates_users = True
    listens = True

    def __init__(self, config: WebConfig, scheduler: Scheduler | None = None, *,
                 shared: tuple[StateDatabase, str] | None = None) -> None:
        """``shared``: on a shared store, the store and this life's name there: frames
        reach a conversation's tabs on the other instances, and theirs the tabs here
        (gateway/platforms/web/fanout.py)."""
        self.config = config
        #: the schedules the REST API shows and changes (none: it answers 503)
        self.scheduler = scheduler
        self.port: int | None = None
        self._runner: AdapterHost | None = None
        self._site_runner: web.AppRunner | None = None
        self._tabs: dict[str, dict[str, _Tab]] = {}
        self._frames_sent = 0
        self.fanout = (FrameFanout(*shared, self._from_elsewhere) if shared is not None
                       else None)
        self._elsewhere = StreamsElsewhere()
        #: stopping: no new tab, and each conversation's tabs closed once its turn is done
        self._stopping = False
        self._closing: dict[str, asyncio.Task[None]] = {}

    # lifecycle -------------------------------------------------------------

    async def connect(self, runner: AdapterHost) -> None:
        self._runner = runner
        app = web.Application(middlewares=[self._auth_middleware])
        app.add_routes([
            web.get("/", self._index),
            web.get("/ws", self._websocket),
            *session_routes(lambda: self.runner.store, _json_error),
            *ops_routes(lambda: self.runner),
            *schedule_routes(lambda: self.scheduler, _json_error),
            *conversation_routes(lambda: self.runner, _json_error),
            *file_routes(lambda: self.runner, _json_error),
        ])
        self._site_runner = web.AppRunner(app, access_log=None)
        await self._site_runner.setup()
        site = web.TCPSite(self._site_runner, self.config.host, self.config.port)
        await site.start()
        server = site._server
        sockets = getattr(server, "sockets", None) or []
        self.port = sockets[0].getsockname()[1] if sockets else self.config.port
        if self.fanout is not None:
            self.fanout.start()
        log.info("web_chat_listening", url=f"http://{self.config.host}:{self.port}/")

    async def stop_receiving(self) -> None:
        """Take no new tab (its WebSocket upgrade is answered 503, and the page tries
        again: the next life, or another instance), and close each conversation's tabs
        with 1001 "going away" once its turn is done, so the page reconnects there. A
        frame on a tab still open is journaled and left for the next life."""
        self._stopping = True
        for conversation in list(self._tabs):
            self._close_after_turn(conversation)

    async def disconnect(self) -> None:
        if self.fanout is not None:
            await self.fanout.stop()
        for closing in self._closing.values():
            closing.cancel()
        await asyncio.gather(*self._closing.values(), return_exceptions=True)
        for conversation in list(self._tabs):
            await self._close_tabs(conversation)
        if self._site_runner is not None:
            await self._site_runner.cleanup()
            self._site_runner = None

    @property
    def connected(self) -> bool:
        return self._site_runner is not None

    @property
    def runner(self) -> AdapterHost:
        if self._runner is None:
            raise RuntimeError("the web chat is not connected")
        return self._runner

    def open_tabs(self, conversation: str) -> set[str]:
        """Ids of the tabs currently open on a conversation."""
        return set(self._tabs.get(conversation, {}))

    def _close_after_turn(self, conversation: str) -> None:
        closing = self._closing.get(conversation)
        if closing is None or closing.done():
            self._closing[conversation] = asyncio.create_task(
                self._close_when_idle(conversation), name=f"web-close:{conversation}")

    async def _close_when_idle(self, conversation: str) -> None:
        key = self.runner.session_key_for(_conversation_route(conversation))
        await self.runner.conversation_idle(key)  # its turn's last frames went out
        await self._close_tabs(conversation)

    async def _close_tabs(self, conversation: str) -> None:
        for tab in list(self._tabs.get(conversation, {}).values()):
            await tab.ws.close(code=1001, message=b"gateway stopping")

    # sending ---------------------------------------------------------------

    async def send(self, route: Route, text: str, *, kind: MessageKind = "reply",
                   session_id: str | None = None, dedupe_key: str | None = None,
                   notice: NoticeInfo | None = None,
                   stream: str | None = None) -> SendResult:
        """``stream``: the id of the deltas this message completes (the page puts it
        in their place)."""
        frame: dict[str, Any] = {
            "type": "message", "kind": kind, "text": text, **shown_fields(kind, text),
            "at": time.time(), "session_id": session_id,
            "session_key": self.runner.session_key_for(route),
            # false for a late notice from an ended session: the page stays where it is
            "live": session_id is None or self.runner.store.is_live_session(session_id)}
        if notice is not None:
            frame["notice"] = notice.to_dict()
        if dedupe_key is not None:
            # the same for a send repeated after a crash (a replayed message's reply, a
            # notice sent again): the page shows a key it has shown once only
            frame["key"] = hashlib.blake2b(dedupe_key.encode(), digest_size=8).hexdigest()
        if stream is not None:
            frame["stream"] = stream
        await self._broadcast(route.chat_id, frame)
        self._frames_sent += 1
        return SendResult.sent(f"web-{self._frames_sent}")

    def live_reply(self, route: Route, session_id: str | None) -> LiveReply:
        return WebLiveReply(self, route)

    async def ask_approval(self, route: Route, record: ApprovalRecord) -> SendResult:
        """An ``approval`` frame to every tab; a tab opened later is sent it on connect."""
        await self._broadcast(route.chat_id, _approval_frame(record))
        return SendResult.sent(f"web-approval-{record.id}")

    async def settle_approval(self, route: Route, record: ApprovalRecord) -> None:
        await self._broadcast(route.chat_id, {
            "type": "approval_decided", "id": record.id, "state": record.state,
            "decision": record.decision, "decided_by": record.decided_by,
            "text": record.outcome_text(), "at": time.time()})

    async def send_file(self, route: Route, path: Path, caption: str | None = None, *,
                        session_id: str | None = None) -> SendResult:
        """A message frame with the file's name, size, type and download ``url``."""
        text = caption or path.name
        frame: dict[str, Any] = {
            "type": "message", "kind": "reply", "text": text, "html": render_html(text),
            "at": time.time(), "session_id": session_id, "live": True,
            "session_key": self.runner.session_key_for(route), "file": file_json(path)}
        await self._broadcast(route.chat_id, frame)
        self._frames_sent += 1
        return SendResult.sent(f"web-{self._frames_sent}")

    async def delta(self, route: Route, frame: dict[str, Any]) -> None:
        """A streamed reply's growth, to every tab of the conversation; to other
        instances without its ``html`` (the whole reply so far, rendered), which they
        make from the text (``StreamsElsewhere``)."""
        await self._to_tabs_here(route.chat_id, frame)
        if self.fanout is not None:
            shared = {key: value for key, value in frame.items() if key != "html"}
            await self.fanout.publish(route.chat_id, shared, echo_only=False,
                                      live_only=False)

    async def typing(self, route: Route, active: bool) -> None:
        await self._broadcast(route.chat_id, {"type": "typing", "active": active},
                              live_only=True)

    async def status(self, route: Route, text: str) -> None:
        await self._broadcast(route.chat_id, {"type": "status", "text": text}, live_only=True)

    async def _broadcast(self, conversation: str, frame: dict[str, Any],
                         skip_tab: str | None = None, echo_only: bool = False,
                         live_only: bool = False) -> None:
        """To every tab open on the conversation, here and on other instances."""
        await self._to_tabs_here(conversation, frame, echo_only, live_only, skip_tab)
        if self.fanout is not None:
            await self.fanout.publish(conversation, frame, echo_only=echo_only,
                                      live_only=live_only)

    async def _to_tabs_here(self, conversation: str, frame: dict[str, Any],
                            echo_only: bool = False, live_only: bool = False,
                            skip_tab: str | None = None) -> None:
        tabs = [t.ws for tab, t in self._tabs.get(conversation, {}).items()
                if tab != skip_tab and (t.echo or not echo_only) and (t.live or not live_only)]
        if tabs:
            await asyncio.gather(*(self._send_frame(ws, frame) for ws in tabs))

    async def _from_elsewhere(self, conversation: str, frame: dict[str, Any],
                              echo_only: bool, live_only: bool) -> None:
        """A frame another instance sent into ``conversation``, to its tabs here."""
        frame = self._elsewhere.follow(frame, shown=bool(self._tabs.get(conversation)))
        await self._to_tabs_here(conversation, frame, echo_only, live_only)

    @staticmethod
    async def _send_frame(ws: web.WebSocketResponse, frame: dict[str, Any]) -> None:
        try:
            await ws.send_json(frame)
        except (ConnectionError, RuntimeError) as exc:
            # the tab went away mid-send; its conversation keeps the transcript
            log.debug("web_tab_send_failed", error=str(exc))

    # WebSocket ---------------------------------------------------------------

    async def _websocket(self, request: web.Request) -> web.StreamResponse:
        if self._stopping:  # a new tab belongs to the next life (or another instance)
            raise _json_error(503, "the gateway is stopping; connect again in a moment")
        conversation = request.query.get("conversation") or uuid.uuid4().hex[:16]
        if not valid_conversation(conversation):
            raise _json_error(400, CONVERSATION_RULE)
        route = _conversation_route(conversation)
        key = self.runner.session_key_for(route)

        ws = web.WebSocketResponse(max_msg_size=_TRANSPORT_LIMIT, heartbeat=30)
        if not ws.can_prepare(request).ok:
            raise _json_error(400, "this endpoint speaks WebSocket only")
        await ws.prepare(request)
        session = await self.runner.store.get_or_create(key, route)
        tab = _Tab(id=uuid.uuid4().hex[:12], ws=ws, echo=request.query.get("echo") == "1",
                   live=request.query.get("live") == "1")
        self._tabs.setdefault(conversation, {})[tab.id] = tab
        if self._stopping:  # the stop began while it was connecting
            self._close_after_turn(conversation)
        bound = log.bind(session_key=key, tab=tab.id)
        bound.info("web_tab_opened")
        try:
            await ws.send_json({"type": "ready", "tab": tab.id, "conversation": conversation,
                                "session_key": key, "session_id": session.id})
            if self.runner.approvals is not None:  # still waiting for a choice
                for record in await self.runner.approvals.pending_in(key):
                    await ws.send_json(_approval_frame(record))
            async for msg in ws:
                if msg.type == WSMsgType.TEXT:
                    await self._on_frame(ws, msg.data, route, tab.id)
                elif msg.type == WSMsgType.BINARY:
                    await ws.send_json(_error("binary frames are not supported; send JSON text"))
                elif msg.type == WSMsgType.ERROR:
                    bound.warning("web_tab_error", error=str(ws.exception()))
        finally:
            tabs = self._tabs.get(conversation, {})
            tabs.pop(tab.id, None)
            if not tabs:
                self._tabs.pop(conversation, None)
            bound.info("web_tab_closed")
        return ws

    async def _on_frame(self, ws: web.WebSocketResponse, data: str, route: Route,
                        tab: str) -> None:
        size = len(data.encode("utf-8"))
        if size > MAX_FRAME_BYTES:
            # a message frame is named by its id, read without decoding the rest, so that
            # the page marks that message failed instead of sending it again
            members = string_members(data, ("type", "id"))
            await ws.send_json(_error(_too_large(size, members.get("type") == "message"),
                                      _message_id(members)))
            return
        try:
            frame = load_json(data)
        except InputRefused as exc:
            # named by its id where it can be read, so that the page stops sending it
            await ws.send_json(_error(f"frame refused: {exc}", _message_id(exc.decoded)))
            return
        if isinstance(frame, dict) and frame.get("type") == "approve":
            await self._on_approve(ws, frame)
            return
        problem = _frame_problem(frame)
        if problem:
            await ws.send_json(_error(problem, _message_id(frame)))
            return
        text: str = frame["text"]
        frame_id: str | None = frame.get("id")
        received = self.runner.receive(
            MessageEvent(text=text, route=route, metadata={"tab": tab}),
            platform_id=f"{route.chat_id}:{frame_id}" if frame_id is not None else None,
            sent_at=_sent_at(frame))
        taken = await received.journaled
        if taken == "failed":
            await ws.send_json(_error("the message could not be recorded; send it again",
                                      frame_id, retry=True))
            return
        if taken == "refused":  # what is wrong with it is said in the conversation
            await ws.send_json(_error("the message was not taken; the conversation says why",
                                      frame_id))
            return
        if frame_id is not None:
            # journaled (now or before, when this is a resend): it will be handled once
            await ws.send_json({"type": "ack", "id": frame_id})
        if taken == "journaled":
            await self._broadcast(route.chat_id, {
                "type": "message", "kind": "user", "text": text, "html": render_html(text),
                "at": time.time(), "from_tab": tab,
            }, skip_tab=tab, echo_only=True)

    async def _on_approve(self, ws: web.WebSocketResponse, frame: dict[str, Any]) -> None:
        """``{"type": "approve", "id": ..., "decision": "once" | "session" | "deny"}``; the
        outcome goes to every tab as ``approval_decided``, a refusal to this one only."""
        approval_id, decision = frame.get("id"), frame.get("decision")
        if not isinstance(approval_id, str) or not approval_id:
            await ws.send_json(_error("an approve frame needs the approval's 'id'"))
            return
        if decision not in DECISIONS:
            await ws.send_json(_error("an approve frame's 'decision' is 'once', 'session' or "
                                      "'deny'", approval_id))
            return
        approvals = self.runner.approvals
        if approvals is None:
            await ws.send_json(_error("nothing here asks for approval", approval_id))
            return
        pressed = await approvals.press(approval_id, decision, platform="web",
                                        user_id="web", user_name="web")
        if not pressed.ok:
            await ws.send_json(_error(pressed.note, approval_id))

    # REST ------------------------------------------------------------------

    async def _index(self, request: web.Request) -> web.Response:
        page = resources.files("gateway.platforms.web").joinpath("static/index.html")
        return web.Response(text=page.read_text(encoding="utf-8"), content_type="text/html",
                            headers={"Content-Security-Policy": _PAGE_POLICY})

    @web.middleware
    async def _auth_middleware(self, request: web.Request, handler: Any) -> web.StreamResponse:
        expected = secret(self.config.token)
        if expected and request.path == "/":
            pass  # the page holds no secret: it asks for the token (sign-in form)
        elif expected:
            given = request.query.get("token") or _bearer(request.headers.get("Authorization"))
            if not given or not hmac.compare_digest(given.encode(), expected.encode()):
                raise _json_error(401, "missing or wrong token")
        else:
            # without a token the only guard is loopback: refuse what a web page
            # elsewhere could send (another Origin, a rebound DNS name)
            problem = _foreign_request(request)
            if problem:
                log.warning("web_request_refused", reason=problem, path=request.path)
                raise _json_error(403, problem)
        response: web.StreamResponse = await handler(request)
        return response


@dataclass(slots=True)
class _Tab:
    id: str
    ws: web.WebSocketResponse
    echo: bool  # wants to see what the conversation's other tabs send
    live: bool = False  # wants typing and status frames while a turn runs


def _conversation_route(conversation: str) -> Route:
    """A web conversation's place: one chat, whichever tab speaks in it."""
    return Route(platform="web", chat_type="dm", chat_id=conversation,
                 user_id="web", user_name="web")


def _foreign_request(request: web.Request) -> str | None:
    host = (request.host or "").rsplit(":", 1)[0].strip("[]").lower()
    if host not in _LOOPBACK_NAMES:
        return f"host {request.host!r} is not a loopback name; set platforms.web.token"
    origin = request.headers.get("Origin")
    if origin and urlsplit(origin).netloc.lower() != (request.host or "").lower():
        return f"cross-origin request from {origin!r} refused"
    return None


def _frame_problem(frame: Any) -> str | None:
    if not isinstance(frame, dict):
        return "a frame must be a JSON object"
    if frame.get("type") != "message":
        return ('unknown frame type; send {"type": "message", "text": "..."} or '
                '{"type": "approve", "id": "...", "decision": "once"}')
    text = frame.get("text")
    if not isinstance(text, str) or not text.strip():
        return "a message frame needs a non-empty string 'text'"
    frame_id = frame.get("id")
    if frame_id is not None and not (isinstance(frame_id, str)
                                     and _FRAME_ID.fullmatch(frame_id)):
        return "a message frame's 'id' must be a string of 1-64 characters"
    sent_at = frame.get("sent_at")
    if sent_at is not None and (isinstance(sent_at, bool)
                                or not isinstance(sent_at, int | float)):
        return "a message frame's 'sent_at' must be a number (Unix seconds)"
    return None


def _approval_frame(record: ApprovalRecord) -> dict[str, Any]:
    return {"type": "approval", "id": record.id, "command": record.command,
            "reason": record.reason, "tool": record.tool, "expires_at": record.expires_at,
            "session_id": record.address.session_id, "at": record.created_at}


def _sent_at(frame: dict[str, Any]) -> float | None:
    """When the user typed it (a page resending after a night offline says so), within
    reason: a clock ahead of ours counts as now."""
    sent_at = frame.get("sent_at")
    if sent_at is None:
        return None
    return min(float(sent_at), time.time())


def _error(message: str, frame_id: str | None = None, *,
           retry: bool = False) -> dict[str, Any]:
    """An error frame; one about a message frame names its id and says whether sending
    it again can help (a store that failed) or not (a frame refused for what it holds)."""
    error: dict[str, Any] = {"type": "error", "error": message}
    if frame_id is not None:
        error["id"] = frame_id
        error["retry"] = retry
    return error


def _too_large(size: int, message: bool) -> str:
    """The refusal of a frame over the limit; a message's says what to do instead."""
    if message:
        return (f"message too long: {size} bytes as sent, over the limit of "
                f"{MAX_FRAME_BYTES}; send it as a file instead")
    return f"frame too large: {size} bytes (limit {MAX_FRAME_BYTES})"


def _message_id(frame: Any) -> str | None:
    """The id of a message frame, when it has a valid one (to name it in a refusal)."""
    frame_id = frame.get("id") if isinstance(frame, dict) and frame.get("type") == "message" \
        else None
    return frame_id if isinstance(frame_id, str) and _FRAME_ID.fullmatch(frame_id) else None


def _json_error(status: int, message: str) -> web.HTTPException:
    cls = {400: web.HTTPBadRequest, 401: web.HTTPUnauthorized, 403: web.HTTPForbidden,
           404: web.HTTPNotFound, 503: web.HTTPServiceUnavailable}[status]
    return cls(text=json.dumps({"error": message}), content_type="application/json")


def _bearer(header: str | None) -> str | None:
    if header and header.lower().startswith("bearer "):
        return header[7:].strip()
    return None


def make_adapter(settings: WebConfig, context: PlatformContext) -> WebAdapter:
    """The registry's way in (gateway/platforms/web/spec.py)."""
    return WebAdapter(settings, context.scheduler, shared=context.shared)
