"""The state database: a writer and a reader connection, WAL, and group commit.

Writers hand their work to :meth:`Database.write` (await until committed) or
:meth:`Database.write_behind` (fire and forget). Everything queued while the
previous transaction ran is committed together in the next one, in a single
trip to aiosqlite's worker thread, so a burst of a thousand job exits costs a
handful of transactions instead of a thousand, and a caller still learns only
after the commit that its write is durable. There is no other way to write,
so no two coroutines can ever share a transaction by accident. Reads go
through a second connection and never see uncommitted writes.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, overload

import aiosqlite
import structlog

from .migrations import TABLES, migrate
from .private_files import private_dir, private_file
from .retry import RetryPolicy

log = structlog.get_logger(__name__)

T = TypeVar("T")
Op = tuple[str, Sequence[Any]]
#: work run inside a batch transaction: plain statements, or a function of the
#: connection that runs in the database thread (so it must not touch asyncio)
Work = Sequence[Op] | Callable[[sqlite3.Connection], Any]

#: another process holding the write lock: waited out for about four seconds
BUSY = RetryPolicy((0.05, 0.1, 0.2, 0.5, 1.0, 2.0), attempts=7)
MAX_BATCH = 2000  # writes per transaction
#: past this many queued writes, ``write_behind`` answers with a wait for room: a paced
#: writer keeps the queue within one batch, so a flush waits for two commits at most
MAX_QUEUED = MAX_BATCH - 1
#: the page check's verdict is reused this long (see Database.health)
DEEP_CHECK_SECONDS = 10.0


class StoreClosed(RuntimeError):
    """The state database is closed; nothing more can be written."""


@dataclass(slots=True)
class _Queued:
    seq: int
    work: Work
    done: asyncio.Future[Any] | None


class Database:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._conn: aiosqlite.Connection | None = None
        self._reader: aiosqlite.Connection | None = None
        self._queue: deque[_Queued] = deque()
        self._flusher: asyncio.Task[None] | None = None
        self._enqueued = 0  # sequence number of the last queued write
        self._settled = 0  # every write up to this number has committed or failed
        self._progress = asyncio.Event()
        #: writers waiting for the queue to shrink below MAX_QUEUED (backpressure)
        self._room: list[asyncio.Future[None]] = []
        #: transactions committed so far (each holds up to MAX_BATCH writes)
        self.commits = 0
        self._identity: tuple[int, int] | None = None  # device and inode of the opened file
        self._pages_checked: tuple[float, str] | None = None  # (when, quick_check's verdict)

    async def open(self) -> None:
        private_dir(self.path.parent)
        private_file(self.path)  # 0600 from the start: SQLite gives its -wal and -shm the same
        try:
            self._conn = await _connect(self.path)
            await migrate(self._conn)  # first: a foreign file is refused before WAL touches it
            await _enable_wal(self._conn)
            await self._conn.execute("PRAGMA synchronous=NORMAL")
            self._reader = await _connect(self.path)
            await self._reader.execute("PRAGMA query_only=ON")
        except BaseException:
            await self._close_connections()
            raise
        stat = self.path.stat()
        self._identity = (stat.st_dev, stat.st_ino)

    async def health(self, *, deep_within: float | None = None) -> str | None:
        """None when the store can be read and written and is still the file it opened;
        otherwise what is wrong, in a sentence an operator can act on.

        The page check (``quick_check`` reads the whole file: half a second at 500 MB)
        runs on a connection of its own, at most once per ``deep_within`` seconds —
        ``/readyz`` may be polled often; the watcher asks each minute."""
        try:
            stat = self.path.stat()
        except FileNotFoundError:
            return f"the state database {self.path} was deleted while the daemon ran"
        if (stat.st_dev, stat.st_ino) != self._identity:
            return f"the state database {self.path} was replaced while the daemon ran"
        try:
            rows = await self.fetchall("SELECT name FROM sqlite_master WHERE type = 'table'")
            missing = TABLES - {name for (name,) in rows}
            if missing:
                return f"tables are missing from the state database: {', '.join(sorted(missing))}"
            verdict = await self._pages(DEEP_CHECK_SECONDS if deep_within is None
                                        else deep_within)
            if verdict != "ok":
                return f"the state database is damaged: {verdict}"
            await self.write([("INSERT OR REPLACE INTO store_health (id, checked_at) "
                               "VALUES (1, ?)", (time.time(),))])
        except StoreClosed:
            return "the state database is closed"
        except sqlite3.OperationalError as exc:  # locked, read-only, out of space...
            return f"the state database cannot be used: {exc}"
        except sqlite3.DatabaseError as exc:  # SQLite's own words for corrupt pages
            return f"the state database is damaged: {exc}"
        except sqlite3.Error as exc:
            return f"the state database cannot be used: {exc}"
        return None

    async def _pages(self, within: float) -> str:
        now = time.monotonic()
        if self._pages_checked is not None and now - self._pages_checked[0] < within:
            return self._pages_checked[1]

        def check() -> str:
            conn = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, timeout=5)
            try:
                (verdict,) = conn.execute("PRAGMA quick_check(1)").fetchone()
                return str(verdict)
            except sqlite3.DatabaseError as exc:
                return str(exc)
            finally:
                conn.close()

        verdict = await asyncio.to_thread(check)
        self._pages_checked = (now, verdict)
        return verdict

    async def close(self) -> None:
        if self._conn is None:
            return
        try:
            await self.flush()
        finally:
            await self._close_connections()
            for item in self._queue:
                if item.done is not None and not item.done.done():
                    item.done.set_exception(StoreClosed("the state database was closed"))
            self._queue.clear()
            self._make_room()

    async def _close_connections(self) -> None:
        for conn in (self._reader, self._conn):
            if conn is not None:
                await conn.close()
        self._conn = self._reader = None

    @property
    def is_open(self) -> bool:
        return self._conn is not None

    @property
    def conn(self) -> aiosqlite.Connection:
        if self._conn is None:
            raise StoreClosed("the state database is not open")
        return self._conn

    # reading ---------------------------------------------------------------

    async def fetchone(self, sql: str, params: Sequence[Any] = ()) -> Any:
        rows = list(await self._read().execute_fetchall(sql, params))
        return rows[0] if rows else None

    async def fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        return list(await self._read().execute_fetchall(sql, params))

    def _read(self) -> aiosqlite.Connection:
        if self._reader is None:
            raise StoreClosed("the state database is not open")
        return self._reader

    # writing ---------------------------------------------------------------

    @overload
    async def write(self, work: Callable[[sqlite3.Connection], T]) -> T: ...

    @overload
    async def write(self, work: Sequence[Op]) -> None: ...

    async def write(self, work: Work) -> Any:
        """Queue ``work`` for the next group commit; once committed, return what a
        function of the connection returned (statements return nothing)."""
        done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._enqueue(work, done)
        return await asyncio.shield(done)

    def write_behind(self, work: Work) -> asyncio.Future[None]:
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

    async def flush(self) -> None:
        """Wait until every write queued before this call has committed (or failed)."""
        target = self._enqueued
        while self._settled < target:
            if self._flusher is None or self._flusher.done():
                self._start_flusher()
            self._progress.clear()
            await self._progress.wait()

    def _enqueue(self, work: Work, done: asyncio.Future[Any] | None) -> None:
        if self._conn is None:
            raise StoreClosed("the state database is closed")
        self._enqueued += 1
        self._queue.append(_Queued(self._enqueued, work, done))
        if self._flusher is None or self._flusher.done():
            self._start_flusher()

    def _start_flusher(self) -> None:
        self._flusher = asyncio.get_running_loop().create_task(self._flush_loop())

    async def _flush_loop(self) -> None:
        while self._queue and self._conn is not None:
            # bounded, so a storm of writes cannot grow each transaction past the last
            # and keep a flush (or the next awaited write) waiting ever longer
            batch = [self._queue.popleft() for _ in range(min(MAX_BATCH, len(self._queue)))]
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

    async def _commit(self, batch: list[_Queued]) -> None:
        for attempt in BUSY.tries():
            try:
                results = await self._in_db_thread(_run_batch, batch)
            except sqlite3.OperationalError as exc:
                # another process holds the write lock: wait and try the whole batch again
                if _is_busy(exc) and not BUSY.is_last(attempt):
                    log.warning("state_db_busy_retrying", writes=len(batch), attempt=attempt + 1)
                    await BUSY.pause(attempt)
                    continue
                break
            except Exception:
                break
            self.commits += 1
            for item, result in zip(batch, results, strict=True):
                _resolve(item, result)
            return
        # one bad write must not sink the others: each on its own, so only it fails
        for item in batch:
            try:
                (result,) = await self._in_db_thread(_run_batch, [item])
            except Exception as exc:
                _fail(item, exc)
            else:
                _resolve(item, result)

    async def _in_db_thread(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run ``fn(sqlite3_connection, *args)`` in aiosqlite's worker thread, in one trip.

        aiosqlite has no public call for this; its ``_execute`` and ``_conn``
        are what its own methods use. One trip per transaction instead of
        one per statement is what keeps commits fast while the loop is busy.
        """
        conn = self.conn
        return await conn._execute(fn, conn._conn, *args)  # type: ignore[no-untyped-call]


async def _connect(path: Path) -> aiosqlite.Connection:
    conn = await aiosqlite.connect(path, isolation_level=None)
    await conn.execute("PRAGMA busy_timeout=10000")
    await conn.execute("PRAGMA foreign_keys=ON")
    return conn


async def _enable_wal(conn: aiosqlite.Connection) -> None:
    """Switch a database to WAL. Another process doing the same on a new database
    can make SQLite answer "locked" at once, without waiting: try again."""
    for attempt in BUSY.tries():
        try:
            await conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if not _is_busy(exc) or BUSY.is_last(attempt):
                raise
            await BUSY.pause(attempt)


def _is_busy(exc: sqlite3.OperationalError) -> bool:
    text = str(exc).lower()
    return "locked" in text or "busy" in text


def _resolve(item: _Queued, result: Any) -> None:
    if item.done is not None and not item.done.done():
        item.done.set_result(result)


def _fail(item: _Queued, exc: Exception) -> None:
    if item.done is None:
        log.error("write_behind_failed", error=repr(exc), work=_describe(item.work))
    elif not item.done.done():
        item.done.set_exception(exc)


def _describe(work: Work) -> str:
    if callable(work):
        return getattr(work, "__qualname__", repr(work))
    return "; ".join(f"{sql.split('(')[0].strip()} {list(params)[:3]}" for sql, params in work)


def _run_batch(conn: sqlite3.Connection, batch: list[_Queued]) -> list[Any]:
    """One transaction (in the database thread): runs of one statement become one executemany."""
    results: list[Any] = [None] * len(batch)
    conn.execute("BEGIN IMMEDIATE")
    try:
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
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return results
