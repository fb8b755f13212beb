"""Group commit, apart from any one database: the queue both state backends write through.

Writers hand their work to :meth:`GroupCommit.write` (await until committed) or
:meth:`GroupCommit.write_behind` (fire and forget). Everything queued while the
previous transaction ran is committed together in the next one, so a burst of a
thousand job exits costs a handful of transactions instead of a thousand, and a
caller still learns only after the commit that its write is durable. There is no
other way to write, so no two coroutines can ever share a transaction by accident.

A backend (SQLite in sqlite.py, PostgreSQL in postgres.py) says how to run one
batch as one transaction (:meth:`GroupCommit._transaction`, usually with
:func:`run_statements` inside) and which of its errors mean "another writer is in
the way, try again" (:meth:`GroupCommit._is_contention`).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar, overload

import structlog

from gateway.errors import StoreError
from gateway.retry import RetryPolicy

log = structlog.get_logger(__name__)

T = TypeVar("T")
Op = tuple[str, Sequence[Any]]

#: another writer holding the lock: waited out for about four seconds
BUSY = RetryPolicy((0.05, 0.1, 0.2, 0.5, 1.0, 2.0), attempts=7)
MAX_BATCH = 2000  # writes per transaction
#: past this many queued writes, ``write_behind`` answers with a wait for room: a paced
#: writer keeps the queue within one batch, so a flush waits for two commits at most
MAX_QUEUED = MAX_BATCH - 1


class StoreClosed(StoreError, RuntimeError):
    """The state database is closed; nothing more can be written."""


class Executes(Protocol):
    """What :func:`run_statements` needs of a connection (sqlite3's has it)."""

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]], /) -> object: ...


C = TypeVar("C", bound=Executes)
#: work run inside a batch transaction: plain statements, or a function of the
#: connection that runs in the database thread (so it must not touch asyncio)
Work = Sequence[Op] | Callable[[C], Any]


class GatheredRows:
    """Rows of statements gathered for the next group commit (:meth:`GroupCommit.gather`):
    one ``executemany`` a statement, in the order each statement was first given. Open
    for more rows until the flusher takes it into a transaction."""

    __slots__ = ("committed", "open", "rows")

    def __init__(self, committed: asyncio.Future[Any]) -> None:
        self.rows: dict[str, list[Sequence[Any]]] = {}
        self.open = True
        #: done once the rows are committed (failed with the error when they could not be)
        self.committed = committed

    def add(self, sql: str, params: Sequence[Any]) -> None:
        rows = self.rows.get(sql)
        if rows is None:
            self.rows[sql] = [params]
        else:
            rows.append(params)

    def __call__(self, conn: Executes) -> None:
        for sql, rows in self.rows.items():
            conn.executemany(sql, rows)

    def __repr__(self) -> str:
        return "gathered rows: " + "; ".join(f"{sql.split('(')[0].strip()} ×{len(rows)}"
                                             for sql, rows in self.rows.items())


@dataclass(slots=True)
class Queued(Generic[C]):
    seq: int
    work: Work[C]
    done: asyncio.Future[Any] | None


class GroupCommit(Generic[C]):
    def __init__(self) -> None:
        self._queue: deque[Queued[C]] = deque()
        self._flusher: asyncio.Task[None] | None = None
        self._enqueued = 0  # sequence number of the last queued write
        self._settled = 0  # every write up to this number has committed or failed
        self._progress = asyncio.Event()
        #: writers waiting for the queue to shrink below MAX_QUEUED (backpressure)
        self._room: list[asyncio.Future[None]] = []
        #: transactions committed so far (each holds up to MAX_BATCH writes)
        self.commits = 0
        #: rows gathered for the next commit, while the flusher has not taken them
        self._gathered: GatheredRows | None = None

    # what a backend provides -------------------------------------------------

    @property
    def is_open(self) -> bool:
        raise NotImplementedError

    async def _transaction(self, batch: list[Queued[C]]) -> list[Any]:
        """Run ``batch`` as one transaction; each item's result, in order."""
        raise NotImplementedError

    def _is_contention(self, exc: Exception) -> bool:
        """``exc`` means another writer was in the way: the batch may simply be retried."""
        raise NotImplementedError

    async def _close_connections(self) -> None:
        raise NotImplementedError

    async def close(self) -> None:
        """Commit what is queued, then close; a write queued after that fails."""
        if not self.is_open:
            return
        try:
            await self.flush()
        finally:
            await self._close_connections()
            self._fail_queued()

    # writing ---------------------------------------------------------------

    @overload
    async def write(self, work: Callable[[C], T]) -> T: ...

    @overload
    async def write(self, work: Sequence[Op]) -> None: ...

    async def write(self, work: Work[C]) -> Any:
        """Queue ``work`` for the next group commit; once committed, return what a
        function of the connection returned (statements return nothing)."""
        done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._enqueue(work, done)
        # a writer cancelled while it waits cancels ``done``, and nothing else: the write
        # is queued and commits all the same (the commit sees ``done`` is done)
        return await done

    def write_behind(self, work: Work[C]) -> asyncio.Future[None]:
        """Queue ``work`` without waiting for its commit; failures are logged, and
        :meth:`flush` waits. The answer is the backpressure: done at once while the
        queue is short, else once it has room again — a writer in a loop awaits it, so
        it cannot outrun the commits and make every flush wait for a growing backlog."""
        self._enqueue(work, None)
        room: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if len(self._queue) <= MAX_QUEUED:
            room.set_result(None)
        else:
            self._room.append(room)
        return room

    def gather(self, ops: Iterable[Op]) -> asyncio.Future[Any]:
        """Write ``ops`` as rows of the statements gathered for the next commit: a
        thousand sends' records made while one transaction runs are one
        ``executemany`` a statement in the next, not a thousand writes. They commit
        together, in the order each statement was first gathered, and :meth:`flush`
        waits for them. The answer is done once they are committed (or failed), the same
        for every write gathered into that commit: one callback a commit, not a future a
        write."""
        gathered = self._gathered
        if gathered is None or not gathered.open:
            committed: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
            gathered = self._gathered = GatheredRows(committed)
            self._enqueue(gathered, committed)
        for sql, params in ops:
            gathered.add(sql, params)
        return gathered.committed

    async def flush(self) -> None:
        """Wait until every write queued before this call has committed (or failed)."""
        target = self._enqueued
        while self._settled < target:
            if self._flusher is None or self._flusher.done():
                self._start_flusher()
            self._progress.clear()
            await self._progress.wait()

    def _fail_queued(self) -> None:
        """At close: what is still queued fails, and nobody waits for room."""
        for item in self._queue:
            if item.done is not None and not item.done.done():
                item.done.set_exception(StoreClosed("the state database was closed"))
        self._queue.clear()
        self._make_room()

    def _enqueue(self, work: Work[C], done: asyncio.Future[Any] | None) -> None:
        if not self.is_open:
            raise StoreClosed("the state database is closed")
        self._enqueued += 1
        self._queue.append(Queued(self._enqueued, work, done))
        if self._flusher is None or self._flusher.done():
            self._start_flusher()

    def _start_flusher(self) -> None:
        self._flusher = asyncio.get_running_loop().create_task(self._flush_loop())

    async def _flush_loop(self) -> None:
        while self._queue and self.is_open:
            # bounded, so a storm of writes cannot grow each transaction past the last
            # and keep a flush (or the next awaited write) waiting ever longer
            batch = [self._queue.popleft() for _ in range(min(MAX_BATCH, len(self._queue)))]
            for item in batch:
                if isinstance(item.work, GatheredRows):
                    item.work.open = False  # rows from now on go into the next commit
            await self._commit(batch)
            self._settled = batch[-1].seq
            self._progress.set()
            if len(self._queue) <= MAX_QUEUED:
                self._make_room()
        self._make_room()  # closed, or empty: nobody waits for room that will not come

    def _make_room(self) -> None:
        waiting, self._room = self._room, []
        for room in waiting:
            if not room.done():
                room.set_result(None)

    async def _commit(self, batch: list[Queued[C]]) -> None:
        for attempt in BUSY.tries():
            try:
                results = await self._transaction(batch)
            except Exception as exc:
                # another writer holds the lock: wait and try the whole batch again
                if self._is_contention(exc) and not BUSY.is_last(attempt):
                    log.warning("state_db_busy_retrying", writes=len(batch), attempt=attempt + 1)
                    await BUSY.pause(attempt)
                    continue
                break
            self.commits += 1
            for item, result in zip(batch, results, strict=True):
                _resolve(item, result)
            return
        # one bad write must not sink the others: each on its own, so only it fails
        for item in batch:
            try:
                (result,) = await self._transaction([item])
            except Exception as exc:
                _fail(item, exc)
            else:
                _resolve(item, result)


def run_statements(conn: C, batch: list[Queued[C]]) -> list[Any]:
    """The body of a batch transaction (in the database thread): runs of one statement
    become one ``executemany``; a function of the connection is called in its place."""
    results: list[Any] = [None] * len(batch)
    run_sql: str | None = None
    run_rows: list[Sequence[Any]] = []
    for index, item in enumerate(batch):
        if callable(item.work):
            if run_sql is not None:
                conn.executemany(run_sql, run_rows)
                run_sql, run_rows = None, []
            results[index] = item.work(conn)
            continue
        for sql, params in item.work:
            if sql != run_sql:
                if run_sql is not None:
                    conn.executemany(run_sql, run_rows)
                run_sql, run_rows = sql, []
            run_rows.append(params)
    if run_sql is not None:
        conn.executemany(run_sql, run_rows)
    return results


def _resolve(item: Queued[Any], result: Any) -> None:
    if item.done is not None and not item.done.done():
        item.done.set_result(result)


def _fail(item: Queued[Any], exc: Exception) -> None:
    if item.done is None:
        log.error("write_behind_failed", error=repr(exc), work=_describe(item.work))
    elif not item.done.done():
        item.done.set_exception(exc)


def _describe(work: Work[Any]) -> str:
    if callable(work):
        return getattr(work, "__qualname__", repr(work))
    return "; ".join(f"{sql.split('(')[0].strip()} {list(params)[:3]}" for sql, params in work)
