"""Renewing an instance's lease on a thread and a connection of its own.

A renewal that waits for the event loop, or for a place in the store's write queue, is
late exactly when the machine is busy: a loop running a long step, a batch of a thousand
writes ahead of it, and a lease of a few seconds runs out while the process is well —
the instance fences itself for nothing. So the renewal has an OS thread
(:class:`LeaseRenewer`) and a connection (:class:`RenewalLink`) that nothing else uses:
it asks the store on schedule, every third of the lease counted from the last ask, and
publishes the new deadline itself, so a loop coming back from a long step finds the
lease renewed. What the loop must do about a renewal (wake what waits for it, stop a
lease another instance took, end a life the store says is over) it is told with
``call_soon_threadsafe``.

On PostgreSQL a renewal is one statement (gateway/cluster/rows.py ``renew_in_one_trip``):
one round trip, so the thread waits for the interpreter and for the server as few times
as it can. Each attempt is bounded — by a lease on PostgreSQL (the connection's statement
timeout, and TCP's own), by what is left of it on SQLite (the busy timeout) — so a hung
renewal ends as a failure, never as a success after the store's count ran out (the
statement checks that itself). On SQLite the link is
a second connection to the file, taking the write lock for its one transaction: one
instance on one host, never behind the write queue.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import psycopg
import structlog

import gateway.cluster.rows as rows
from gateway.cluster.rows import Renewal
from gateway.retry import RetryPolicy
from gateway.store.postgres import PgConnection, PgDatabase, connect_apart
from gateway.store.sqlite import Database

if TYPE_CHECKING:
    from gateway.cluster.rows import Store

__all__ = ["LINK_ERRORS", "LeaseRenewer", "RenewalLink", "renewal_link"]

log = structlog.get_logger(__name__)

#: what a link raises when the store cannot be reached or answer in time (TimeoutError,
#: ConnectionError are OSErrors)
LINK_ERRORS = (sqlite3.Error, psycopg.Error, OSError)
#: the shortest bound an attempt is given: below it, a renewal cannot get through anyway
_LEAST_SECONDS = 0.05


class RenewalLink(Protocol):
    """A connection of the renewal's own, used from one thread at a time."""

    def open(self) -> None:
        """Connect now (blocking), so the first renewal does not pay for it: on a busy
        machine a new PostgreSQL backend can take most of a short lease to start."""
        ...

    def renew(self, name: str, epoch: int, lease_seconds: float,
              held: list[tuple[str, int]], within: float) -> Renewal:
        """:func:`gateway.cluster.rows.renew`, committed or failed within about
        ``within`` seconds of waiting for the store (at most a lease)."""
        ...

    def close(self) -> None: ...


def renewal_link(db: Store, lease_seconds: float) -> RenewalLink:
    """A link to the store ``db`` writes to, apart from its connections (on PostgreSQL,
    one whose TCP gives up on an unanswered send after ``lease_seconds``)."""
    if isinstance(db, PgDatabase):
        return _PgLink(db.url, lease_seconds)
    if isinstance(db, Database):
        return _SqliteLink(db.path)
    raise TypeError(f"no renewal link for a store of type {type(db).__name__}")


class LeaseRenewer:
    """The thread renewing one instance's lease; see the module's story.

    ``renew(within)`` runs one renewal on the link and publishes what came of it (the
    instance's, called in this thread); True once the life is over (stop renewing).
    ``ran_out()`` is called once no renewal can get through in time any more: the
    store's count of the lease has run out (``surely_over()`` has passed)."""

    def __init__(self, name: str, lease_seconds: float, *,
                 renew: Callable[[float], bool], surely_over: Callable[[], float],
                 ran_out: Callable[[], None], first_ask: float) -> None:
        self.interval = lease_seconds / 3
        # a failed renewal is tried again soon: about two more chances before it runs out
        self._again = RetryPolicy((self.interval / 8, self.interval / 4, self.interval / 2,
                                   self.interval), jitter=0.2)
        self._renew = renew
        self._surely_over = surely_over
        self._ran_out = ran_out
        self._due = first_ask + self.interval
        self._stopping = False
        self._poke = threading.Event()  # a stop, or a renewal wanted now
        self._thread = threading.Thread(target=self._run, name=f"homing-lease:{name}",
                                        daemon=True)
        self._log = log.bind(instance=name)

    def start(self) -> None:
        self._thread.start()

    def renew_now(self) -> None:
        """Renew at once rather than when due (from any thread)."""
        self._due = time.monotonic()
        self._poke.set()

    def stop(self, wait: float) -> bool:
        """Stop renewing; True once the thread has ended (within ``wait`` seconds: an
        attempt under way is bounded by the lease, so it ends by then)."""
        self._stopping = True
        self._poke.set()
        self._thread.join(wait)
        return not self._thread.is_alive()

    def _pause(self, seconds: float) -> bool:
        """Wait ``seconds`` or until poked; True when stopping."""
        self._poke.wait(max(0.0, seconds))
        self._poke.clear()
        return self._stopping

    def _run(self) -> None:
        try:
            while not self._pause(self._due - time.monotonic()):
                if time.monotonic() >= self._due and self._renew_once():
                    return
        except Exception:  # the life ends by its count (the loop's watch), never silently
            self._log.exception("instance_lease_renewer_failed",
                                note="no more renewals: the lease runs out")

    def _renew_once(self) -> bool:
        """One renewal, tried again until it gets through or cannot any more; True when
        the life is over."""
        for attempt in self._again.tries():
            asked = time.monotonic()
            left = self._surely_over() - asked
            if left <= 0:
                self._ran_out()
                return True
            try:
                over = self._renew(max(left, _LEAST_SECONDS))
            except LINK_ERRORS as exc:
                if self._stopping:
                    return True
                if time.monotonic() >= self._surely_over():
                    self._ran_out()
                    return True
                self._log.warning("instance_lease_renewal_failed", error=str(exc).strip(),
                                  attempt=attempt + 1,
                                  seconds_left=round(self._surely_over() - time.monotonic(), 3))
                if self._pause(self._again.delay(attempt)):
                    return True
                continue
            self._due = asked + self.interval
            return over
        self._due = time.monotonic()  # every attempt failed: start again at once
        return False


class _PgLink:
    def __init__(self, url: str, lease_seconds: float) -> None:
        self.url = url
        self.lease_seconds = lease_seconds
        self._conn: PgConnection | None = None

    def open(self) -> None:
        conn = self._conn
        if conn is None or conn.raw.broken or conn.raw.closed:
            if conn is not None:
                conn.raw.close()
            self._conn = None
            self._conn = connect_apart(self.url, timeout=self.lease_seconds,
                                       application_name="homing lease renewal")

    def renew(self, name: str, epoch: int, lease_seconds: float,
              held: list[tuple[str, int]], within: float) -> Renewal:
        # one statement, its own transaction: a lock held elsewhere (a survivor, a
        # stalled writer) is waited for no longer than the connection's statement timeout
        self.open()
        assert self._conn is not None
        conn = self._conn
        try:
            return rows.renew_in_one_trip(conn, name, epoch, lease_seconds, held)
        except psycopg.OperationalError:
            if conn.raw.broken:  # the server went away: connect again next time
                conn.raw.close()
                self._conn = None
            raise

    def close(self) -> None:
        if self._conn is not None:
            self._conn.raw.close()
            self._conn = None


class _SqliteLink:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._conn: sqlite3.Connection | None = None

    def open(self) -> None:
        if self._conn is None:
            self._conn = sqlite3.connect(self.path, isolation_level=None,
                                         check_same_thread=False)

    def renew(self, name: str, epoch: int, lease_seconds: float,
              held: list[tuple[str, int]], within: float) -> Renewal:
        self.open()
        assert self._conn is not None
        conn = self._conn
        conn.execute(f"PRAGMA busy_timeout={max(1, int(within * 1000))}")
        conn.execute("BEGIN IMMEDIATE")
        try:
            result = rows.renew(conn, name, epoch, lease_seconds, held)
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        return result

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
