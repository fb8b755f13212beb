"""The session store: the single source of truth for where a session lives.

Lifecycle changes (create, end, rename) commit before they return; creations
that arrive together share one group commit. Transcript lines and activity
stamps are written behind, because a turn should not wait for a disk sync of
its own echo; :meth:`SessionStore.flush` makes them durable on demand.
"""

from __future__ import annotations

import asyncio
import functools
import json
import sqlite3
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any, Literal

import structlog

from gateway.errors import RefusedInput, StoreError
from gateway.sessions.cache import LiveSessionCache
from gateway.store.group_commit import Op
from gateway.store.migrations import SESSIONS_CHANNEL
from gateway.store.row_locks import locking
from gateway.store.state import open_state_database
from gateway.words.events import NoticeInfo
from gateway.words.route import Route
from gateway.words.session_entry import SessionEntry

log = structlog.get_logger(__name__)

ArchivedFilter = Literal["exclude", "only", "include"]
ARCHIVED_FILTERS: tuple[str, ...] = ("exclude", "only", "include")

_LIVE_CACHE_SIZE = 10_000
#: the largest LIMIT or OFFSET the databases take (a 64-bit integer); past it is past the end
_SQL_INT_MAX = 2**63 - 1
_SESSION_COLUMNS = (
    "id, session_key, platform, route, created_at, last_active_at, ended_at, "
    "end_reason, parent_session_id, title, archived"
)

#: one line of a session's transcript; one per journal entry (``inbound_id``)
TRANSCRIPT_LINE = ("INSERT INTO messages (session_id, role, text, created_at, notice, "
                   "inbound_id) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING")


def transcript_row(session_id: str, role: str, text: str, *, notice: NoticeInfo | None = None,
                   inbound_id: int | None = None) -> tuple[Any, ...]:
    """:data:`TRANSCRIPT_LINE`'s parameters, stamped now."""
    return (session_id, role, text, time.time(),
            _notice_json(notice) if notice is not None else None, inbound_id)


@functools.lru_cache(maxsize=64)
def _notice_json(notice: NoticeInfo) -> str:
    """A notice's kind and outcome as stored (a handful of kinds and outcomes)."""
    return json.dumps(notice.to_dict())


@dataclass(frozen=True, slots=True)
class TranscriptLine:
    id: int
    session_id: str
    role: str
    text: str
    created_at: float
    #: a notice's kind and outcome, as JSON
    notice: str | None = None

    def to_dict(self) -> dict[str, Any]:
        data = {"id": self.id, "session_id": self.session_id, "role": self.role,
                "text": self.text, "created_at": self.created_at}
        if self.notice:
            data["notice"] = json.loads(self.notice)
        return data


class CannotResume(RefusedInput):
    """``/resume`` named a session that cannot be made live again; the message says why."""


class SessionNotFound(StoreError, LookupError):
    pass


class SessionStore:
    """Sessions and transcripts. ``async with SessionStore(location)`` opens the
    state database it lives in (a SQLite file's path, or a PostgreSQL URL); the
    outbox and job registry share it."""

    def __init__(self, location: str | Path) -> None:
        self.location = location
        self.db = open_state_database(location)
        self._live = LiveSessionCache(_LIVE_CACHE_SIZE)
        self._creations: dict[str, tuple[SessionEntry, asyncio.Future[SessionEntry]]] = {}
        self._creator: asyncio.Task[None] | None = None

    @property
    def path(self) -> Path:
        """The SQLite file (for a PostgreSQL store, its URL is :attr:`location`)."""
        return Path(self.location)

    async def initialize(self) -> None:
        await self.db.open()
        if self.db.shared:
            # another instance may end a session (/new there): this cache must not go
            # on calling it live (rule 5); a listener that was away forgets them all
            self.db.listen(SESSIONS_CHANNEL, self._ended_elsewhere)

    def _ended_elsewhere(self, session_id: str | None) -> None:
        if session_id is None:
            self._live.clear()
        else:
            self._live.forget(session_id)

    async def close(self) -> None:
        await self.db.close()

    async def __aenter__(self) -> SessionStore:
        await self.initialize()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def is_open(self) -> bool:
        return self.db.is_open

    # sessions ------------------------------------------------------------

    async def get_or_create(self, session_key: str, route: Route) -> SessionEntry:
        """The live session for a key, created with ``route`` when there is none.

        Creations that arrive together share one transaction; the partial
        unique index keeps it at one live session per key even across
        processes.
        """
        cached = self._live.by_key(session_key)
        if cached is not None:
            return cached
        pending = self._creations.get(session_key)
        if pending is None:
            pending = (_new_entry(session_key, route),
                       asyncio.get_running_loop().create_future())
            self._creations[session_key] = pending
            if self._creator is None or self._creator.done():
                self._creator = asyncio.get_running_loop().create_task(self._create_queued())
        return await asyncio.shield(pending[1])

    async def live_session(self, session_key: str) -> SessionEntry | None:
        cached = self._live.by_key(session_key)
        if cached is not None:
            return cached
        row = await self.db.fetchone(
            f"SELECT {_SESSION_COLUMNS} FROM sessions "
            "WHERE session_key = ? AND ended_at IS NULL", (session_key,))
        return _entry(row) if row else None

    def cached_live(self, session_key: str) -> SessionEntry | None:
        """The live session of a key if the cache has it (no I/O)."""
        return self._live.by_key(session_key)

    def is_live_session(self, session_id: str) -> bool:
        """True when ``session_id`` is known to be its key's live session (cache only:
        False means "not known", and the caller should look properly)."""
        return self._live.by_id(session_id) is not None

    async def get(self, session_id: str) -> SessionEntry | None:
        row = await self.db.fetchone(
            f"SELECT {_SESSION_COLUMNS} FROM sessions WHERE id = ?", (session_id,))
        return _entry(row) if row else None

    async def get_many(self, session_ids: Iterable[str]) -> dict[str, SessionEntry]:
        """Sessions by id; live ones come from the cache without a query."""
        found: dict[str, SessionEntry] = {}
        wanted = set(session_ids)
        for session_id in wanted:
            entry = self._live.by_id(session_id)
            if entry is not None:
                found[session_id] = entry
        missing = sorted(wanted - found.keys())
        generation = self._live.generation
        read: list[SessionEntry] = []
        for start in range(0, len(missing), 500):
            chunk = missing[start:start + 500]
            rows = await self.db.fetchall(
                f"SELECT {_SESSION_COLUMNS} FROM sessions WHERE id IN "
                f"({','.join('?' * len(chunk))})", chunk)
            for row in rows:
                entry = _entry(row)
                found[entry.id] = entry
                read.append(entry)
        # the live ones are known live from now on (the router asks again of each notice
        # it delivers), unless a session ended while this read was under way
        self._live.put_read(read, generation)
        return found

    async def lineage_tip(self, session_id: str) -> SessionEntry | None:
        """The newest session of ``session_id``'s compression chain (itself if none).

        Only compression continues a chain: a session ended by ``/new`` has
        no successor here, so its tip is the ended session itself.
        """
        row = await self.db.fetchone(
            f"WITH RECURSIVE chain(id, depth) AS ("
            f"  SELECT id, 0 FROM sessions WHERE id = ? "
            f"  UNION ALL SELECT s.id, chain.depth + 1 FROM sessions s "
            f"  JOIN chain ON s.parent_session_id = chain.id "
            f"  WHERE chain.depth < 10000) "
            f"SELECT {_SESSION_COLUMNS} FROM sessions WHERE id = "
            f"(SELECT id FROM chain ORDER BY depth DESC LIMIT 1)", (session_id,))
        return _entry(row) if row else None

    async def lineage(self, session_id: str) -> list[str]:
        """``session_id`` and every session compressed into it, oldest first."""
        rows = await self.db.fetchall(
            "WITH RECURSIVE chain(id, parent, depth) AS ("
            "  SELECT id, parent_session_id, 0 FROM sessions WHERE id = ? "
            "  UNION ALL SELECT s.id, s.parent_session_id, chain.depth + 1 FROM sessions s "
            "  JOIN chain ON s.id = chain.parent WHERE chain.depth < 10000) "
            "SELECT id FROM chain ORDER BY depth DESC", (session_id,))
        return [r[0] for r in rows]

    async def end_session(self, session_id: str, reason: str) -> SessionEntry:
        """End one lifetime of a conversation; ending twice keeps the first reason."""
        ended = await self.db.write(lambda conn: _end(conn, session_id, reason))
        self._live.forget(session_id)
        return ended

    async def rotate(self, session_id: str, reason: str, *, lineage: bool = False,
                     route: Route | None = None,
                     seed: Callable[[str], Sequence[Op]] | None = None) -> SessionEntry:
        """End a session and start the next one under the same key, atomically.

        ``lineage`` records the ended session as the parent (context
        compression); a reset (``/new``) starts a fresh, unrelated session.
        ``route`` is where the successor lives, when the caller knows it
        better than the stored one (the message that asked for the rotation).
        ``seed`` gives writes for the successor's id that commit with it (the
        agent's carried-over context).
        """
        def end_and_start(conn: sqlite3.Connection) -> tuple[SessionEntry, SessionEntry]:
            ended = _end(conn, session_id, reason)
            # the conversation keeps its name and its place in the archive
            successor = replace(_new_entry(ended.session_key, route or ended.route,
                                           parent_session_id=ended.id if lineage else None),
                                title=ended.title, archived=ended.archived)
            conn.execute(_INSERT_SESSION, _row(successor))
            for sql, params in (seed(successor.id) if seed is not None else ()):
                conn.execute(sql, params)
            return ended, successor

        ended, successor = await self.db.write(end_and_start)
        self._live.forget(session_id)
        self._live.put(successor)
        log.info("session_rotated", session_key=ended.session_key, ended_session_id=ended.id,
                 session_id=successor.id, reason=reason)
        return successor

    async def resume(self, session_id: str, earlier_id: str, *,
                     with_ops: Callable[[Sequence[str]], Sequence[Op]] | None = None
                     ) -> tuple[SessionEntry, SessionEntry]:
        """End the live ``session_id`` (reason ``resume``) and make ``earlier_id``, an
        ended session of the same conversation, its live session again — in one
        transaction, so the key never has two live sessions or none. A session that
        compression carried on is resumed at the end of its chain (where it went on).
        The resumed session keeps the conversation's name and place in the archive.
        ``with_ops(ids)`` gives writes that commit with it, for the resumed session's
        chain (its own work's notices offered again). The ended and the resumed session.
        """
        def swap(conn: sqlite3.Connection) -> tuple[SessionEntry, SessionEntry, list[str]]:
            # the live session, then the one to resume, held until this commits: a second
            # /resume (or /new) of this conversation waits, and then reads what this did
            live = _locked(conn, session_id)
            if live is None:
                raise SessionNotFound(session_id)
            chain = _chain_of(conn, earlier_id)
            if not chain:
                raise SessionNotFound(earlier_id)
            tip = _locked(conn, chain[-1].id)
            if tip is None:
                raise SessionNotFound(earlier_id)
            if tip.session_key != live.session_key:
                raise CannotResume(f"session {earlier_id} belongs to another conversation")
            if tip.id == live.id:
                raise CannotResume("that is the session you are in")
            if tip.is_live:
                raise CannotResume(f"session {tip.id} is live already")
            ended = _end(conn, live.id, "resume")
            conn.execute("UPDATE sessions SET ended_at = NULL, end_reason = NULL, "
                         "last_active_at = ?, title = ?, archived = ? WHERE id = ?",
                         (time.time(), ended.title, int(ended.archived), tip.id))
            ids = [c.id for c in chain]
            for sql, params in (with_ops(ids) if with_ops is not None else ()):
                conn.execute(sql, params)
            row = conn.execute(f"SELECT {_SESSION_COLUMNS} FROM sessions WHERE id = ?",
                               (tip.id,)).fetchone()
            return ended, _entry(row), ids

        ended, resumed, _ = await self.db.write(swap)
        self._live.forget(ended.id)
        self._live.put(resumed)
        log.info("session_resumed", session_key=resumed.session_key, session_id=resumed.id,
                 ended_session_id=ended.id)
        return ended, resumed

    async def name_if_unnamed(self, session_id: str, title: str) -> bool:
        """Give the session ``title`` only while it has none (a person's name is never
        overwritten); True when it took it."""
        def name(conn: sqlite3.Connection) -> Any:
            if conn.execute("UPDATE sessions SET title = ? WHERE id = ? AND title IS NULL",
                            (title, session_id)).rowcount != 1:
                return None
            return conn.execute(f"SELECT {_SESSION_COLUMNS} FROM sessions WHERE id = ?",
                                (session_id,)).fetchone()

        row = await self.db.write(name)
        if row is None:
            return False
        entry = _entry(row)
        if entry.is_live:
            self._live.refresh(entry)
        return True

    async def update_session(self, session_id: str, *, title: str | None = None,
                             archived: bool | None = None) -> SessionEntry:
        sets: list[str] = []
        params: list[Any] = []
        if title is not None:
            sets.append("title = ?")
            params.append(title)
        if archived is not None:
            sets.append("archived = ?")
            params.append(int(archived))
        def update(conn: sqlite3.Connection) -> Any:
            if sets:
                conn.execute(f"UPDATE sessions SET {', '.join(sets)} WHERE id = ?",
                             (*params, session_id))
            return conn.execute(f"SELECT {_SESSION_COLUMNS} FROM sessions WHERE id = ?",
                                (session_id,)).fetchone()

        row = await self.db.write(update)
        if row is None:
            raise SessionNotFound(session_id)
        entry = _entry(row)
        if entry.is_live:
            self._live.refresh(entry)
        return entry

    async def list_sessions(self, archived: ArchivedFilter = "exclude", *,
                            live_only: bool = False, platform: str | None = None,
                            limit: int = 1000, offset: int = 0) -> list[SessionEntry]:
        """Most recently active first, ``limit`` of them after skipping ``offset``: a
        listing that may stop short pages on with :meth:`count_sessions` beside it (ties
        in activity are ordered by id, so pages neither repeat nor skip a session)."""
        clause, params = _session_filter(archived, live_only, platform)
        await self.db.flush()
        rows = await self.db.fetchall(
            f"SELECT {_SESSION_COLUMNS} FROM sessions {clause} "
            f"ORDER BY last_active_at DESC, id DESC LIMIT ? OFFSET ?",
            (*params, min(limit, _SQL_INT_MAX), min(offset, _SQL_INT_MAX)))
        return [_entry(r) for r in rows]

    async def count_sessions(self, archived: ArchivedFilter = "exclude", *,
                             live_only: bool = False, platform: str | None = None) -> int:
        """How many sessions :meth:`list_sessions` pages through under the same filter."""
        clause, params = _session_filter(archived, live_only, platform)
        await self.db.flush()
        (count,) = await self.db.fetchone(f"SELECT COUNT(*) FROM sessions {clause}", params)
        return int(count)

    # transcript and activity (written behind) ------------------------------

    def record_message(self, session_id: str, role: str, text: str, *,
                       with_ops: Sequence[Op] = (), notice: NoticeInfo | None = None,
                       inbound_id: int | None = None) -> None:
        """A transcript line, written behind; ``with_ops`` commit in the same transaction.
        ``inbound_id``: the journal entry whose message the line is — one line per entry,
        so a message replayed after a crash keeps the line the life that died wrote."""
        self.db.write_behind([(TRANSCRIPT_LINE, transcript_row(
            session_id, role, text, notice=notice, inbound_id=inbound_id)), *with_ops])

    async def record_sent(self, session_id: str, role: str, text: str, *,
                          with_ops: Sequence[Op], notice: NoticeInfo | None = None) -> None:
        """A send's transcript line and its record (``with_ops``: a notice's sent id, a
        journaled message's reply), committed before this returns. The sender waits for
        it before its next send, so a crash can repeat at most the one send under way —
        never a batch of sends whose records were still queued."""
        await self.db.write([(TRANSCRIPT_LINE, transcript_row(
            session_id, role, text, notice=notice)), *with_ops])

    def touch(self, entry: SessionEntry, route: Route) -> SessionEntry:
        """Note activity and the latest route details (names, reply anchor)."""
        now = time.time()
        updated = replace(entry, last_active_at=now, route=route)
        self._live.refresh(updated)
        self.db.write_behind([(
            "UPDATE sessions SET last_active_at = ?, route = ? WHERE id = ?",
            (now, json.dumps(route.to_dict()), entry.id),
        )])
        return updated

    async def messages(self, session_id: str, limit: int = 1000) -> list[TranscriptLine]:
        await self.db.flush()
        rows = await self.db.fetchall(
            "SELECT id, session_id, role, text, created_at, notice FROM messages "
            "WHERE session_id = ? ORDER BY id LIMIT ?", (session_id, limit))
        return [TranscriptLine(*row) for row in rows]

    async def flush(self) -> None:
        """Make every written-behind line durable."""
        if self._creator is not None:
            await asyncio.shield(self._creator)
        await self.db.flush()

    async def _create_queued(self) -> None:
        while self._creations:
            creations, self._creations = self._creations, {}
            entries = [entry for entry, _ in creations.values()]
            try:
                created = await self.db.write(partial(_insert_many, entries=entries))
            except Exception as exc:
                log.exception("session_create_failed", sessions=len(entries))
                for _, future in creations.values():
                    if not future.done():
                        future.set_exception(exc)
                continue
            for key, (mine, future) in creations.items():
                entry = created.get(key)
                if future.done():
                    continue
                if entry is None:  # ended by another process between insert and select
                    future.set_exception(RuntimeError(f"session for {key} vanished while created"))
                    continue
                self._live.put(entry)
                if entry.id == mine.id:
                    log.info("session_created", session_key=key, session_id=entry.id)
                future.set_result(entry)

    # helpers -------------------------------------------------------------


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


def _session_filter(archived: ArchivedFilter, live_only: bool,
                    platform: str | None) -> tuple[str, list[Any]]:
    """The WHERE clause a listing and its count share."""
    if archived not in ARCHIVED_FILTERS:
        raise ValueError(f"archived must be one of {ARCHIVED_FILTERS}, not {archived!r}")
    where: list[str] = []
    params: list[Any] = []
    if archived == "exclude":
        where.append("archived = 0")
    elif archived == "only":
        where.append("archived = 1")
    if live_only:
        where.append("ended_at IS NULL")
    if platform is not None:
        where.append("platform = ?")
        params.append(platform)
    return (f"WHERE {' AND '.join(where)}" if where else ""), params


def _entry(row: Iterable[Any]) -> SessionEntry:
    (sid, key, _platform, route, created, active, ended, reason, parent, title,
     archived) = row
    return SessionEntry(
        id=sid, session_key=key, route=Route.from_dict(json.loads(route)),
        created_at=created, last_active_at=active, ended_at=ended, end_reason=reason,
        parent_session_id=parent, title=title, archived=bool(archived),
    )


_INSERT_SESSION = f"INSERT INTO sessions ({_SESSION_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?)"


def _insert_many(conn: sqlite3.Connection, *, entries: list[SessionEntry]
                 ) -> dict[str, SessionEntry]:
    """Insert sessions unless their key is live already; the live row per key."""
    # the partial unique index on live keys is the guard: a key live already adds nothing
    conn.executemany(_INSERT_SESSION + " ON CONFLICT DO NOTHING", [_row(e) for e in entries])
    live: dict[str, SessionEntry] = {}
    keys = [e.session_key for e in entries]
    for start in range(0, len(keys), 500):
        chunk = keys[start:start + 500]
        rows = conn.execute(
            f"SELECT {_SESSION_COLUMNS} FROM sessions "
            f"WHERE ended_at IS NULL AND session_key IN ({','.join('?' * len(chunk))})",
            chunk).fetchall()
        for row in rows:
            entry = _entry(row)
            live[entry.session_key] = entry
    return live


def _chain_of(conn: sqlite3.Connection, session_id: str) -> list[SessionEntry]:
    """``session_id``'s compression chain, oldest first, down to where it went on: the
    sessions compression carried into one another, as a person sees one session."""
    rows = conn.execute(
        f"WITH RECURSIVE up(id, depth) AS ("
        f"  SELECT id, 0 FROM sessions WHERE id = ? "
        f"  UNION ALL SELECT s.parent_session_id, up.depth + 1 FROM sessions s "
        f"  JOIN up ON s.id = up.id WHERE s.parent_session_id IS NOT NULL "
        f"  AND up.depth < 10000), "
        f"down(id, depth) AS ("
        f"  SELECT id, 0 FROM sessions WHERE id = ? "
        f"  UNION ALL SELECT s.id, down.depth + 1 FROM sessions s "
        f"  JOIN down ON s.parent_session_id = down.id WHERE down.depth < 10000) "
        f"SELECT {_SESSION_COLUMNS} FROM sessions WHERE id IN "
        f"(SELECT id FROM up UNION SELECT id FROM down) ORDER BY created_at, id",
        (session_id, session_id)).fetchall()
    return [_entry(r) for r in rows]


def _locked(conn: sqlite3.Connection, session_id: str) -> SessionEntry | None:
    """A session's row, held until the transaction ends (gateway/store/row_locks.py)."""
    row = conn.execute(f"SELECT {_SESSION_COLUMNS} FROM sessions WHERE id = ?{locking(conn)}",
                       (session_id,)).fetchone()
    return _entry(row) if row is not None else None


def _end(conn: sqlite3.Connection, session_id: str, reason: str) -> SessionEntry:
    conn.execute("UPDATE sessions SET ended_at = ?, end_reason = ? "
                 "WHERE id = ? AND ended_at IS NULL", (time.time(), reason, session_id))
    row = conn.execute(f"SELECT {_SESSION_COLUMNS} FROM sessions WHERE id = ?",
                       (session_id,)).fetchone()
    if row is None:
        raise SessionNotFound(session_id)
    return _entry(row)
