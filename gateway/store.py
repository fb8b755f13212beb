"""The session store: the single source of truth for where a session lives.

One aiosqlite connection in WAL mode. Lifecycle changes (create, end, rename)
commit before they return. Transcript lines and activity stamps are written
behind in batches, because a turn should not wait for a disk sync of its own
echo; :meth:`SessionStore.flush` makes them durable on demand.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

import aiosqlite
import structlog

from .migrations import migrate
from .route import Route

log = structlog.get_logger(__name__)

ArchivedFilter = Literal["exclude", "only", "include"]
ARCHIVED_FILTERS: tuple[str, ...] = ("exclude", "only", "include")

_LIVE_CACHE_SIZE = 10_000
_SESSION_COLUMNS = (
    "id, session_key, platform, route, created_at, last_active_at, ended_at, "
    "end_reason, parent_session_id, title, archived"
)


@dataclass(frozen=True, slots=True)
class SessionEntry:
    id: str
    session_key: str
    route: Route
    created_at: float
    last_active_at: float
    ended_at: float | None = None
    end_reason: str | None = None
    parent_session_id: str | None = None
    title: str | None = None
    archived: bool = False

    @property
    def is_live(self) -> bool:
        return self.ended_at is None

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "session_key": self.session_key,
            "platform": self.route.platform,
            "route": self.route.to_dict(),
            "created_at": self.created_at,
            "last_active_at": self.last_active_at,
            "ended_at": self.ended_at,
            "end_reason": self.end_reason,
            "parent_session_id": self.parent_session_id,
            "title": self.title,
            "archived": self.archived,
        }


@dataclass(frozen=True, slots=True)
class TranscriptLine:
    id: int
    session_id: str
    role: str
    text: str
    created_at: float

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "session_id": self.session_id, "role": self.role,
                "text": self.text, "created_at": self.created_at}


class SessionNotFound(LookupError):
    pass


class SessionStore:
    """Sessions and transcripts in ``state.db``. Use ``async with SessionStore(path)``."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._db: aiosqlite.Connection | None = None
        self._write_lock = asyncio.Lock()
        self._live: OrderedDict[str, SessionEntry] = OrderedDict()
        self._pending: list[tuple[str, tuple[Any, ...]]] = []
        self._creations: dict[str, tuple[SessionEntry, asyncio.Future[SessionEntry]]] = {}
        self._flusher: asyncio.Task[None] | None = None

    # lifecycle ---------------------------------------------------------

    async def initialize(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = await aiosqlite.connect(self.path, isolation_level=None)
        await self._db.execute("PRAGMA journal_mode=WAL")
        await self._db.execute("PRAGMA synchronous=NORMAL")
        await self._db.execute("PRAGMA busy_timeout=5000")
        await self._db.execute("PRAGMA foreign_keys=ON")
        await migrate(self._db)

    async def close(self) -> None:
        if self._db is None:
            return
        await self.flush()
        await self._db.close()
        self._db = None

    async def __aenter__(self) -> SessionStore:
        await self.initialize()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def is_open(self) -> bool:
        return self._db is not None

    @property
    def db(self) -> aiosqlite.Connection:
        if self._db is None:
            raise RuntimeError("the session store is not open")
        return self._db

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[aiosqlite.Connection]:
        """One write transaction at a time on the shared connection.

        Without the lock, statements of concurrent coroutines would land in
        each other's transactions.
        """
        async with self._write_lock:
            db = self.db
            await db.execute("BEGIN IMMEDIATE")
            try:
                yield db
            except BaseException:
                await db.rollback()
                raise
            await db.commit()

    # sessions ------------------------------------------------------------

    async def get_or_create(self, session_key: str, route: Route) -> SessionEntry:
        """The live session for a key, created with ``route`` when there is none.

        Creations that arrive together share one transaction; the partial
        unique index keeps it at one live session per key even across
        processes.
        """
        cached = self._live.get(session_key)
        if cached is not None:
            self._live.move_to_end(session_key)
            return cached
        pending = self._creations.get(session_key)
        if pending is None:
            pending = (_new_entry(session_key, route),
                       asyncio.get_running_loop().create_future())
            self._creations[session_key] = pending
            self._schedule_flush()
        return await asyncio.shield(pending[1])

    async def live_session(self, session_key: str) -> SessionEntry | None:
        cached = self._live.get(session_key)
        if cached is not None:
            return cached
        return await self._select_live(self.db, session_key)

    async def get(self, session_id: str) -> SessionEntry | None:
        async with self.db.execute(
            f"SELECT {_SESSION_COLUMNS} FROM sessions WHERE id = ?", (session_id,)
        ) as cur:
            row = await cur.fetchone()
        return _entry(row) if row else None

    async def end_session(self, session_id: str, reason: str) -> SessionEntry:
        """End one lifetime of a conversation; ending twice keeps the first reason."""
        async with self.transaction() as db:
            ended = await self._end(db, session_id, reason)
        self._forget(ended.session_key, session_id)
        return ended

    async def rotate(self, session_id: str, reason: str, *, lineage: bool = False) -> SessionEntry:
        """End a session and start the next one under the same key, atomically.

        ``lineage`` records the ended session as the parent (context
        compression); a reset (``/new``) starts a fresh, unrelated session.
        """
        async with self.transaction() as db:
            ended = await self._end(db, session_id, reason)
            successor = _new_entry(
                ended.session_key, ended.route,
                parent_session_id=ended.id if lineage else None,
            )
            await self._insert(db, successor)
        self._forget(ended.session_key, session_id)
        self._cache(successor)
        log.info("session_rotated", session_key=ended.session_key, ended_session_id=ended.id,
                 session_id=successor.id, reason=reason)
        return successor

    async def update_session(self, session_id: str, *, title: str | None = None,
                             archived: bool | None = None) -> SessionEntry:
        sets, params = [], []
        if title is not None:
            sets.append("title = ?")
            params.append(title)
        if archived is not None:
            sets.append("archived = ?")
            params.append(int(archived))
        async with self.transaction() as db:
            if sets:
                await db.execute(f"UPDATE sessions SET {', '.join(sets)} WHERE id = ?",
                                 (*params, session_id))
            row = await _fetchone(db, f"SELECT {_SESSION_COLUMNS} FROM sessions WHERE id = ?",
                                  (session_id,))
        if row is None:
            raise SessionNotFound(session_id)
        entry = _entry(row)
        if entry.is_live and entry.session_key in self._live:
            self._live[entry.session_key] = entry
        return entry

    async def list_sessions(self, archived: ArchivedFilter = "exclude", *,
                            live_only: bool = False, platform: str | None = None,
                            limit: int = 1000) -> list[SessionEntry]:
        if archived not in ARCHIVED_FILTERS:
            raise ValueError(f"archived must be one of {ARCHIVED_FILTERS}, not {archived!r}")
        where, params = [], []
        if archived == "exclude":
            where.append("archived = 0")
        elif archived == "only":
            where.append("archived = 1")
        if live_only:
            where.append("ended_at IS NULL")
        if platform is not None:
            where.append("platform = ?")
            params.append(platform)
        clause = f"WHERE {' AND '.join(where)}" if where else ""
        async with self.db.execute(
            f"SELECT {_SESSION_COLUMNS} FROM sessions {clause} "
            f"ORDER BY last_active_at DESC LIMIT ?", (*params, limit),
        ) as cur:
            rows = await cur.fetchall()
        return [_entry(r) for r in rows]

    # transcript and activity (written behind) ------------------------------

    def record_message(self, session_id: str, role: str, text: str) -> None:
        self._write_behind(
            "INSERT INTO messages (session_id, role, text, created_at) VALUES (?, ?, ?, ?)",
            (session_id, role, text, time.time()),
        )

    def touch(self, entry: SessionEntry, route: Route) -> SessionEntry:
        """Note activity and the latest route details (names, reply anchor)."""
        now = time.time()
        updated = replace(entry, last_active_at=now, route=route)
        cached = self._live.get(entry.session_key)
        if cached is not None and cached.id == entry.id:
            self._live[entry.session_key] = updated
        self._write_behind(
            "UPDATE sessions SET last_active_at = ?, route = ? WHERE id = ?",
            (now, json.dumps(route.to_dict()), entry.id),
        )
        return updated

    async def messages(self, session_id: str, limit: int = 1000) -> list[TranscriptLine]:
        await self.flush()
        async with self.db.execute(
            "SELECT id, session_id, role, text, created_at FROM messages "
            "WHERE session_id = ? ORDER BY id LIMIT ?", (session_id, limit),
        ) as cur:
            rows = await cur.fetchall()
        return [TranscriptLine(*row) for row in rows]

    async def flush(self) -> None:
        """Make every written-behind line durable."""
        while self._pending or self._creations or (self._flusher and not self._flusher.done()):
            if self._flusher and not self._flusher.done():
                await asyncio.shield(self._flusher)
            else:
                await self._flush_pending()

    def _write_behind(self, sql: str, params: tuple[Any, ...]) -> None:
        self._pending.append((sql, params))
        self._schedule_flush()

    def _schedule_flush(self) -> None:
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.get_running_loop().create_task(self._flush_loop())

    async def _flush_loop(self) -> None:
        while self._pending or self._creations:
            await self._flush_pending()

    async def _flush_pending(self) -> None:
        batch, self._pending = self._pending, []
        creations, self._creations = self._creations, {}
        if self._db is None:
            return
        try:
            async with self.transaction() as db:
                if creations:
                    created = await self._insert_many(db, [e for e, _ in creations.values()])
                for sql, rows in _group(batch):
                    await db.executemany(sql, rows)
        except Exception as exc:
            log.exception("store_write_failed", lines=len(batch), sessions=len(creations))
            for _, future in creations.values():
                if not future.done():
                    future.set_exception(exc)
            if not creations:
                raise
            return
        for key, (mine, future) in creations.items():
            entry = created.get(key)
            if future.done():
                continue
            if entry is None:  # ended by another process between insert and select
                future.set_exception(RuntimeError(f"session for {key} vanished while created"))
                continue
            self._cache(entry)
            if entry.id == mine.id:
                log.info("session_created", session_key=key, session_id=entry.id)
            future.set_result(entry)

    async def _insert_many(self, db: aiosqlite.Connection,
                           entries: list[SessionEntry]) -> dict[str, SessionEntry]:
        """Insert sessions unless their key is live already; the live row per key."""
        await db.executemany(
            f"INSERT OR IGNORE INTO sessions ({_SESSION_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
            [_row(e) for e in entries])
        live: dict[str, SessionEntry] = {}
        keys = [e.session_key for e in entries]
        for start in range(0, len(keys), 500):
            chunk = keys[start:start + 500]
            marks = ",".join("?" * len(chunk))
            async with db.execute(
                f"SELECT {_SESSION_COLUMNS} FROM sessions "
                f"WHERE ended_at IS NULL AND session_key IN ({marks})", chunk) as cur:
                for row in await cur.fetchall():
                    entry = _entry(row)
                    live[entry.session_key] = entry
        return live

    # helpers -------------------------------------------------------------

    async def _select_live(self, db: aiosqlite.Connection, key: str) -> SessionEntry | None:
        row = await _fetchone(
            db, f"SELECT {_SESSION_COLUMNS} FROM sessions "
                "WHERE session_key = ? AND ended_at IS NULL", (key,))
        return _entry(row) if row else None

    async def _insert(self, db: aiosqlite.Connection, e: SessionEntry) -> None:
        await db.execute(
            f"INSERT INTO sessions ({_SESSION_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?)", _row(e))

    async def _end(self, db: aiosqlite.Connection, session_id: str, reason: str) -> SessionEntry:
        await db.execute(
            "UPDATE sessions SET ended_at = ?, end_reason = ? "
            "WHERE id = ? AND ended_at IS NULL", (time.time(), reason, session_id))
        row = await _fetchone(db, f"SELECT {_SESSION_COLUMNS} FROM sessions WHERE id = ?",
                              (session_id,))
        if row is None:
            raise SessionNotFound(session_id)
        return _entry(row)

    def _cache(self, entry: SessionEntry) -> None:
        self._live[entry.session_key] = entry
        self._live.move_to_end(entry.session_key)
        while len(self._live) > _LIVE_CACHE_SIZE:
            self._live.popitem(last=False)

    def _forget(self, key: str, session_id: str) -> None:
        cached = self._live.get(key)
        if cached is not None and cached.id == session_id:
            del self._live[key]


def new_session_id() -> str:
    return uuid.uuid4().hex


def _new_entry(key: str, route: Route, parent_session_id: str | None = None) -> SessionEntry:
    now = time.time()
    return SessionEntry(id=new_session_id(), session_key=key, route=route, created_at=now,
                        last_active_at=now, parent_session_id=parent_session_id)


def _row(e: SessionEntry) -> tuple[Any, ...]:
    return (e.id, e.session_key, e.route.platform, json.dumps(e.route.to_dict()),
            e.created_at, e.last_active_at, e.ended_at, e.end_reason,
            e.parent_session_id, e.title, int(e.archived))


def _entry(row: Iterable[Any]) -> SessionEntry:
    (sid, key, _platform, route, created, active, ended, reason, parent, title,
     archived) = row
    return SessionEntry(
        id=sid, session_key=key, route=Route.from_dict(json.loads(route)),
        created_at=created, last_active_at=active, ended_at=ended, end_reason=reason,
        parent_session_id=parent, title=title, archived=bool(archived),
    )


async def _fetchone(db: aiosqlite.Connection, sql: str, params: tuple[Any, ...]) -> Any:
    async with db.execute(sql, params) as cur:
        return await cur.fetchone()


def _group(batch: list[tuple[str, tuple[Any, ...]]]) -> list[tuple[str, list[tuple[Any, ...]]]]:
    """Consecutive statements with the same SQL, so each run is one executemany."""
    groups: list[tuple[str, list[tuple[Any, ...]]]] = []
    for sql, params in batch:
        if groups and groups[-1][0] == sql:
            groups[-1][1].append(params)
        else:
            groups.append((sql, [params]))
    return groups
