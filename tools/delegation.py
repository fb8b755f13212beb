"""Delegations: a sub-agent works in the background and its result comes home.

A delegation is recorded (dispatched → running → finished, or interrupted,
or lost) with the return address of the turn that started it. Its result is
an ``async_delegation`` notification, committed in the same transaction that
marks it finished, and routed by the one ownership rule like every notice.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import structlog

from gateway.cluster.lives import (
    ALONE,
    Acting,
    Life,
    instance_life,
    lives_over,
    still_acting,
    still_live_here,
)
from gateway.delivery.notifications import NewNotification
from gateway.delivery.outbox import Outbox
from gateway.errors import RefusedInput
from gateway.inbound.journal import acted_ops
from gateway.machine.processes import identity_alive, process_identity
from gateway.sessions.store import SessionStore
from gateway.store.group_commit import Op
from gateway.store.row_states import check_move
from gateway.store.state import StateDatabase
from gateway.tracing import tracing
from gateway.words.events import Outcome
from gateway.words.return_address import ReturnAddress
from gateway.words.session_entry import SessionEntry

log = structlog.get_logger(__name__)

#: runs one delegated task and returns the summary the owner will read
SubAgent = Callable[[str], Awaitable[str]]

_COLUMNS = ("id, task, state, session_key, session_id, tab_id, return_address, result, "
            "created_at, started_at, finished_at, owner, trace_parent")


class DelegationState(StrEnum):
    """A delegation: handed to a sub-agent, running, then finished, interrupted (the
    gateway stopped, or its session ended) or lost (its instance died)."""

    DISPATCHED = "dispatched"
    RUNNING = "running"
    FINISHED = "finished"
    INTERRUPTED = "interrupted"
    LOST = "lost"


#: the moves a delegation's state may make, and no others (tests/test_states.py reads
#: every UPDATE of the table against it)
DELEGATION_MOVES: dict[DelegationState, frozenset[DelegationState]] = {
    DelegationState.DISPATCHED: frozenset({DelegationState.RUNNING, DelegationState.FINISHED,
                                           DelegationState.INTERRUPTED, DelegationState.LOST}),
    DelegationState.RUNNING: frozenset({DelegationState.FINISHED, DelegationState.INTERRUPTED,
                                        DelegationState.LOST}),
    DelegationState.FINISHED: frozenset(),
    DelegationState.INTERRUPTED: frozenset(),
    DelegationState.LOST: frozenset(),
}
_RUNNING = (DelegationState.DISPATCHED, DelegationState.RUNNING)


@dataclass(slots=True)
class DelegationRecord:
    id: str
    task: str
    state: str
    session_key: str
    session_id: str
    tab_id: str | None
    address: ReturnAddress
    result: str | None
    created_at: float
    started_at: float | None
    finished_at: float | None
    #: the daemon process running it (``process_identity``)
    owner: str | None = None
    #: its trace (gateway/tracing.py): its end and its result notice join it
    trace_parent: str | None = None

    @classmethod
    def from_row(cls, row: Any) -> DelegationRecord:
        (did, task, state, key, sid, tab, address, result, created, started, finished,
         owner, trace_parent) = row
        return cls(did, task, state, key, sid, tab, ReturnAddress.from_json(address), result,
                   created, started, finished, owner, trace_parent)


    def to_dict(self) -> dict[str, Any]:
        """The fields ``homing jobs`` shows beside a job's (the result stays out: long)."""
        return {"id": self.id, "kind": "delegation", "command": self.task, "state": self.state,
                "started_at": self.started_at or self.created_at, "ended_at": self.finished_at,
                "exit_code": None, "watch_patterns": [], "session_key": self.session_key,
                "session_id": self.session_id, "thread_id": self.address.route.thread_id}


async def recent_delegations(db: StateDatabase, limit: int | None = None
                             ) -> list[DelegationRecord]:
    """The newest ``limit`` delegations (None: all of them), newest first."""
    if limit is None:
        rows = await db.fetchall(
            f"SELECT {_COLUMNS} FROM delegations ORDER BY created_at DESC")
    else:
        rows = await db.fetchall(
            f"SELECT {_COLUMNS} FROM delegations ORDER BY created_at DESC LIMIT ?", (limit,))
    return [DelegationRecord.from_row(r) for r in rows]


class DelegationRefused(RefusedInput):
    """The conversation has as many delegations running as it may."""


class DelegationManager:
    def __init__(self, db: StateDatabase, outbox: Outbox, store: SessionStore, subagent: SubAgent,
                 *, max_running_per_session: int = 3, life: Life = ALONE) -> None:
        self.db = db
        self.outbox = outbox
        self.store = store
        self.subagent = subagent
        self.max_running = max_running_per_session
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._records: dict[str, DelegationRecord] = {}
        self._closing = False
        #: this manager in this process: an in-process restart (tests) is a new owner
        self.owner = life.name or f"{process_identity()}-{uuid.uuid4().hex[:6]}"
        self.acting: Acting = life.acting  # (gateway/cluster/lives.py)

    async def delegate(self, task: str, address: ReturnAddress) -> DelegationRecord:
        """Start ``task`` in the background, reporting to ``address``; refuse past the limit."""
        running = self.running_in(address.session_key)
        if len(running) >= self.max_running:
            ids = ", ".join(r.id for r in running)
            raise DelegationRefused(
                f"{len(running)} delegations are already running in this conversation "
                f"({ids}); the limit is {self.max_running}. Wait for one to finish.")
        await still_acting(self.acting)  # (LifeOver: a survivor's turn starts it)
        delegation_id = "d" + uuid.uuid4().hex[:7]
        with tracing.span("delegation.start", delegation_id=delegation_id,
                          session_key=address.session_key, platform=address.route.platform,
                          thread_id=address.route.thread_id, task=tracing.text(task)) as span:
            trace_parent = span.traceparent
        record = DelegationRecord(
            id=delegation_id, task=task, state="dispatched",
            session_key=address.session_key, session_id=address.session_id,
            tab_id=address.tab_id, address=address, result=None, created_at=time.time(),
            started_at=None, finished_at=None, owner=self.owner, trace_parent=trace_parent)
        acted, owner = acted_ops(), self.owner

        def register(conn: sqlite3.Connection) -> None:
            still_live_here(conn, owner, "the delegation began")
            conn.execute(f"INSERT INTO delegations ({_COLUMNS}) VALUES "
                         "(?,?,?,?,?,?,?,?,?,?,?,?,?)",
                         (record.id, record.task, record.state, record.session_key,
                          record.session_id, record.tab_id, address.to_json(), None,
                          record.created_at, None, None, owner, trace_parent))
            for op in acted:
                conn.execute(*op)
        await self.db.write(register)
        self._records[record.id] = record
        self._tasks[record.id] = asyncio.create_task(self._run(record),
                                                     name=f"delegation:{record.id}")
        log.info("delegation_dispatched", delegation_id=record.id,
                 session_key=record.session_key, session_id=record.session_id)
        return record

    def running_in(self, session_key: str) -> list[DelegationRecord]:
        return [r for r in self._records.values() if r.session_key == session_key]

    async def _run(self, record: DelegationRecord) -> None:
        try:
            record.state, record.started_at = "running", time.time()
            await self.db.write([(f"UPDATE delegations SET state = '{DelegationState.RUNNING}', "
                                  f"started_at = ? WHERE id = ? "
                                  f"AND state = '{DelegationState.DISPATCHED}'",
                                  (record.started_at, record.id))])
            summary = await self.subagent(record.task)
            await self._finish(record, "finished", f"Delegation {record.id} finished.\n{summary}",
                               notify=True)
        except asyncio.CancelledError:
            if not self._closing:  # interrupted; on shutdown it stays running → reported lost
                await self._finish(record, "interrupted", None, notify=False)
        except Exception as exc:
            log.exception("delegation_failed", delegation_id=record.id)
            await self._finish(record, "finished",
                               f"Delegation {record.id} failed: {str(exc) or repr(exc)}",
                               notify=True, outcome="failed")
        finally:
            self._tasks.pop(record.id, None)
            self._records.pop(record.id, None)

    async def _finish(self, record: DelegationRecord, state: str, result: str | None, *,
                      notify: bool, outcome: Outcome = "ok") -> None:
        check_move(DELEGATION_MOVES, _RUNNING, DelegationState(state))
        record.state, record.result, record.finished_at = state, result, time.time()
        tracing.event("delegation.end", parent=record.trace_parent, delegation_id=record.id,
                      state=state, outcome=outcome if notify else None)
        ops: list[Op] = [("UPDATE delegations SET state = ?, result = ?, finished_at = ? "
                          f"WHERE id = ? AND state IN ('{DelegationState.DISPATCHED}', "
                          f"'{DelegationState.RUNNING}')",
                          (state, result, record.finished_at, record.id))]
        if notify and result is not None:
            await self.outbox.produce([_result_notice(record, result, "result", outcome)],
                                      with_ops=ops)
        else:
            await self.db.write(ops)
        log.info("delegation_ended", delegation_id=record.id, state=state)

    async def interrupt_session(self, session: SessionEntry) -> int:
        """Interrupt what ``session`` (or any session compressed into it) delegated."""
        lineage = set(await self.store.lineage(session.id))
        doomed = [self._tasks[r.id] for r in list(self._records.values())
                  if r.session_id in lineage and r.id in self._tasks]
        for task in doomed:
            task.cancel()
        await asyncio.gather(*doomed, return_exceptions=True)
        if doomed:
            log.info("delegations_interrupted", session_id=session.id, count=len(doomed))
        return len(doomed)

    async def recover(self) -> int:
        """Delegations an earlier daemon process was running when it stopped are lost;
        tell each owner once. Only those: this process's own, and any of a process
        that still runs, are left alone. On a shared store, a life's are taken with its
        row locked, in one transaction (gateway/cluster/lives.py): none it began while it
        still counted live is missed, and none is reported lost while it lives."""
        me = self.owner  # (what runs here is this owner's)

        def take(conn: sqlite3.Connection) -> list[DelegationRecord]:
            owners: list[str | None] = []

            def instance_lives() -> list[str | None]:
                owners.extend(r[0] for r in conn.execute(
                    "SELECT DISTINCT owner FROM delegations "
                    f"WHERE state IN ('{DelegationState.DISPATCHED}', "
                    f"'{DelegationState.RUNNING}') AND (owner IS NULL OR owner <> ?)", (me,)))
                return [o for o in owners if o is not None and instance_life(o) is not None]

            over = set(lives_over(conn, instance_lives))
            over.update(o for o in owners if (o is None or instance_life(o) is None)
                        and not _process_runs(o))
            rows = conn.execute(
                f"SELECT {_COLUMNS} FROM delegations WHERE state IN "
                f"('{DelegationState.DISPATCHED}', '{DelegationState.RUNNING}')").fetchall()
            lost: list[DelegationRecord] = []
            now = time.time()
            for record in map(DelegationRecord.from_row, rows):
                if record.owner not in over:
                    continue
                if conn.execute(
                        f"UPDATE delegations SET state = '{DelegationState.LOST}', "
                        "finished_at = ? WHERE id = ? AND state IN "
                        f"('{DelegationState.DISPATCHED}', '{DelegationState.RUNNING}')",
                        (now, record.id)).rowcount != 1:
                    continue
                text = (f"Delegation {record.id} was lost: the gateway stopped while it ran, "
                        f"so its result never came back.\nTask: {record.task}")
                conn.execute(*Outbox.insert_op(_result_notice(record, text, "lost", "failed")))
                lost.append(record)
            return lost

        lost = await self.db.write(take)
        for record in lost:
            tracing.event("delegation.end", parent=record.trace_parent, delegation_id=record.id,
                          state=DelegationState.LOST.value)
        if lost:
            self.outbox.wake()
        return len(lost)

    async def drain(self, timeout: float) -> None:
        """Let running delegations finish for up to ``timeout`` seconds (a graceful stop
        waits for them like for turns); what is still running then stays for
        :meth:`shutdown`."""
        tasks = list(self._tasks.values())
        if tasks:
            await asyncio.wait(tasks, timeout=timeout)

    async def shutdown(self) -> None:
        """Stop the sub-agents; their records stay running and are reported lost on restart."""
        self._closing = True
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def get(self, delegation_id: str) -> DelegationRecord | None:
        return await get_delegation(self.db, delegation_id)


async def get_delegation(db: StateDatabase, delegation_id: str) -> DelegationRecord | None:
    """One delegation as the store has it (``homing trace`` reads it without a manager)."""
    row = await db.fetchone(f"SELECT {_COLUMNS} FROM delegations WHERE id = ?",
                            (delegation_id,))
    return DelegationRecord.from_row(row) if row else None


def _process_runs(owner: str | None) -> bool:
    """The owner is a manager in another daemon process on this host that still runs."""
    process = (owner or "").rsplit("-", 1)[0]
    return process != process_identity() and identity_alive(process)


def _result_notice(record: DelegationRecord, text: str, sequence: str,
                   outcome: Outcome) -> NewNotification:
    return NewNotification(idempotency_key=f"{record.id}:async_delegation:{sequence}",
                           kind="async_delegation", address=record.address, text=text,
                           job_id=record.id, outcome=outcome, trace_parent=record.trace_parent)


async def delegate_task(manager: DelegationManager, task: str) -> DelegationRecord:
    """The ``delegate_task`` tool: a background sub-agent reporting to this conversation."""
    return await manager.delegate(task, ReturnAddress.capture())
