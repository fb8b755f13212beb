"""The notification outbox: durable first, then claimed, then delivered or parked.

Every notification is committed here before anything tries to deliver it.
A claim is a conditional update of pending rows, so two routers — in one
process or two — never both get the same row.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import structlog

from gateway.cluster.lives import ALONE, Life, instance_life, lives_over, lock_life
from gateway.cluster.rows import writer_now
from gateway.delivery import affinity
from gateway.delivery.affinity import (
    LOCK_NAMESPACE,
    NOT_BUSY_ELSEWHERE,
    PREFERRED,
    conversation_locked,
    elsewhere,
    place,
)
from gateway.delivery.notifications import (
    INTERRUPTED,
    NOTIFICATION_COLUMNS,
    STATES,
    NewNotification,
    Notification,
    NotificationState,
)
from gateway.delivery.ownership import OWNER_ENDED
from gateway.machine.processes import process_identity
from gateway.store.group_commit import Op
from gateway.store.state import StateDatabase

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class DeliveryOutcome:
    """What became of one claimed notification."""

    #: delivered | retry | parked | consumed | held (given back untried: an earlier
    #: notice of its conversation waits for a retry, and this one waits behind it) |
    #: withheld (given back untried: this life may no longer post; a survivor does)
    state: str
    message_id: str | None = None
    reason: str | None = None
    detail: str | None = None
    retry_in: float = 0.0
    #: a retry the platform asked to wait for (its flood limits: a 429's retry_after)
    platform_wait: bool = False
    #: given back before anything was tried (the gateway stopping): no attempt to record
    untried: bool = False


def delivered_op(notification_id: int, claimer: str, message_id: str | None,
                 now: float) -> Op:
    """The write that marks a claimed notification delivered (by its claimer only)."""
    return (f"UPDATE notifications SET state = '{NotificationState.DELIVERED}', "
            "delivered_at = ?, sent_message_id = ?, attempts = attempts + 1, "
            "last_error = NULL "
            f"WHERE id = ? AND state = '{NotificationState.CLAIMED}' AND claimed_by = ?",
            (now, message_id, notification_id, claimer))


#: an attempt that did not deliver, for `homing trace` (the one that did is the row
#: itself: its claimer, delivered_at and sent message). One attempt like the one before
#: it (same claimer, outcome and detail: a platform down for an hour, retried every few
#: seconds) counts as a repeat of that row, so the table grows with what changed, not
#: with time. Both statements write only while the claim is the writer's, and run
#: before the claim is given back: first the repeat onto a last row like it, then a new
#: row only when the last one (repeated or not) differs.
_SAME_AS_LAST = (
    "SELECT MAX(id) FROM delivery_attempts WHERE notification_id = ?")
_CLAIM_HELD = (f"EXISTS (SELECT 1 FROM notifications WHERE id = ? "
               f"AND state = '{NotificationState.CLAIMED}' AND claimed_by = ?)")
ATTEMPT_AGAIN = (
    "UPDATE delivery_attempts SET repeats = repeats + 1, last_at = ?, retry_in = ? "
    f"WHERE id = ({_SAME_AS_LAST}) AND claimer = ? AND outcome = ? "
    f"AND COALESCE(detail, '') = ? AND {_CLAIM_HELD}")
ATTEMPT = (
    "INSERT INTO delivery_attempts (notification_id, at, claimer, outcome, detail, "
    "retry_in, last_at) SELECT id, ?, claimed_by, ?, ?, ?, ? FROM notifications "
    f"WHERE id = ? AND state = '{NotificationState.CLAIMED}' AND claimed_by = ? "
    "AND NOT EXISTS (SELECT 1 FROM delivery_attempts d "
    f"WHERE d.id = ({_SAME_AS_LAST}) AND d.claimer = ? AND d.outcome = ? "
    "AND COALESCE(d.detail, '') = ?)")


def _attempt_ops(notification_id: int, claimer: str, outcome: DeliveryOutcome,
                 now: float) -> list[Op]:
    """The record of an attempt that did not deliver (none for one never tried)."""
    if outcome.untried:
        return []
    what = attempt_outcome(outcome)
    detail = outcome.detail or outcome.reason or ""
    retry_in = outcome.retry_in or None
    return [(ATTEMPT_AGAIN, (now, retry_in, notification_id, claimer, what, detail,
                             notification_id, claimer)),
            (ATTEMPT, (now, what, detail or None, retry_in, now, notification_id, claimer,
                       notification_id, claimer, what, detail))]


def _outcome_ops(notification_id: int, claimer: str, outcome: DeliveryOutcome,
                 now: float) -> list[Op]:
    """The write that records ``outcome``; a consumed row was recorded by its taker."""
    if outcome.state == "delivered":
        return [delivered_op(notification_id, claimer, outcome.message_id, now)]
    if outcome.state in ("retry", "withheld", "held", "parked"):
        return [*_attempt_ops(notification_id, claimer, outcome, now),
                *_state_ops(notification_id, claimer, outcome, now)]
    return []


#: an attempt the platform's flood limits turned back, as ``delivery_attempts`` has it
FLOOD_LIMITED = "flood_limited"


def attempt_outcome(outcome: DeliveryOutcome) -> str:
    """What ``delivery_attempts`` says became of an attempt: its outcome's state, and a
    retry the platform asked for told apart from one after an error."""
    return FLOOD_LIMITED if outcome.state == "retry" and outcome.platform_wait else outcome.state


#: a row given back keeps the mark that it may have gone out before a stop (INTERRUPTED)
#: until it is delivered: a retry before the platform was asked (not connected yet, as
#: right after a restart), or one held behind another, must still ask it
_LAST_ERROR = "last_error = CASE WHEN last_error = ? THEN last_error ELSE ? END"


def _state_ops(notification_id: int, claimer: str, outcome: DeliveryOutcome,
               now: float) -> list[Op]:
    if outcome.state == "parked":
        return [(f"UPDATE notifications SET state = '{NotificationState.PARKED}', reason = ?, "
                 "last_error = ? "
                 f"WHERE id = ? AND state = '{NotificationState.CLAIMED}' AND claimed_by = ?",
                 (outcome.reason or "parked", outcome.detail, notification_id, claimer))]
    if outcome.state == "retry":
        return [(f"UPDATE notifications SET state = '{NotificationState.PENDING}', "
                 "claimed_by = NULL, claimed_at = NULL, attempts = attempts + 1, "
                 f"{_LAST_ERROR}, not_before = ? "
                 f"WHERE id = ? AND state = '{NotificationState.CLAIMED}' AND claimed_by = ?",
                 (INTERRUPTED, outcome.reason or "retry", now + outcome.retry_in,
                  notification_id, claimer))]
    if outcome.state == "withheld":
        # no attempt counted: nothing was tried. Due again soon, for a survivor (the
        # life that gave it back is ending and claims nothing more)
        return [(f"UPDATE notifications SET state = '{NotificationState.PENDING}', "
                 f"claimed_by = NULL, claimed_at = NULL, not_before = ?, {_LAST_ERROR} "
                 f"WHERE id = ? AND state = '{NotificationState.CLAIMED}' AND claimed_by = ?",
                 (now + outcome.retry_in, INTERRUPTED, outcome.reason, notification_id,
                  claimer))]
    if outcome.state == "held":
        # no attempt counted and no wait of its own: the claim leaves it while the earlier
        # notice waits, and takes it right after that one once it is due
        return [(f"UPDATE notifications SET state = '{NotificationState.PENDING}', "
                 f"claimed_by = NULL, claimed_at = NULL, not_before = NULL, {_LAST_ERROR} "
                 f"WHERE id = ? AND state = '{NotificationState.CLAIMED}' AND claimed_by = ?",
                 (INTERRUPTED, outcome.reason, notification_id, claimer))]
    return []


@dataclass(frozen=True, slots=True)
class Waiting:
    """A conversation's notices not delivered yet: pending (due, held back, or waiting
    for a retry) or claimed (being delivered — sent, perhaps, and not recorded yet):
    how many, and since when the oldest of them was made."""

    session_key: str
    count: int
    oldest_created_at: float

    def oldest_wait(self, now: float) -> float:
        return max(0.0, now - self.oldest_created_at)

    def to_dict(self, now: float) -> dict[str, object]:
        return {"session_key": self.session_key, "count": self.count,
                "oldest_wait_seconds": round(self.oldest_wait(now), 1)}


async def waiting_notices(db: StateDatabase, session_key: str | None = None
                          ) -> list[Waiting]:
    """Each conversation's :class:`Waiting` notices, the longest waiting first; only
    ``session_key``'s when given (``/status``). For every reader: the router's
    process, the CLI and ``/metrics`` alike."""
    where, params = ("AND session_key = ? ", (session_key,)) if session_key else ("", ())
    rows = await db.fetchall(
        "SELECT session_key, COUNT(*), MIN(created_at) FROM notifications "
        f"WHERE state IN ('{NotificationState.PENDING}', '{NotificationState.CLAIMED}') "
        f"{where}GROUP BY session_key "
        "ORDER BY MIN(created_at)", params)
    return [Waiting(key, int(count), float(oldest)) for key, count, oldest in rows]


def claim_statement(*, shared: bool) -> str:
    """The claim: due pending rows, oldest first, and the rest of any message some of
    them were marked to go out in; claimed and returned in one statement.

    A row waits while an earlier one of its conversation waits for a retry, so a
    conversation's notices arrive in the order they were made. On a shared store, rows
    another instance is taking are left to it, and so is a conversation another
    instance has in hand or is claiming this moment; an instance prefers its own
    conversations (gateway/delivery/affinity.py).
    """
    skip_taken = " FOR UPDATE OF n SKIP LOCKED" if shared else ""
    skip_taken_s = " FOR UPDATE OF s SKIP LOCKED" if shared else ""
    not_elsewhere = conversation_locked(NOT_BUSY_ELSEWHERE + PREFERRED) if shared else ""
    # (materialized: a subquery that locks rows may run more than once, and give more
    # than ``limit``, when it is left in the UPDATE's WHERE)
    return (
        f"WITH due AS MATERIALIZED (SELECT n.id FROM notifications n "
        f"WHERE n.state = '{NotificationState.PENDING}' "
        f"AND (n.not_before IS NULL OR n.not_before <= ?) AND NOT EXISTS ("
        f"  SELECT 1 FROM notifications e WHERE e.session_key = n.session_key "
        f"  AND e.id < n.id AND e.state = '{NotificationState.PENDING}' "
        f"  AND e.not_before IS NOT NULL AND e.not_before > ?){not_elsewhere} "
        f"ORDER BY n.id LIMIT ?{skip_taken}), "
        f"rest AS MATERIALIZED (SELECT s.id FROM notifications s "
        f"WHERE s.state = '{NotificationState.PENDING}' "
        f"AND s.merged_into IN (SELECT m.merged_into "
        f"FROM notifications m WHERE m.id IN (SELECT id FROM due) "
        f"AND m.merged_into IS NOT NULL){skip_taken_s}) "
        f"UPDATE notifications SET state = '{NotificationState.CLAIMED}', "
        f"claimed_by = ?, claimed_at = ? "
        f"WHERE (id IN (SELECT id FROM due) OR id IN (SELECT id FROM rest)) "
        f"AND state = '{NotificationState.PENDING}' "
        f"RETURNING {NOTIFICATION_COLUMNS}")


def claim_parameters(now: float, limit: int, claimer: str,
                     shared: Sequence[object] = ()) -> tuple[object, ...]:
    """:func:`claim_statement`'s parameters (``shared``: a shared store's, see
    :func:`shared_parameters`)."""
    return (now, now, *shared, limit, claimer, now)


def shared_parameters(own_claims: str, place: tuple[int, int], now: float
                      ) -> tuple[object, ...]:
    """The parameters of a shared store's conditions, in their order: not busy
    elsewhere, preferred (this instance's place among the live ones, its own messages'
    conversations), the lock."""
    live, index = place
    return (*elsewhere(own_claims), live, index, len(own_claims), own_claims,
            now - affinity.AFFINITY_GRACE, LOCK_NAMESPACE)


#: told of a notification's settled state: (notification, state, reason, detail)
Settled = Callable[[Notification, str, "str | None", "str | None"], None]


class Outbox:
    def __init__(self, db: StateDatabase, *, life: Life = ALONE) -> None:
        self.db = db
        self._listeners: list[Callable[[], None]] = []
        #: rows a tool took (see :meth:`consume`) while this process's router held them
        self._consumed: set[int] = set()
        #: rows this process's router is delivering right now: not for :meth:`consume`
        self._delivering: set[int] = set()
        #: told, after the commit, of each notification a router delivered or parked:
        #: ``(notification, state, reason, detail)``
        self.settle_listeners: list[Settled] = []
        #: how this process's routers' claims begin (see :func:`claimer_name`)
        self.own_claims = life.claims or f"router-{process_identity()}-"

    def subscribe(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` after each commit that adds pending notifications."""
        self._listeners.append(listener)

    def unsubscribe(self, listener: Callable[[], None]) -> None:
        if listener in self._listeners:
            self._listeners.remove(listener)

    # producing -------------------------------------------------------------

    @staticmethod
    def insert_op(n: NewNotification) -> Op:
        """The statement that adds ``n``; a repeated idempotency key adds nothing."""
        a = n.address
        return (
            "INSERT INTO notifications (idempotency_key, kind, job_id, session_key, "
            "session_id, tab_id, return_address, text, created_at, outcome, file_path, "
            "trace_parent) VALUES (?,?,?,?,?,?,?,?,?,?,?,?) ON CONFLICT DO NOTHING",
            (n.idempotency_key, n.kind, n.job_id, a.session_key, a.session_id, a.tab_id,
             a.to_json(), n.text, time.time(), n.outcome, n.file_path, n.trace_parent),
        )

    async def produce(self, notices: Sequence[NewNotification], *, with_ops: Sequence[Op] = ()
                      ) -> None:
        """Commit notices (with ``with_ops`` in the same transaction), then wake routers."""
        await self.db.write([*with_ops, *(self.insert_op(n) for n in notices)])
        for n in notices:
            log.debug("notification_produced", kind=n.kind, job_id=n.job_id,
                     session_key=n.address.session_key, idempotency_key=n.idempotency_key)
        self.wake()

    def wake(self) -> None:
        for listener in self._listeners:
            listener()

    # delivering ------------------------------------------------------------

    async def claim(self, claimer: str, limit: int = 500) -> list[Notification]:
        """Atomically take up to ``limit`` due pending notifications, oldest first, and
        with any of them marked as one message (``merged_into``) the rest of that
        message's rows: a merged message is never claimed, and so sent, in parts."""
        shared = self.db.shared
        sql = claim_statement(shared=shared)
        life = instance_life(claimer) if shared else None

        def take(conn: sqlite3.Connection) -> list[Notification]:
            if life is not None and not lock_life(conn, claimer, taking_over=False):
                return []  # a life that is over claims nothing: a survivor has its work
            now = time.time()  # (the clock the rows' times were written with)
            extra: tuple[object, ...] = ()
            if shared:  # (the instances' leases count in the store's clock)
                extra = shared_parameters(self.own_claims, place(conn, life[0], writer_now(conn))
                                          if life is not None else (1, 0), now)
            rows = conn.execute(sql, claim_parameters(now, limit, claimer, extra)).fetchall()
            return sorted((Notification(*row) for row in rows), key=lambda n: n.id)

        return await self.db.write(take)

    @staticmethod
    def sent_op(notification_id: int, claimer: str, message_id: str | None) -> Op:
        """The write that notes a claimed notification went out, so a crash before
        :meth:`mark_delivered` is not followed by a second send. The sender commits
        it together with the transcript line of that send (the runner's ``send``)."""
        return ("UPDATE notifications SET sent_message_id = ? "
                f"WHERE id = ? AND state = '{NotificationState.CLAIMED}' AND claimed_by = ?",
                (message_id or "sent", notification_id, claimer))

    async def merge(self, notification_ids: Sequence[int], claimer: str) -> int:
        """Mark claimed notifications as one message, named by the first of them (the
        name is returned), before it is sent: after a crash before its record they go
        together again, claimed whole (the send record itself is one :meth:`sent_op`
        per row, in one write)."""
        marks = ",".join("?" * len(notification_ids))
        merged_into = min(notification_ids)
        await self.db.write([(
            f"UPDATE notifications SET merged_into = ? WHERE id IN ({marks}) "
            f"AND state = '{NotificationState.CLAIMED}' AND claimed_by = ?",
            (merged_into, *notification_ids, claimer))])
        return merged_into

    def record_sent(self, notification_id: int, claimer: str, message_id: str | None) -> None:
        """:meth:`sent_op` on its own, written behind (lands in the next group commit)."""
        self.db.write_behind([self.sent_op(notification_id, claimer, message_id)])

    async def record_outcomes(self, claimer: str,
                              outcomes: Sequence[tuple[Notification, DeliveryOutcome]]) -> None:
        """Record what became of claimed notifications, all in one write.

        A router settles a whole batch at once: one transaction (and one wait for
        it) instead of one per notice. Rows another claimer holds are untouched.
        """
        now = time.time()
        ops = [op for n, outcome in outcomes for op in _outcome_ops(n.id, claimer, outcome, now)]
        if ops:
            await self.db.write(ops)
        for n, outcome in outcomes:
            if outcome.state == "parked":
                log.warning("notification_parked", notification_id=n.id,
                            reason=outcome.reason, detail=outcome.detail,
                            session_key=n.session_key)
            if outcome.state in ("delivered", "parked"):
                self._settled(n, outcome.state, outcome.reason, outcome.detail)

    async def mark_delivered(self, n: Notification, claimer: str,
                             message_id: str | None) -> None:
        await self.record_outcomes(claimer, [(n, DeliveryOutcome("delivered", message_id))])

    async def release(self, notification_id: int, claimer: str, error: str,
                      retry_in: float) -> None:
        """Give a claimed notification back to be tried again after ``retry_in`` seconds."""
        retry = DeliveryOutcome("retry", reason=error, retry_in=retry_in)
        await self.db.write(_outcome_ops(notification_id, claimer, retry, time.time()))

    async def park(self, n: Notification, claimer: str, reason: str,
                   detail: str | None = None) -> None:
        await self.record_outcomes(
            claimer, [(n, DeliveryOutcome("parked", reason=reason, detail=detail))])

    def settled(self, outcomes: Sequence[tuple[Notification, DeliveryOutcome]]) -> None:
        """Outcomes a router committed with their sends' records (not through
        :meth:`record_outcomes`): tell the listeners, as that does after its write."""
        for n, outcome in outcomes:
            if outcome.state in ("delivered", "parked"):
                self._settled(n, outcome.state, outcome.reason, outcome.detail)

    def _settled(self, n: Notification, state: str, reason: str | None,
                 detail: str | None) -> None:
        for listener in self.settle_listeners:
            try:
                listener(n, state, reason, detail)
            except Exception:  # a listener's fault must not undo the delivery's record
                log.exception("settle_listener_failed", notification_id=n.id)

    async def consume(self, job_id: str) -> list[str]:
        """Take the notices of ``job_id`` not delivered yet — their texts, oldest first —
        for a reader who gets them some other way (the model's ``process wait`` returns
        a job's completion inline). They are marked delivered in the same transaction.
        Only rows this process could deliver are taken: pending ones, and ones its own
        router claimed but is not delivering right now; that router learns from
        :meth:`delivering` not to deliver them."""
        now = time.time()
        mine = self.own_claims
        busy = sorted(self._delivering)

        # (an empty IN () is SQLite's only: the clause goes when nothing is being delivered)
        not_busy = f"AND id NOT IN ({','.join('?' * len(busy))}) " if busy else ""

        def take(conn: sqlite3.Connection) -> list[tuple[int, str, str]]:
            rows = conn.execute(
                f"SELECT id, state, text FROM notifications WHERE job_id = ? "
                f"AND (state = '{NotificationState.PENDING}' "
                f"OR (state = '{NotificationState.CLAIMED}' AND substr(claimed_by, 1, ?) = ?)) "
                f"{not_busy}"
                f"ORDER BY id", (job_id, len(mine), mine, *busy)).fetchall()
            conn.executemany(
                f"UPDATE notifications SET state = '{NotificationState.DELIVERED}', "
                "reason = 'consumed', delivered_at = ?, last_error = NULL WHERE id = ? "
                f"AND state IN ('{NotificationState.PENDING}', '{NotificationState.CLAIMED}')",
                [(now, r[0]) for r in rows])
            return rows

        rows = await self.db.write(take)
        for notification_id, state, _ in rows:
            if state == "claimed":
                self._consumed.add(notification_id)
            log.info("notification_consumed", notification_id=notification_id, job_id=job_id)
        return [text for _, _, text in rows]

    def delivering(self, notification_id: int) -> bool:
        """A router is about to deliver a claimed row: False when :meth:`consume` took it
        meanwhile; otherwise it is marked as being delivered until :meth:`delivered`."""
        if notification_id in self._consumed:
            self._consumed.discard(notification_id)
            return False
        self._delivering.add(notification_id)
        return True

    def delivered(self, notification_id: int) -> None:
        self._delivering.discard(notification_id)

    @staticmethod
    def offer_again_ops(session_ids: Sequence[str]) -> list[Op]:
        """For a resumed session (its chain's ids): the notices parked because it had
        ended go back to pending, so the ownership rule decides them again — now live.
        Committed with the resume itself."""
        if not session_ids:
            return []
        marks = ",".join("?" * len(session_ids))
        return [(f"UPDATE notifications SET state = '{NotificationState.PENDING}', "
                 "reason = NULL, last_error = 'offered again: its session was resumed', "
                 "not_before = NULL, claimed_by = NULL, claimed_at = NULL "
                 f"WHERE state = '{NotificationState.PARKED}' AND reason = ? "
                 f"AND session_id IN ({marks})", (OWNER_ENDED, *session_ids))]

    async def make_due(self, session_key_prefix: str) -> None:
        """Retry now what waits for a retry, for session keys starting with the prefix."""
        await self.db.write([(
            "UPDATE notifications SET not_before = NULL "
            f"WHERE state = '{NotificationState.PENDING}' AND not_before IS NOT NULL "
            "AND substr(session_key, 1, ?) = ?",
            (len(session_key_prefix), session_key_prefix))])

    async def reconcile_claimed(self) -> tuple[int, int]:
        """At start-up: settle notifications that a stopped router had claimed.

        Only claims of routers that are gone count: another running gateway
        process keeps its own. One with a recorded sent message id was sent:
        it is marked delivered and not sent again. One without goes back to
        pending; if the crash fell between the send and its record, the user
        may see it twice — the one window no platform lets us check.
        """
        def settle(conn: sqlite3.Connection) -> tuple[int, int]:
            # (a claim a dying life made while it still counted live has committed
            # before the claimers are read: lives_over locks their rows first)
            dead = [c for c in lives_over(conn, lambda: [r[0] for r in conn.execute(
                "SELECT DISTINCT claimed_by FROM notifications "
                f"WHERE state = '{NotificationState.CLAIMED}'")]) if c is not None]
            marks = ",".join("?" * len(dead))
            if not dead:
                return 0, 0
            sent = conn.execute(
                f"UPDATE notifications SET state = '{NotificationState.DELIVERED}', "
                "delivered_at = claimed_at "
                f"WHERE state = '{NotificationState.CLAIMED}' AND sent_message_id IS NOT NULL "
                f"AND claimed_by IN ({marks})", dead)
            requeued = conn.execute(
                f"UPDATE notifications SET state = '{NotificationState.PENDING}', "
                "claimed_by = NULL, claimed_at = NULL, "
                "last_error = ? "
                f"WHERE state = '{NotificationState.CLAIMED}' AND claimed_by IN ({marks})",
                [INTERRUPTED, *dead])
            return sent.rowcount, requeued.rowcount

        delivered, requeued = await self.db.write(settle)
        if delivered or requeued:
            log.info("outbox_reconciled", marked_delivered=delivered, requeued=requeued)
        return delivered, requeued

    # reading ---------------------------------------------------------------

    async def still_pending(self, notification_ids: Sequence[int]) -> set[int]:
        """Which of these notifications are pending (not taken, delivered or parked)."""
        marks = ",".join("?" * len(notification_ids))
        rows = await self.db.fetchall(
            f"SELECT id FROM notifications WHERE state = '{NotificationState.PENDING}' "
            f"AND id IN ({marks})",
            tuple(notification_ids))
        return {int(row[0]) for row in rows}

    async def next_due_at(self) -> float | None:
        row = await self.db.fetchone(
            "SELECT MIN(not_before) FROM notifications "
            f"WHERE state = '{NotificationState.PENDING}'")
        return row[0] if row else None

    async def get(self, notification_id: int) -> Notification | None:
        row = await self.db.fetchone(
            f"SELECT {NOTIFICATION_COLUMNS} FROM notifications WHERE id = ?", (notification_id,))
        return Notification(*row) if row else None

    async def list(self, state: str | None = None, limit: int = 1000) -> list[Notification]:
        if state is not None and state not in STATES:
            raise ValueError(f"state must be one of {', '.join(STATES)}")
        await self.db.flush()
        where, params = ("WHERE state = ?", [state]) if state else ("", [])
        rows = await self.db.fetchall(
            f"SELECT {NOTIFICATION_COLUMNS} FROM notifications {where} ORDER BY id DESC LIMIT ?",
            (*params, limit))
        return [Notification(*row) for row in rows]
