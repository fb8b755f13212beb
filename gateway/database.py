"""The state database: one aiosqlite connection, WAL, and group commit.

Writers hand their work to :meth:`Database.write` (await until committed) or
:meth:`Database.write_behind` (fire and forget). Everything queued while the
previous transaction ran is committed together in the next one, so a burst
of a thousand job exits costs a handful of transactions instead of a
thousand, and a caller still learns only after the commit that its write is
durable.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import aiosqlite
import structlog

from .migrations import migrate

log = structlog.get_logger(__name__)

T = TypeVar("T")
Op = tuple[str, Sequence[Any]]
#: work run inside a batch transaction: plain statements, or a function of the connection
Work = Sequence[Op] | Callable[[aiosqlite.Connection], Awaitable[Any]]


@dataclass(slots=True)
class _Queued:
    work: Work
    done: asyncio.Future[Any] | None


class Database:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._conn: aiosqlite.Connection | None = None
        self._lock = asyncio.Lock()
        self._queue: list[_Queued] = []
        self._flusher: asyncio.Task[None] | None = None

    async def open(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._conn = await aiosqlite.connect(self.path, isolation_level=None)
        await self._conn.execute("PRAGMA journal_mode=WAL")
        await self._conn.execute("PRAGMA synchronous=NORMAL")
        await self._conn.execute("PRAGMA busy_timeout=10000")
        await self._conn.execute("PRAGMA foreign_keys=ON")
        await migrate(self._conn)

    async def close(self) -> None:
        if self._conn is None:
            return
        await self.flush()
        await self._conn.close()
        self._conn = None

    @property
    def is_open(self) -> bool:
        return self._conn is not None

    @property
    def conn(self) -> aiosqlite.Connection:
        if self._conn is None:
            raise RuntimeError("the state database is not open")
        return self._conn

    # reading ---------------------------------------------------------------

    async def fetchone(self, sql: str, params: Sequence[Any] = ()) -> Any:
        async with self.conn.execute(sql, params) as cur:
            return await cur.fetchone()

    async def fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        async with self.conn.execute(sql, params) as cur:
            return list(await cur.fetchall())

    # writing ---------------------------------------------------------------

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[aiosqlite.Connection]:
        """An immediate transaction of its own, for claims that must not wait.

        One at a time: on a shared connection, statements of concurrent
        coroutines would otherwise land in each other's transactions.
        """
        async with self._lock:
            conn = self.conn
            await conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                await conn.rollback()
                raise
            await conn.commit()

    async def write(self, work: Work) -> Any:
        """Queue ``work`` for the next group commit; return its result once committed."""
        done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._enqueue(_Queued(work, done))
        return await asyncio.shield(done)

    def write_behind(self, work: Work) -> None:
        """Queue ``work`` without waiting; failures are logged, and :meth:`flush` waits."""
        self._enqueue(_Queued(work, None))

    async def flush(self) -> None:
        while self._queue or (self._flusher is not None and not self._flusher.done()):
            if self._flusher is not None and not self._flusher.done():
                await asyncio.shield(self._flusher)
            else:
                await self._commit_queued()

    def _enqueue(self, item: _Queued) -> None:
        self._queue.append(item)
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.get_running_loop().create_task(self._flush_loop())

    async def _flush_loop(self) -> None:
        while self._queue:
            await self._commit_queued()

    async def _commit_queued(self) -> None:
        batch, self._queue = self._queue, []
        if not batch or self._conn is None:
            return
        try:
            async with self.transaction() as conn:
                results = await _run_batch(conn, batch)
        except Exception:
            # one bad write must not sink the others: retry each on its own
            log.warning("group_commit_failed_retrying_individually", writes=len(batch))
            for item in batch:
                await self._commit_alone(item)
            return
        for item, result in zip(batch, results, strict=True):
            if item.done is not None and not item.done.done():
                item.done.set_result(result)

    async def _commit_alone(self, item: _Queued) -> None:
        try:
            async with self.transaction() as conn:
                (result,) = await _run_batch(conn, [item])
        except Exception as exc:
            if item.done is None:
                log.exception("write_behind_failed")
            elif not item.done.done():
                item.done.set_exception(exc)
            return
        if item.done is not None and not item.done.done():
            item.done.set_result(result)


async def _run_batch(conn: aiosqlite.Connection, batch: list[_Queued]) -> list[Any]:
    """Run queued work in order; runs of one statement become one executemany."""
    results: list[Any] = [None] * len(batch)
    run_sql: str | None = None
    run_rows: list[Sequence[Any]] = []
    for index, item in enumerate(batch):
        if callable(item.work):
            if run_sql is not None:
                await conn.executemany(run_sql, run_rows)
                run_sql, run_rows = None, []
            results[index] = await item.work(conn)
            continue
        for sql, params in item.work:
            if sql != run_sql:
                if run_sql is not None:
                    await conn.executemany(run_sql, run_rows)
                run_sql, run_rows = sql, []
            run_rows.append(params)
    if run_sql is not None:
        await conn.executemany(run_sql, run_rows)
    return results
