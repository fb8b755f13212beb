"""The state database on SQLite: a writer and a reader connection, WAL, and group commit.

Writers hand their work to :meth:`Database.write` (await until committed) or
:meth:`Database.write_behind` (fire and forget); gateway/store/group_commit.py holds that
queue. Everything queued while the previous transaction ran is committed together
in the next one, in a single trip to aiosqlite's worker thread, so a burst of a
thousand job exits costs a handful of transactions instead of a thousand, and a
caller still learns only after the commit that its write is durable. Reads go
through a second connection and never see uncommitted writes.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import aiosqlite

from gateway.machine.private_files import private_dir, private_file
from gateway.store.group_commit import (
    BUSY,
    GroupCommit,
    Queued,
    StoreClosed,
    run_statements,
)
from gateway.store.group_commit import Work as _Work
from gateway.store.migrations import TABLES, migrate

#: work run inside a batch transaction on SQLite (see gateway/store/group_commit.py)
Work = _Work[sqlite3.Connection]
#: the page check's verdict is reused this long (see Database.health)
DEEP_CHECK_SECONDS = 10.0


class Database(GroupCommit[sqlite3.Connection]):
    shared = False  # one host: its processes take turns at the file's write lock

    def __init__(self, path: str | Path) -> None:
        super().__init__()
        self.path = Path(path)
        self._conn: aiosqlite.Connection | None = None
        self._reader: aiosqlite.Connection | None = None
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
            await self.write([("INSERT INTO store_health (id, checked_at) VALUES (1, ?) "
                               "ON CONFLICT (id) DO UPDATE SET checked_at = excluded.checked_at",
                               (time.time(),))])
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

    async def _close_connections(self) -> None:
        for conn in (self._reader, self._conn):
            if conn is not None:
                await conn.close()
        self._conn = self._reader = None

    @property
    def is_open(self) -> bool:
        return self._conn is not None

    def listen(self, channel: str, heard: Callable[[str | None], None]) -> None:
        """SQLite has no notifications: other processes on this host are found by the
        router's slow poll (a commit in this process wakes it directly)."""

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

    # writing (the queue is GroupCommit's) -----------------------------------

    async def _transaction(self, batch: list[Queued[sqlite3.Connection]]) -> list[Any]:
        results: list[Any] = await self._in_db_thread(_run_batch, batch)
        return results

    def _is_contention(self, exc: Exception) -> bool:
        # another process holds the write lock
        return isinstance(exc, sqlite3.OperationalError) and _is_busy(exc)

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


def _run_batch(conn: sqlite3.Connection, batch: list[Queued[sqlite3.Connection]]
               ) -> list[Any]:
    """One transaction (in the database thread)."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        results = run_statements(conn, batch)
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return results
