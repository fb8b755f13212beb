"""Locks inside a write transaction, where the store has them.

On SQLite one write transaction runs at a time (its single writer), so a function of
the connection that reads, decides and then writes keeps the meaning it reads with. On
PostgreSQL the write transactions of every instance run side by side, at READ
COMMITTED: a function that decides on what it read must lock it first — the rows it
reads (``SELECT … FOR UPDATE``, or ``FOR SHARE`` beside others doing the same), or,
where there is no row to lock (a count an insert would change), a key
(:func:`lock_key`). A second transaction then waits until the first has committed, and
its next statement reads what the first wrote. A statement that re-checks the state in
its own WHERE (a conditional UPDATE, an upsert) needs neither: PostgreSQL evaluates it
again on the row as it is once the writer before it has committed.

Whether a connection locks rows is what it says of itself (``PgConnection.locks_rows``);
sqlite3's says nothing, has no ``FOR UPDATE`` in its SQL, and needs none. This module
is the one place that reads it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, Protocol

#: how a SELECT holds what it read: alone (to change it, or to act on it while nobody
#: else may), or shared (to write what depends on it staying as read)
Strength = Literal["update", "share"]
#: Homing's namespace of key locks: the first of ``pg_advisory_xact_lock``'s two keys
KEY_LOCKS = 0x686F6D6B


class Executes(Protocol):
    """What :func:`lock_key` needs of a connection (sqlite3's has it too)."""

    def execute(self, sql: str, params: Sequence[Any] = ..., /) -> object: ...


def locks_rows(conn: object) -> bool:
    """Whether ``conn`` (a write transaction's connection) locks the rows it is told to:
    PostgreSQL's does, SQLite's has no need."""
    return bool(getattr(conn, "locks_rows", False))


def locking(conn: object, strength: Strength = "update") -> str:
    """What ends a SELECT that holds the rows it reads until the transaction ends:
    `` FOR UPDATE`` or `` FOR SHARE``, or nothing where the store has no row locks."""
    if not locks_rows(conn):
        return ""
    return " FOR UPDATE" if strength == "update" else " FOR SHARE"


def lock_key(conn: Executes, key: str) -> None:
    """Hold ``key`` until the transaction ends, for a decision no row stands for (how
    many rows there are, that none is there yet): another transaction asking for the
    same key waits until this one has committed. Nothing to do on SQLite. (Two keys
    may share a lock by their hash: that costs a wait, never a wrong answer.)"""
    if locks_rows(conn):
        conn.execute("SELECT pg_advisory_xact_lock(CAST(? AS INTEGER), hashtext(?))",
                     (KEY_LOCKS, key))
