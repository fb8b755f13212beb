"""The cluster's rows in the state store: instances and leases, the statements that take,
renew and release them, the reads (``homing status``, a survivor's reconciliation), and
the store's clock. gateway/cluster/instances.py holds the behaviour around them: when to renew,
self-fencing, watching a lease.

Every statement is one text for SQLite 3.40 and PostgreSQL 15 (``?`` placeholders, an
upsert with ``ON CONFLICT … DO UPDATE … WHERE``, ``RETURNING``), and each guard is in
the statement itself, so it holds while PostgreSQL runs write transactions side by
side (tests/test_cluster.py races the acquiring statement on bare connections).

Time is the store's. On SQLite it is this host's clock (one file, one host); on
PostgreSQL the database server's, ``clock_timestamp()``, so instances on hosts whose
clocks disagree still agree on when a lease ran out. It is read inside the write
transaction (:func:`writer_now`) and passed as a parameter. A decision about a life —
renew it, write new work under it, take its work over — reads it only once the
instance's row is locked (:func:`lock_instance`): so the times of the transactions that
decide about one life follow the order in which they commit, and a survivor that found
the lease run out is never followed by a renewal, or a write of that life, that read an
earlier time.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, TypeAlias

from gateway.store.row_locks import locks_rows
from gateway.store.sqlite import Database
from gateway.store.state import StateDatabase

if TYPE_CHECKING:
    from gateway.store.postgres import PgConnection

    Store: TypeAlias = StateDatabase
    Conn: TypeAlias = sqlite3.Connection | PgConnection

_PG_CLOCK = "CAST(EXTRACT(EPOCH FROM clock_timestamp()) AS DOUBLE PRECISION)"
#: How an instance's row is locked on PostgreSQL by what decides about its life. A new
#: life of the name, and a survivor taking over a life's work, lock it alone (FOR UPDATE):
#: they wait for everything else on the row. The life's renewal locks it FOR NO KEY UPDATE
#: (which its UPDATE takes anyway): it waits for those two, but not for the life's own
#: writes, which lock the row FOR KEY SHARE — enough to keep a survivor waiting until they
#: have committed, and never a reason for the renewal to queue behind a batch of them.
_LOCKED_ALONE = " FOR UPDATE"
_LOCKED_RENEWING = " FOR NO KEY UPDATE"
_LOCKED_SHARED = " FOR KEY SHARE"
_PG_NOW = f"SELECT {_PG_CLOCK}"
_INSTANCE_COLUMNS = ("name, epoch, host, pid, started_at, renewed_at, lease_expires_at, "
                     "stopped_at")
_LEASE_COLUMNS = "name, holder, holder_epoch, epoch, acquired_at, expires_at"

#: a new life of a name: the next epoch, whatever state the last one left
_REGISTER = (
    "INSERT INTO instances (name, epoch, host, pid, started_at, renewed_at, lease_expires_at, "
    "stopped_at) VALUES (?, 1, ?, ?, ?, ?, ?, NULL) "
    "ON CONFLICT (name) DO UPDATE SET epoch = instances.epoch + 1, host = excluded.host, "
    "pid = excluded.pid, started_at = excluded.started_at, renewed_at = excluded.renewed_at, "
    "lease_expires_at = excluded.lease_expires_at, stopped_at = NULL "
    "RETURNING epoch")
#: only while this life's row is current: not superseded, stopped or run out
_RENEW = (
    "UPDATE instances SET renewed_at = ?, lease_expires_at = ? "
    "WHERE name = ? AND epoch = ? AND stopped_at IS NULL AND lease_expires_at >= ?")
_RENEW_LEASE = (
    "UPDATE leases SET expires_at = ? "
    "WHERE name = ? AND holder = ? AND holder_epoch = ? AND epoch = ?")
#: the one statement that takes a lease: only for a live instance (its row, this epoch,
#: not run out), only when the lease is free, run out or already this life's. A new
#: holder is a new lease epoch; the lease ends when the instance's own lease does.
ACQUIRE = (
    "INSERT INTO leases (name, holder, holder_epoch, epoch, acquired_at, expires_at) "
    "SELECT ?, name, epoch, 1, ?, lease_expires_at FROM instances "
    "WHERE name = ? AND epoch = ? AND stopped_at IS NULL AND lease_expires_at >= ? "
    "ON CONFLICT (name) DO UPDATE SET "
    "epoch = CASE WHEN leases.holder = excluded.holder "
    "AND leases.holder_epoch = excluded.holder_epoch THEN leases.epoch "
    "ELSE leases.epoch + 1 END, "
    "acquired_at = CASE WHEN leases.holder = excluded.holder "
    "AND leases.holder_epoch = excluded.holder_epoch THEN leases.acquired_at "
    "ELSE excluded.acquired_at END, "
    "holder = excluded.holder, holder_epoch = excluded.holder_epoch, "
    "expires_at = excluded.expires_at "
    "WHERE leases.holder IS NULL OR leases.expires_at < excluded.acquired_at "
    "OR (leases.holder = excluded.holder AND leases.holder_epoch = excluded.holder_epoch) "
    "RETURNING epoch")
_RELEASE = (
    "UPDATE leases SET holder = NULL, holder_epoch = NULL, expires_at = ? "
    "WHERE name = ? AND holder = ? AND holder_epoch = ? AND epoch = ?")
_RELEASE_ALL = (
    "UPDATE leases SET holder = NULL, holder_epoch = NULL, expires_at = ? "
    "WHERE holder = ? AND holder_epoch = ?")
#: PostgreSQL's :func:`renew` in one statement, so in one round trip (the renewing thread
#: of a busy process waits for the interpreter at each): the row locked, the clock read as
#: it comes up locked, this life's lease and the leases it holds extended only while it has
#: not run out. A row without a name says it was renewed; the others are the leases kept.
_PG_RENEW = f"""
WITH locked AS (
  SELECT i.epoch, i.stopped_at, i.lease_expires_at, {_PG_CLOCK} AS now
  FROM (SELECT epoch, stopped_at, lease_expires_at FROM instances
        WHERE name = %(name)s{_LOCKED_RENEWING}) AS i),
renewed AS (
  UPDATE instances SET renewed_at = locked.now, lease_expires_at = locked.now + %(lease)s
  FROM locked
  WHERE instances.name = %(name)s AND instances.epoch = %(epoch)s
    AND locked.epoch = %(epoch)s AND locked.stopped_at IS NULL
    AND locked.lease_expires_at >= locked.now
  RETURNING instances.lease_expires_at AS expires),
kept AS (
  UPDATE leases SET expires_at = renewed.expires
  FROM renewed, unnest(CAST(%(held)s AS TEXT[]), CAST(%(held_epochs)s AS BIGINT[]))
       AS held(name, epoch)
  WHERE leases.name = held.name AND leases.holder = %(name)s
    AND leases.holder_epoch = %(epoch)s AND leases.epoch = held.epoch
  RETURNING leases.name, leases.epoch)
SELECT CAST(NULL AS TEXT), CAST(0 AS BIGINT) FROM renewed
UNION ALL SELECT name, epoch FROM kept
"""
_MARK_STOPPED = (
    "UPDATE instances SET stopped_at = ?, lease_expires_at = ? "
    "WHERE name = ? AND epoch = ? AND stopped_at IS NULL")


@dataclass(frozen=True, slots=True)
class InstanceRecord:
    """An ``instances`` row: one life of a named instance."""

    name: str
    epoch: int
    host: str | None
    pid: int | None
    started_at: float
    renewed_at: float
    lease_expires_at: float
    stopped_at: float | None

    def state(self, now: float) -> str:
        """``live``, ``stopped`` (cleanly) or ``expired`` (dead, or cut off)."""
        if self.stopped_at is not None:
            return "stopped"
        return "live" if self.lease_expires_at >= now else "expired"

    def to_dict(self, now: float) -> dict[str, Any]:
        return asdict(self) | {"state": self.state(now)}


@dataclass(frozen=True, slots=True)
class LeaseRecord:
    """A ``leases`` row: who holds a single connection, and until when."""

    name: str
    holder: str | None
    holder_epoch: int | None
    epoch: int
    acquired_at: float | None
    expires_at: float

    def held(self, now: float) -> bool:
        return self.holder is not None and self.expires_at >= now

    def to_dict(self, now: float) -> dict[str, Any]:
        return asdict(self) | {"held": self.held(now)}


@dataclass(frozen=True, slots=True)
class Renewal:
    #: why this life is over (None: renewed)
    ended: str | None
    #: held leases whose renewal found another holder: (name, the epoch we held)
    lost: tuple[tuple[str, int], ...] = ()


# writing: functions of the connection, run by db.write in the writer thread ---------------

def register(conn: Conn, name: str, host: str, pid: int, lease_seconds: float
             ) -> tuple[int, InstanceRecord | None, float]:
    """Start a new life of ``name``: (its epoch, the previous life's row, the store's now).
    The previous life's writes that checked it live have committed by then, and a
    survivor taking it over has finished (both hold its row)."""
    previous, now = lock_instance(conn, name, exclusive=True)
    row = conn.execute(_REGISTER, (name, host, pid, now, now, now + lease_seconds)).fetchone()
    assert row is not None  # an upsert without a condition always writes
    return int(row[0]), previous, now


def renew(conn: Conn, name: str, epoch: int, lease_seconds: float,
          held: list[tuple[str, int]]) -> Renewal:
    """Extend this life's lease and the leases ``held`` (name, epoch) with it — only
    while it has not run out by the clock read after a survivor that locked the row
    first has finished: a lease it found run out is never renewed after it."""
    _, now = lock_instance(conn, name, exclusive=True)
    expires = now + lease_seconds
    if conn.execute(_RENEW, (now, expires, name, epoch, now)).rowcount != 1:
        return Renewal(ended=_why_ended(conn, name, epoch))
    lost = tuple((lease, lease_epoch) for lease, lease_epoch in held
                 if conn.execute(_RENEW_LEASE, (expires, lease, name, epoch,
                                                lease_epoch)).rowcount != 1)
    return Renewal(ended=None, lost=lost)


def renew_in_one_trip(conn: PgConnection, name: str, epoch: int, lease_seconds: float,
                      held: list[tuple[str, int]]) -> Renewal:
    """:func:`renew` on PostgreSQL in one statement, on a connection in autocommit (the
    statement is its own transaction): the same decision, in one round trip."""
    found = conn.raw.execute(_PG_RENEW, {
        "name": name, "epoch": epoch, "lease": lease_seconds,
        "held": [lease for lease, _ in held], "held_epochs": [e for _, e in held]}).fetchall()
    if not any(row[0] is None for row in found):
        return Renewal(ended=_why_ended(conn, name, epoch))
    kept = {(str(row[0]), int(row[1])) for row in found if row[0] is not None}
    return Renewal(ended=None, lost=tuple(h for h in held if h not in kept))


def acquire(conn: Conn, lease: str, name: str, epoch: int) -> tuple[bool, int, float]:
    """Take ``lease`` for this life: (held, the lease's epoch, store seconds until the
    other holder's lease runs out when not held)."""
    now = writer_now(conn)
    row = conn.execute(ACQUIRE, (lease, now, name, epoch, now)).fetchone()
    if row is not None:
        return True, int(row[0]), 0.0
    row = conn.execute("SELECT epoch, expires_at FROM leases WHERE name = ?",
                       (lease,)).fetchone()
    return (False, 0, 0.0) if row is None else (False, int(row[0]), float(row[1]) - now)


def release(conn: Conn, lease: str, name: str, epoch: int, lease_epoch: int) -> None:
    """Free ``lease`` if this tenure still holds it."""
    conn.execute(_RELEASE, (writer_now(conn), lease, name, epoch, lease_epoch))


def mark_stopped(conn: Conn, name: str, epoch: int) -> None:
    """A clean stop: what this life still holds is free, and it is not dead."""
    now = writer_now(conn)
    conn.execute(_RELEASE_ALL, (now, name, epoch))
    conn.execute(_MARK_STOPPED, (now, now, name, epoch))


def lock_instance(conn: Conn, name: str, *, exclusive: bool
                  ) -> tuple[InstanceRecord | None, float]:
    """Instance ``name``'s row (None: there is none) and the store's clock, for a
    decision about its life that must hold until this transaction commits: on
    PostgreSQL the row stays locked until then — alone (``exclusive``: to change it, or
    to take over the work of a life that is over) or shared (a life writing work that
    holds only while it is live: beside its renewal, see ``_LOCKED_SHARED``) — and the
    clock is read after the lock was granted. The
    row is locked whatever it says; the caller decides from what comes back.
    (gateway/cluster/lives.py holds the fence built on it.)"""
    records, now = lock_instances(conn, [name], exclusive=exclusive)
    return records.get(name), now


def lock_instances(conn: Conn, names: Iterable[str], *, exclusive: bool
                   ) -> tuple[dict[str, InstanceRecord], float]:
    """:func:`lock_instance` for several rows at once, locked in name order (so two
    transactions locking some of the same rows do not wait for each other in a
    circle); the rows found, by name, and the clock read after the last lock."""
    wanted = sorted(set(names))
    if not wanted:
        return {}, writer_now(conn)
    if not locks_rows(conn):
        found = conn.execute(f"SELECT {_INSTANCE_COLUMNS} FROM instances WHERE name IN "
                             f"({','.join('?' * len(wanted))}) ORDER BY name",
                             wanted).fetchall()
        return {r[0]: InstanceRecord(*r) for r in found}, writer_now(conn)
    marks = ",".join("?" * len(wanted))
    select = (f"SELECT {_INSTANCE_COLUMNS} FROM instances WHERE name IN ({marks}) "
              f"ORDER BY name{_LOCKED_ALONE if exclusive else _LOCKED_SHARED}")
    # one trip: the outer query's clock is read as each row comes up from the locking
    # one, so after its lock was granted (a clock in the locking query itself could be
    # read before a wait for the lock)
    found = conn.execute(f"SELECT locked.*, {_PG_CLOCK} FROM ({select}) AS locked",
                         wanted).fetchall()
    if not found:
        return {}, writer_now(conn)
    return {r[0]: InstanceRecord(*r[:-1]) for r in found}, float(found[-1][-1])


def writer_now(conn: Conn) -> float:
    """The store's clock inside a write transaction."""
    if isinstance(conn, sqlite3.Connection):
        return time.time()
    row = conn.execute(_PG_NOW).fetchone()
    assert row is not None
    return float(row[0])


def _instance(conn: Conn, name: str) -> InstanceRecord | None:
    row = conn.execute(f"SELECT {_INSTANCE_COLUMNS} FROM instances WHERE name = ?",
                       (name,)).fetchone()
    return InstanceRecord(*row) if row is not None else None


def _why_ended(conn: Conn, name: str, epoch: int) -> str:
    current = _instance(conn, name)
    if current is None:
        return "its row in instances was removed"
    if current.epoch != epoch:
        return (f"another process started as {name} (epoch {current.epoch}, host "
                f"{current.host}, pid {current.pid}): give each instance its own "
                f"instance.name")
    if current.stopped_at is not None:
        return "it was marked stopped"
    return ("its lease ran out before it could renew it (the store was unreachable or "
            "slow): a survivor may have taken over its work")


# reading -----------------------------------------------------------------------------------

async def lease_record(db: Store, lease: str) -> LeaseRecord | None:
    row = await db.fetchone(f"SELECT {_LEASE_COLUMNS} FROM leases WHERE name = ?", (lease,))
    return LeaseRecord(*row) if row is not None else None


async def list_instances(db: Store) -> list[InstanceRecord]:
    rows = await db.fetchall(f"SELECT {_INSTANCE_COLUMNS} FROM instances ORDER BY name")
    return [InstanceRecord(*row) for row in rows]


async def list_leases(db: Store) -> list[LeaseRecord]:
    rows = await db.fetchall(f"SELECT {_LEASE_COLUMNS} FROM leases ORDER BY name")
    return [LeaseRecord(*row) for row in rows]


async def dead_instances(db: Store, now: float | None = None) -> list[InstanceRecord]:
    """Instances whose lease ran out without a clean stop: a survivor reconciles their
    work (claims, jobs, journal entries) under the rules of a crash. ``now`` is the
    store's time (:func:`store_now`, the default)."""
    if now is None:
        now = await store_now(db)
    rows = await db.fetchall(
        f"SELECT {_INSTANCE_COLUMNS} FROM instances "
        "WHERE stopped_at IS NULL AND lease_expires_at < ? ORDER BY name", (now,))
    return [InstanceRecord(*row) for row in rows]


async def store_now(db: Store) -> float:
    """The store's clock, which leases are counted in."""
    if isinstance(db, Database):
        return time.time()
    row = await db.fetchone(_PG_NOW)
    return float(row[0])
