"""Approvals: an action of the model waits in the store until a human decides.

The request is a row first, then a message in the conversation (buttons where
the platform has them). Every way of deciding — a button, a web frame,
``/approve``, the timer, the end of the session — goes through one conditional
update (``WHERE state = 'pending'``), so two presses, two tabs, or a press and
a ``/deny`` race to one outcome. The turn that asked waits on a future; once
it is gone (a restart), approving carries the action out as background work
reporting to the conversation, in the same transaction that records the
decision.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Protocol

import structlog

from gateway.approvals.rules import ApprovalPolicy, Need
from gateway.cluster.lives import ALONE, Life, life_alive
from gateway.config.platform import platform_of
from gateway.contract.approval import (
    APPROVAL_MOVES,
    COLUMNS,
    ApprovalRecord,
    ApprovalState,
    Decision,
    Pressed,
)
from gateway.errors import HomingError, RefusedInput
from gateway.store.migrations import APPROVALS_CHANNEL
from gateway.store.row_states import check_move
from gateway.store.state import StateDatabase
from gateway.words.context import SessionContext, current_session, session_context
from gateway.words.events import SendResult
from gateway.words.return_address import ReturnAddress
from gateway.words.storable import storable

if TYPE_CHECKING:
    from gateway.config.settings import ApprovalsConfig
    from gateway.contract.adapter import Adapter
    from gateway.sessions.store import SessionStore
    from gateway.words.session_entry import SessionEntry

log = structlog.get_logger(__name__)


class ApprovalsHost(Protocol):
    """What approvals ask of the message path (the runner): the transcripts, the
    platforms that show a request, whether this life may act, and whether the gateway
    is stopping."""

    @property
    def store(self) -> SessionStore: ...

    @property
    def adapters(self) -> Mapping[str, Adapter]: ...

    @property
    def accepting(self) -> bool: ...

#: records the decision inside the transaction that starts the action; raises
#: AlreadyDecided when someone else decided first (then nothing starts)
Decide = Callable[[sqlite3.Connection, str], None]
#: carries out an approved action whose turn is gone; returns how it ran
LateRun = Callable[[ApprovalRecord, Decide], Awaitable[None]]


#: how long a decision waits for its outcome to be shown before the turn goes on
DISPLAY_WAIT = 2.0
#: how long a stop waits for outcomes still being shown
STOP_WAIT = 5.0


class AlreadyDecided(RefusedInput):
    """The approval was decided (or expired) before this decision could count."""


class Restarting(HomingError):
    """The gateway is stopping while the approval waits; it stays pending."""


class Approvals:
    def __init__(self, db: StateDatabase, runner: ApprovalsHost, config: ApprovalsConfig, *,
                 clock: Callable[[], float] = time.time, life: Life = ALONE) -> None:
        self.db = db
        self.runner = runner
        self.config = config
        self.policy = ApprovalPolicy(config.mode, config.patterns, config.allow)
        self.clock = clock
        #: carries out approved actions whose turn is gone (the model agent sets it)
        self.late_run: LateRun | None = None
        self._waiting: dict[str, asyncio.Future[ApprovalRecord]] = {}
        #: the request's message id once it is posted (None: it was not), per approval
        self._shown: dict[str, asyncio.Future[str | None]] = {}
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        #: on a shared store, this life's name (gateway/cluster/lives.py): a choice that comes in
        #: through another instance runs in the turn waiting here
        self.life: str | None = life.name
        #: decided by this instance (so the store's notification of it is no news here)
        self._decided_here: set[str] = set()

    # lifecycle ---------------------------------------------------------------

    async def start(self) -> int:
        """Arm the expiry of every pending approval (an earlier process's too)."""
        if self.db.shared:
            self.db.listen(APPROVALS_CHANNEL, self._decided_elsewhere)
        rows = await self.db.fetchall(
            f"SELECT {COLUMNS} FROM approvals WHERE state = '{ApprovalState.PENDING}'")
        for row in rows:
            self._arm(ApprovalRecord.from_row(row))
        return len(rows)

    def release(self) -> None:
        """The gateway is stopping: turns waiting for a choice go on without it (their
        model is told), so the drain does not wait on a human. The approvals stay
        pending; approved after the restart, they run in the background."""
        for approval_id, waiter in list(self._waiting.items()):
            del self._waiting[approval_id]  # a choice made now is carried out late
            if not waiter.done():
                waiter.set_exception(Restarting(approval_id))

    async def stop(self) -> None:
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        if self._tasks:  # outcomes still being shown: a while, then let go
            _, late = await asyncio.wait(set(self._tasks), timeout=STOP_WAIT)
            for task in late:
                task.cancel()
            await asyncio.gather(*late, return_exceptions=True)

    # asking ------------------------------------------------------------------

    async def need(self, tool: str, text: str) -> Need | None:
        """Whether this action must be asked in the current conversation: None when the
        policy lets it run or the session granted its kind ("approve for this session")."""
        need = self.policy.check(tool, text)
        if need is None:
            return None
        lineage = await self.runner.store.lineage(current_session().session_id)
        marks = ",".join("?" * len(lineage))
        granted = await self.db.fetchone(
            f"SELECT 1 FROM approval_grants WHERE grant_key = ? AND session_id IN ({marks})",
            (need.grant, *lineage))
        return None if granted else need

    async def ask(self, tool: str, command: str, action: dict[str, Any],
                  need: Need) -> ApprovalRecord:
        """Post the request in the current conversation and wait for its outcome."""
        address = ReturnAddress.capture()
        now = self.clock()
        record = ApprovalRecord(
            id="a" + uuid.uuid4().hex[:7], tool=tool, command=command, action=action,
            reason=need.reason, grant_key=need.grant, address=address,
            requester=address.route.user_id, state=ApprovalState.PENDING, decision=None,
            decided_by=None, message_id=None, ran=None, created_at=now,
            expires_at=now + self.config.timeout_seconds, decided_at=None)
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[ApprovalRecord] = loop.create_future()
        self._waiting[record.id] = waiter
        self._shown[record.id] = loop.create_future()
        try:
            await self.db.write([record.insert_op(self.life)])
            log.info("approval_requested", approval_id=record.id, tool=tool,
                     reason=need.reason, session_key=address.session_key)
            await self._post(record)
            if not waiter.done():  # armed once it is shown: it cannot expire unseen
                self._arm(record)
            return await waiter
        except asyncio.CancelledError:
            if self.runner.accepting:  # /stop, not a shutdown: a restart keeps it pending
                await asyncio.shield(self._settle(record, ApprovalState.CANCELLED, None, None,
                                                  "the turn was stopped"))
            raise
        finally:
            self._waiting.pop(record.id, None)
            self._shown.pop(record.id, None)
            self._decided_here.discard(record.id)

    async def _post(self, record: ApprovalRecord) -> None:
        """The request in its conversation; ``_shown`` tells a decision made meanwhile
        (a quick tap) which message to show its outcome in."""
        route = record.address.route
        adapter = self.runner.adapters.get(route.platform)
        shown = self._shown[record.id]
        result: SendResult | None = None
        try:
            if adapter is not None:  # (fenced like every send: gateway/contract/fenced.py)
                result = await adapter.ask_approval(route, record)
            if result is not None and result.ok and result.message_id is not None:
                await self.db.write([("UPDATE approvals SET message_id = ? WHERE id = ?",
                                      (result.message_id, record.id))])
        except Exception as exc:  # an adapter bug: the request is cancelled, not left hanging
            log.exception("approval_post_failed", approval_id=record.id)
            result = SendResult.failed(repr(exc))
        finally:
            shown.set_result(result.message_id if result is not None and result.ok else None)
        if result is None or not result.ok:
            error = result.error if result is not None else f"{route.platform} is not running"
            log.warning("approval_not_posted", approval_id=record.id, error=error)
            await self._settle(record, ApprovalState.CANCELLED, None, None,
                               f"the request could not be posted: {error}")
            return
        self.runner.store.record_message(record.address.session_id, "system",
                                         record.request_text())

    # deciding ----------------------------------------------------------------

    def may_decide(self, record: ApprovalRecord, platform: str, user_id: str | None) -> bool:
        """The user whose message started the turn, or an approver (approvals.approvers)."""
        if user_id is None:
            return False
        if platform == record.platform and user_id == record.requester:
            return True
        approvers = self.config.approvers
        # one of several bots: its own approvers if listed, else its platform's
        return user_id in approvers.get(platform, approvers.get(platform_of(platform), []))

    async def press(self, approval_id: str, decision: Decision, *, platform: str,
                    user_id: str | None, user_name: str | None = None) -> Pressed:
        """Someone chose: decided once, whoever else chooses at the same moment. Shielded:
        a decision recorded is always carried through, even if the caller goes away."""
        return await asyncio.shield(self._press(approval_id, decision, platform=platform,
                                                user_id=user_id, user_name=user_name))

    async def _press(self, approval_id: str, decision: Decision, *, platform: str,
                     user_id: str | None, user_name: str | None) -> Pressed:
        record = await self.get(approval_id)
        if record is None:
            return Pressed(False, f"There is no approval {approval_id}.")
        if record.state != "pending":
            return Pressed(False, f"Already settled: {record.outcome_text()}")
        if not self.may_decide(record, platform, user_id):
            log.warning("approval_press_refused", approval_id=approval_id, platform=platform,
                        user_id=user_id)
            return Pressed(False, "Only the person who asked, or an approver, can decide this.")
        # a presser's name, as their platform gives it, is kept even when the store
        # cannot hold a character of it (gateway/words/storable.py)
        by = storable(user_name) if user_name else user_id
        if decision == "deny":
            settled = await self._settle(record, ApprovalState.DENIED, decision, by, None)
        elif record.id in self._waiting or await self._waits_elsewhere(record.id):
            settled = await self._settle(record, ApprovalState.APPROVED, decision, by,
                                         "run in the turn")
        else:
            settled = await self._run_late(record, decision, by)
        if settled is None:
            now = await self.get(approval_id)
            return Pressed(False, f"Already settled: {now.outcome_text() if now else '?'}")
        return Pressed(True, settled.outcome_text())

    async def _run_late(self, record: ApprovalRecord, decision: Decision,
                        by: str | None) -> ApprovalRecord | None:
        """The turn that asked is gone: carry the action out as background work, the
        decision committed with its start."""
        if self.late_run is None:
            return await self._settle(record, ApprovalState.CANCELLED, None, by,
                                      "nothing in this gateway can carry it out")
        decided: list[ApprovalRecord] = []

        def decide(conn: sqlite3.Connection, ran: str) -> None:
            settled = _settle_in(conn, record, ApprovalState.APPROVED, decision, by, ran)
            if settled is None:
                raise AlreadyDecided(record.id)
            decided.append(settled)

        address = record.address
        ctx = SessionContext(route=address.route, session_key=address.session_key,
                             session_id=address.session_id, tab_id=address.tab_id)
        try:
            with session_context(ctx):
                await self.late_run(record, decide)
        except AlreadyDecided:
            return None
        except Exception as exc:
            log.warning("approval_late_run_failed", approval_id=record.id, error=str(exc))
            why = f"it could not be started: {str(exc)[:200]}"
            if not decided:
                return await self._settle(record, ApprovalState.APPROVED, decision, by, why)
            await self.db.write([("UPDATE approvals SET ran = ? WHERE id = ?",
                                  (why, record.id))])
            decided[0] = decided[0].settled(ApprovalState.APPROVED, decision, by, why)
        if not decided:
            return None
        await self._after(decided[0])
        return decided[0]

    async def _waits_elsewhere(self, approval_id: str) -> bool:
        """Its turn waits in another instance that still runs (a shared store)."""
        if self.life is None:
            return False
        row = await self.db.fetchone("SELECT waiter FROM approvals WHERE id = ?",
                                     (approval_id,))
        waiter = row[0] if row else None
        return waiter is not None and waiter != self.life and await life_alive(self.db, waiter)

    def _decided_elsewhere(self, approval_id: str | None) -> None:
        """The store says an approval was decided (by any instance); None: maybe some."""
        for waiting in [approval_id] if approval_id is not None else list(self._waiting):
            if waiting in self._waiting and waiting not in self._decided_here:
                self._spawn(self._take_decision(waiting))

    async def _take_decision(self, approval_id: str) -> None:
        """A turn here waits for what another instance decided (and showed): go on."""
        record = await self.get(approval_id)
        waiter = self._waiting.get(approval_id)
        if (record is None or record.state == "pending" or waiter is None or waiter.done()
                or approval_id in self._decided_here):
            return
        timer = self._timers.pop(approval_id, None)
        if timer is not None:
            timer.cancel()
        log.info("approval_decided_elsewhere", approval_id=approval_id, state=record.state)
        waiter.set_result(record)

    async def _settle(self, record: ApprovalRecord, state: ApprovalState,
                      decision: Decision | None, by: str | None,
                      ran: str | None) -> ApprovalRecord | None:
        """Decide ``record`` if it is still pending; None when it was not."""
        if record.id in self._waiting:
            self._decided_here.add(record.id)
        settled = await self.db.write(
            lambda conn: _settle_in(conn, record, state, decision, by, ran))
        if settled is not None:
            await self._after(settled)
        return settled

    async def _after(self, settled: ApprovalRecord) -> None:
        shown = self._shown.get(settled.id)
        if shown is not None:  # decided while its request was being posted: wait for it
            message_id = await asyncio.shield(shown)
            settled = replace(settled, message_id=settled.message_id or message_id)
        log.info("approval_settled", approval_id=settled.id, state=settled.state,
                 decision=settled.decision, decided_by=settled.decided_by, ran=settled.ran)
        timer = self._timers.pop(settled.id, None)
        if timer is not None:
            timer.cancel()
        # shown before the turn goes on (so its outcome comes before the command's), but
        # never held up long by a platform: Discord wants a click answered within 3 s
        display = self._spawn(self._display(settled))
        await asyncio.wait({display}, timeout=DISPLAY_WAIT)
        waiter = self._waiting.get(settled.id)
        if waiter is not None and not waiter.done():
            waiter.set_result(settled)
        self.runner.store.record_message(settled.address.session_id, "system",
                                         f"{settled.id}: {settled.outcome_text()}")

    async def _display(self, settled: ApprovalRecord) -> None:
        route = settled.address.route
        adapter = self.runner.adapters.get(route.platform)
        if adapter is None:
            return
        try:
            await adapter.settle_approval(route, settled)
        except Exception as exc:  # the decision stands; its display is best effort
            log.warning("approval_display_failed", approval_id=settled.id, error=str(exc))

    def _arm(self, record: ApprovalRecord) -> None:
        delay = max(0.0, record.expires_at - self.clock())
        loop = asyncio.get_running_loop()
        self._timers[record.id] = loop.call_later(
            delay, lambda: self._spawn(self._expire(record)))

    def _spawn(self, work: Awaitable[Any]) -> asyncio.Future[Any]:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _expire(self, record: ApprovalRecord) -> None:
        self._timers.pop(record.id, None)
        try:
            await self._settle(record, ApprovalState.EXPIRED, None, None, None)
        except Exception:
            log.exception("approval_expiry_failed", approval_id=record.id)

    async def end_session(self, session: SessionEntry) -> None:
        """A session that ends takes its pending approvals with it (a session listener)."""
        lineage = await self.runner.store.lineage(session.id)
        marks = ",".join("?" * len(lineage))
        rows = await self.db.fetchall(
            f"SELECT {COLUMNS} FROM approvals WHERE state = '{ApprovalState.PENDING}' "
            f"AND session_id IN ({marks})", tuple(lineage))
        for row in rows:
            await self._settle(ApprovalRecord.from_row(row), ApprovalState.CANCELLED, None, None,
                               "the session ended")

    # reading -----------------------------------------------------------------

    async def get(self, approval_id: str) -> ApprovalRecord | None:
        row = await self.db.fetchone(f"SELECT {COLUMNS} FROM approvals WHERE id = ?",
                                     (approval_id,))
        return ApprovalRecord.from_row(row) if row else None

    async def pending_in(self, session_key: str) -> list[ApprovalRecord]:
        rows = await self.db.fetchall(
            f"SELECT {COLUMNS} FROM approvals WHERE state = '{ApprovalState.PENDING}' "
            "AND session_key = ? ORDER BY created_at", (session_key,))
        return [ApprovalRecord.from_row(r) for r in rows]


async def recent_approvals(db: StateDatabase, limit: int = 50) -> list[ApprovalRecord]:
    """Pending approvals, then the latest decisions (``homing approvals``)."""
    rows = await db.fetchall(
        f"SELECT {COLUMNS} FROM approvals "
        f"ORDER BY state != '{ApprovalState.PENDING}', created_at DESC LIMIT ?", (limit,))
    return [ApprovalRecord.from_row(r) for r in rows]


def _settle_in(conn: sqlite3.Connection, record: ApprovalRecord, state: ApprovalState,
               decision: Decision | None, by: str | None,
               ran: str | None) -> ApprovalRecord | None:
    check_move(APPROVAL_MOVES, [ApprovalState.PENDING], state)
    now = time.time()
    changed = conn.execute(
        "UPDATE approvals SET state = ?, decision = ?, decided_by = ?, ran = ?, "
        f"decided_at = ? WHERE id = ? AND state = '{ApprovalState.PENDING}'",
        (state, decision, by, ran, now, record.id)).rowcount
    if not changed:
        return None
    if decision == "session":
        conn.execute("INSERT INTO approval_grants (session_id, grant_key, approval_id, "
                     "granted_at) VALUES (?,?,?,?) ON CONFLICT (session_id, grant_key) "
                     "DO UPDATE SET approval_id = excluded.approval_id, "
                     "granted_at = excluded.granted_at",
                     (record.address.session_id, record.grant_key, record.id, now))
    row = conn.execute(f"SELECT {COLUMNS} FROM approvals WHERE id = ?",
                       (record.id,)).fetchone()
    return ApprovalRecord.from_row(row)
