"""The state database on PostgreSQL: database.py's interface and group commit, for
several Homing instances sharing one store (issue 21; the daemon does not use it yet).

The writer is psycopg's synchronous connection, owned by one thread — the part
aiosqlite's thread plays for SQLite — so a batch is one transaction in one trip to
that thread, and a function of the connection runs there as it does on SQLite, given
a small adapter (:class:`PgConnection`). Inside the transaction, statements go out in
pipeline mode: a batch of plain statements costs about one round trip and the
commit. The write transactions of every instance run side by side, at READ
COMMITTED: order is kept where the promise needs it — per conversation, per job, per
schedule — by the statements themselves (conditional updates, unique keys, ``FOR
UPDATE SKIP LOCKED`` claims) and, where a function reads and then decides, by locking
what it read (gateway/store/row_locks.py), never by one lock for every write. Reads go
through a second connection, in autocommit, and never see uncommitted writes.

The SQL is the callers' own; only its placeholders are translated (``?`` → ``%s``).
The schema comes from the same list of migrations as SQLite's
(:func:`gateway.store.migrations.postgres_statements`); ``homing_schema`` records how far a
database got. docs/postgres-plan.md has the why and what is left.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psycopg
import structlog
from psycopg import errors
from psycopg.rows import TupleRow
from psycopg.types.numeric import Int8Dumper

from gateway.retry import RetryPolicy
from gateway.store.group_commit import GroupCommit, Queued, StoreClosed, run_statements
from gateway.store.migrations import MIGRATIONS, TABLES, ForeignDatabase, postgres_statements

log = structlog.get_logger(__name__)

#: the advisory lock every migration takes ("homing"): two instances starting at once
#: do not both apply one
MIGRATION_LOCK = 0x686F6D696E67
CONNECT_SECONDS = 10
#: a lost LISTEN connection is made again after these pauses (the last one repeats)
LISTEN_RETRY = RetryPolicy((0.5, 1.0, 2.0, 5.0), attempts=None)


class PgConnection:
    """The writer connection as a function of the connection sees it: sqlite3's
    ``execute`` and ``executemany``, with ``?`` placeholders; what comes back is
    psycopg's cursor (``fetchone``, ``fetchall``, ``rowcount``, iteration)."""

    #: write transactions run side by side here: a function that reads, decides and then
    #: writes locks what it reads (gateway/store/row_locks.py; sqlite3's has no such flag)
    locks_rows = True

    def __init__(self, raw: psycopg.Connection[TupleRow]) -> None:
        self.raw = raw
        #: the batch's pipeline while one runs
        self.pipeline: psycopg.Pipeline | None = None

    def execute(self, sql: str, params: Sequence[Any] = (), /) -> psycopg.Cursor[TupleRow]:
        cursor = self.raw.execute(translate(sql), params)
        if self.pipeline is not None:
            # the caller reads what it just did (its rowcount, its rows): get the answer
            self.pipeline.sync()
        return cursor

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]], /
                    ) -> psycopg.Cursor[TupleRow]:
        cursor = self.raw.cursor()
        cursor.executemany(translate(sql), rows)  # pipelined; its answer comes at the commit
        return cursor


class PgDatabase(GroupCommit[PgConnection]):
    shared = True  # instances on any host

    def __init__(self, url: str) -> None:
        super().__init__()
        self.url = url
        self._writer: PgConnection | None = None
        self._reader: psycopg.AsyncConnection[TupleRow] | None = None
        self._thread: ThreadPoolExecutor | None = None
        #: LISTEN connections, one task per channel (see :meth:`listen`)
        self._listeners: set[asyncio.Task[None]] = set()
        self._reconnecting = asyncio.Lock()

    async def open(self) -> None:
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="homing-pg-writer")
        try:
            raw = await self._in_writer_thread(_connect, self.url)
            self._writer = PgConnection(raw)
            await self._in_writer_thread(migrate, raw)
            self._reader = await psycopg.AsyncConnection.connect(
                self.url, autocommit=True, connect_timeout=CONNECT_SECONDS)
            _adapt(self._reader)
        except BaseException:
            await self._close_connections()
            raise

    def listen(self, channel: str, heard: Callable[[str | None], None]) -> None:
        """Call ``heard(payload)`` for each NOTIFY on ``channel``, from any instance
        (this one too), until closed.

        A connection of its own, in autocommit. When it is lost it is made again
        (with the redelivery backoff), and ``heard(None)`` is called once then: what
        was notified meanwhile is not kept by PostgreSQL for a listener that was away.
        """
        task = asyncio.get_running_loop().create_task(self._listen(channel, heard),
                                                      name=f"listen:{channel}")
        self._listeners.add(task)
        task.add_done_callback(self._listeners.discard)

    async def _listen(self, channel: str, heard: Callable[[str | None], None]) -> None:
        failures = 0
        while True:
            try:
                async with await psycopg.AsyncConnection.connect(
                        self.url, autocommit=True, connect_timeout=CONNECT_SECONDS) as conn:
                    await conn.execute(f'LISTEN "{channel}"')
                    if failures:
                        heard(None)  # what was notified while this listener was away
                    failures = 0
                    async for notice in conn.notifies():
                        heard(notice.payload)
            except psycopg.Error as exc:
                log.warning("store_listener_lost", channel=channel, error=str(exc))
                await LISTEN_RETRY.pause(failures)
                failures += 1

    async def _close_connections(self) -> None:
        for task in list(self._listeners):
            task.cancel()
        await asyncio.gather(*self._listeners, return_exceptions=True)
        writer, self._writer = self._writer, None
        reader, self._reader = self._reader, None
        try:
            if reader is not None:
                await reader.close()
            if writer is not None:
                await self._in_writer_thread(writer.raw.close)
        finally:
            if self._thread is not None:
                self._thread.shutdown(wait=False)  # idle now: it ends by itself
                self._thread = None

    @property
    def is_open(self) -> bool:
        return self._writer is not None

    async def health(self, *, deep_within: float | None = None) -> str | None:
        """None when the store can be read and written; otherwise what is wrong, in a
        sentence an operator can act on. (``deep_within`` is SQLite's page check:
        PostgreSQL checks its own pages.)"""
        try:
            rows = await self.fetchall(
                "SELECT table_name FROM information_schema.tables "
                "WHERE table_schema = current_schema()")
            missing = TABLES - {name for (name,) in rows}
            if missing:
                return f"tables are missing from the state database: {', '.join(sorted(missing))}"
            await self.write([("INSERT INTO store_health (id, checked_at) VALUES (1, ?) "
                               "ON CONFLICT (id) DO UPDATE SET checked_at = excluded.checked_at",
                               (time.time(),))])
        except StoreClosed:
            return "the state database is closed"
        except psycopg.Error as exc:  # gone, read-only, out of space, refused...
            return f"the state database cannot be used: {exc}"
        return None

    # reading ---------------------------------------------------------------

    async def fetchone(self, sql: str, params: Sequence[Any] = ()) -> Any:
        cursor = await self._execute_read(sql, params)
        return await cursor.fetchone()

    async def fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        cursor = await self._execute_read(sql, params)
        return await cursor.fetchall()

    async def _execute_read(self, sql: str, params: Sequence[Any]
                            ) -> psycopg.AsyncCursor[TupleRow]:
        """A read, on a connection made again if the server dropped the last one (a
        restart of PostgreSQL): a read may simply be asked again."""
        reader = self._read()
        if reader.broken or reader.closed:
            reader = await self._reconnect_reader(reader)
        try:
            return await reader.execute(translate(sql), params)
        except psycopg.OperationalError:
            if not reader.broken:
                raise
            reader = await self._reconnect_reader(reader)
            return await reader.execute(translate(sql), params)

    async def _reconnect_reader(self, broken: psycopg.AsyncConnection[TupleRow]
                                ) -> psycopg.AsyncConnection[TupleRow]:
        """A new reader in place of ``broken`` — once, however many reads found it so."""
        async with self._reconnecting:
            current = self._read()
            if current is not broken:  # another read made it again meanwhile
                return current
            reader = await psycopg.AsyncConnection.connect(
                self.url, autocommit=True, connect_timeout=CONNECT_SECONDS)
            _adapt(reader)
            self._reader = reader
            await broken.close()
            log.info("store_reconnected", connection="reader")
            return reader

    def _read(self) -> psycopg.AsyncConnection[TupleRow]:
        if self._reader is None:
            raise StoreClosed("the state database is not open")
        return self._reader

    # writing (the queue is GroupCommit's) -----------------------------------

    async def _transaction(self, batch: list[Queued[PgConnection]]) -> list[Any]:
        if self._writer is None:
            raise StoreClosed("the state database is not open")
        if self._writer.raw.broken or self._writer.raw.closed:
            # the server dropped it (a restart): the batch that saw it go failed — it may
            # have committed, so it is not run again — and this one goes on a new one
            old = self._writer.raw
            await self._in_writer_thread(old.close)
            raw = await self._in_writer_thread(_connect, self.url)
            self._writer = PgConnection(raw)
            log.info("store_reconnected", connection="writer")
        results: list[Any] = await self._in_writer_thread(_run_batch, self._writer, batch)
        return results

    def _is_contention(self, exc: Exception) -> bool:
        # what PostgreSQL answers a transaction that lost a race: it may simply run again
        return isinstance(exc, errors.SerializationFailure | errors.DeadlockDetected
                          | errors.LockNotAvailable)

    async def _in_writer_thread(self, fn: Callable[..., Any], *args: Any) -> Any:
        if self._thread is None:
            raise StoreClosed("the state database is not open")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._thread, functools.partial(fn, *args))


def _connect(url: str) -> psycopg.Connection[TupleRow]:
    raw = psycopg.connect(url, autocommit=True, connect_timeout=CONNECT_SECONDS)
    _adapt(raw)
    return raw


def connect_apart(url: str, *, timeout: float, application_name: str) -> PgConnection:
    """A connection apart from the store's writer, its thread and its queue, for a
    caller's thread whose few statements must not wait behind batches (an instance's
    lease renewal). In autocommit: a statement is its own transaction unless the caller
    opens one. ``timeout`` bounds the connect, each statement, and how long TCP waits for
    the server to take what was sent."""
    millis = max(1, int(timeout * 1000))
    raw = psycopg.connect(url, autocommit=True, connect_timeout=max(2, round(timeout)),
                          tcp_user_timeout=millis, options=f"-c statement_timeout={millis}",
                          application_name=application_name)
    _adapt(raw)
    return PgConnection(raw)


def _adapt(conn: psycopg.Connection[TupleRow] | psycopg.AsyncConnection[TupleRow]) -> None:
    # flags are integers in the schema (as on SQLite); psycopg would send a bool as boolean
    conn.adapters.register_dumper(bool, Int8Dumper)


def _run_batch(conn: PgConnection, batch: list[Queued[PgConnection]]) -> list[Any]:
    """One transaction (in the writer thread), beside the other instances' own."""
    with conn.raw.pipeline() as pipeline, conn.raw.transaction():
        conn.pipeline = pipeline
        try:
            return run_statements(conn, batch)
        finally:
            conn.pipeline = None


def migrate(conn: psycopg.Connection[TupleRow]) -> int:
    """Bring the schema up to date, one version per transaction; return the version
    reached. The migration lock keeps two instances starting at once from both applying
    one migration (PostgreSQL's DDL is transactional: a failed one leaves nothing)."""
    while True:
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
            version = _schema_version(conn)
            if version > len(MIGRATIONS):
                raise RuntimeError(
                    f"state database is at schema version {version}, newer than this "
                    f"homing ({len(MIGRATIONS)}); upgrade homing")
            if version == len(MIGRATIONS):
                return version
            for statement in postgres_statements(version):
                conn.execute(statement)
            conn.execute("UPDATE homing_schema SET version = %s", (version + 1,))


def _schema_version(conn: psycopg.Connection[TupleRow]) -> int:
    """How far the database got; a new one is marked at 0, another program's refused."""
    row = conn.execute("SELECT to_regclass('homing_schema') IS NOT NULL").fetchone()
    if row is not None and row[0]:
        (version,) = conn.execute("SELECT version FROM homing_schema").fetchone() or (0,)
        return int(version)
    found = [r[0] for r in conn.execute(
        "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()")]
    if found:
        raise ForeignDatabase(
            f"it is not a Homing state database (it has other tables: "
            f"{', '.join(sorted(found)[:5])}); point store.url at another database")
    conn.execute("CREATE TABLE homing_schema (version BIGINT NOT NULL)")
    conn.execute("INSERT INTO homing_schema (version) VALUES (0)")
    return 0


@functools.lru_cache(maxsize=2048)
def translate(sql: str) -> str:
    """``?`` placeholders as psycopg's ``%s`` (and a literal ``%`` as ``%%``), outside
    quoted strings, names and comments. Cached: the callers' statements are few."""
    out: list[str] = []
    i, n = 0, len(sql)
    while i < n:
        ch = sql[i]
        if ch in "'\"":  # a string or a quoted name: copied to its closing quote
            end = sql.find(ch, i + 1)
            while end != -1 and end + 1 < n and sql[end + 1] == ch:  # '' inside
                end = sql.find(ch, end + 2)
            end = n - 1 if end == -1 else end
            out.append(sql[i:end + 1].replace("%", "%%"))
            i = end + 1
            continue
        if sql.startswith("--", i):
            end = sql.find("\n", i)
            end = n if end == -1 else end
            out.append(sql[i:end].replace("%", "%%"))
            i = end
            continue
        out.append("%s" if ch == "?" else "%%" if ch == "%" else ch)
        i += 1
    return "".join(out)
