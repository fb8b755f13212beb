"""Whose work is it: the names a life of a daemon gives what it takes on — outbox
claims, journal entries, delegations — and whether that life is over.

On one host a life is a process (``router-<process identity>-…``): it is over when
that process is gone. On a shared store it is an epoch of an instance
(``i:<instance name>:<epoch>:…``): over once that epoch's lease ran out, it stopped,
or its name started again — on any host. A life that is over never comes back, so a
survivor may act on what it left without a race against its return.

The fence between a life and its survivors, on a shared store whose write transactions
run side by side, is that life's row in ``instances``. The life writes work that holds
only while it is live (a job, a delegation, a claim) in a transaction that first locks
its row shared (FOR KEY SHARE: its own renewal does not wait for it) and finds it live
(:func:`lock_life`, :func:`still_live_here`); a survivor takes a life's work over in a
transaction that first locks the rows of the lives that look over alone and finds them
over (:func:`lives_over`). Either the
survivor waits until the life's write has committed, and then reads it; or the life
waits until the survivor has finished, and then finds itself over. Each decides by
the store's clock read after its lock (gateway/cluster/rows.py), and a renewal locks the
row before it reads the clock too, so no renewal brings back a life a survivor found
over. On SQLite (one writer) the same functions decide the same way without locks.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import structlog

from gateway.cluster.rows import lock_instance, lock_instances, store_now, writer_now
from gateway.errors import HomingError
from gateway.machine.processes import identity_alive, process_identity
from gateway.store.row_locks import locking
from gateway.words.events import SendResult

if TYPE_CHECKING:
    from gateway.cluster.rows import Conn
    from gateway.store.state import StateDatabase
    from gateway.words.route import Route

log = structlog.get_logger(__name__)

#: how an instance's lives begin: ``i:<instance name>:<epoch>:<random>``
INSTANCE_CLAIM = "i:"
#: asked before a life acts where a survivor could act too — posts to a chat, begins a
#: message's turn, starts a job or a delegation: True once it may, False once it never
#: will (on a shared store, :meth:`gateway.cluster.instances.Instance.until_alive`)
Acting = Callable[[], Awaitable[bool]]
_INSTANCE_LIVE = ("SELECT 1 FROM instances WHERE name = ? AND epoch = ? AND stopped_at IS NULL "
                  "AND lease_expires_at >= ?")


def claimer_name(instance: tuple[str, int] | None = None) -> str:
    """A name for what this life takes on, so a later start — or another instance —
    can tell it from that of a gateway that still runs: its process identity, or on a
    shared store its instance and that instance's epoch."""
    if instance is not None:
        name, epoch = instance
        return f"{INSTANCE_CLAIM}{name}:{epoch}:{uuid.uuid4().hex[:6]}"
    return f"router-{process_identity()}-{uuid.uuid4().hex[:6]}"


def life_prefix(claimer: str) -> str:
    """What every name of one life begins with (``i:<name>:<epoch>:``)."""
    return claimer.rsplit(":", 1)[0] + ":"


def instance_life(claimer: str) -> tuple[str, int] | None:
    """(instance name, epoch) of an instance's life's name; None for any other name."""
    if not claimer.startswith(INSTANCE_CLAIM):
        return None
    parts = claimer[len(INSTANCE_CLAIM):].rsplit(":", 2)
    if len(parts) != 3 or not parts[1].isdigit():
        return None
    return parts[0], int(parts[1])


def claimer_alive(claimer: str | None) -> bool:
    """Whether the process named still runs (not counting this one: at start-up this
    process has taken on nothing yet)."""
    parts = (claimer or "").split("-")
    if len(parts) != 4 or parts[0] != "router":
        return False
    identity = f"{parts[1]}-{parts[2]}"
    return identity != process_identity() and identity_alive(identity)


def claim_alive(conn: Conn, claimer: str | None, now: float) -> bool:
    """Whether the life named still runs, by a read inside a write transaction (``now``:
    the store's clock there). An unnamed or unreadable name belongs to nobody alive.
    Nothing is locked: on a shared store a decision to write, or to take over, asks
    :func:`lock_life` or :func:`lives_over`."""
    if claimer is None:
        return False
    life = instance_life(claimer)
    if life is None:
        return claimer_alive(claimer)
    return conn.execute(_INSTANCE_LIVE, (*life, now)).fetchone() is not None


def lock_life(conn: Conn, claimer: str | None, *, taking_over: bool) -> bool:
    """Whether the life named still runs, as a decision that holds until this write
    transaction commits — one side of the fence (see the module's story):

    - the life itself, about to write work under its name that holds only while it is
      live (``taking_over=False``): its instance's row is locked shared, so no survivor
      finds it over until this write has committed;
    - a survivor about to take that life's work over (``taking_over=True``): the row is
      locked alone, so a write of the life that found itself live first has committed
      before the survivor reads what it left, and one that asks after finds it over.
      Take the work over in this same transaction.

    The row is locked whether the answer is yes or no, and the clock read after the
    lock. A name of a process on one host (``router-…``) is asked of that host, and
    None belongs to nobody alive; neither locks anything."""
    if claimer is None:
        return False
    life = instance_life(claimer)
    if life is None:
        return claimer_alive(claimer)
    name, epoch = life
    record, now = lock_instance(conn, name, exclusive=taking_over)
    return record is not None and record.epoch == epoch and record.state(now) == "live"


def lives_over(conn: Conn, holders: Callable[[], Iterable[str | None]]) -> list[str | None]:
    """For a survivor, inside the transaction that takes over what lives that are over
    left: of the names ``holders()`` reads (who holds the work: a claim's, a journal
    entry's handler), those whose lives are over. Take over only theirs, here.

    First every instance whose lease has run out by the store's count has its row
    locked alone (in name order): a write its life began while it still counted live
    has committed before ``holders()`` reads, so none is missed, and none begins after.
    Then a holder that looks live is left alone, and one that looks over is decided
    again under its row's lock (:func:`lock_life`)."""
    now = writer_now(conn)
    conn.execute("SELECT name FROM instances WHERE stopped_at IS NULL "
                 f"AND lease_expires_at < ? ORDER BY name{locking(conn)}", (now,)).fetchall()
    named = list(dict.fromkeys(holders()))
    now = writer_now(conn)
    looks_over = {h: life for h in named if h is not None
                  and (life := instance_life(h)) is not None and not claim_alive(conn, h, now)}
    records, now = lock_instances(conn, [name for name, _ in looks_over.values()],
                                  exclusive=True)

    def over(holder: str | None) -> bool:
        if holder is None:
            return True
        life = instance_life(holder)
        if life is None:
            return not claimer_alive(holder)
        if holder not in looks_over:
            return False
        record = records.get(life[0])
        return record is None or record.epoch != life[1] or record.state(now) != "live"

    return [holder for holder in named if over(holder)]


async def life_alive(db: StateDatabase, claimer: str | None) -> bool:
    """:func:`claim_alive` outside a transaction (a life that is over stays over)."""
    if claimer is None:
        return False
    life = instance_life(claimer)
    if life is None:
        return claimer_alive(claimer)
    return await db.fetchone(_INSTANCE_LIVE, (*life, await store_now(db))) is not None


async def may_always_act() -> bool:
    """A gateway alone on its store: no survivor could act for it."""
    return True


def _never() -> bool:
    return False


@dataclass(frozen=True, slots=True)
class Life:
    """This process among the instances sharing its store, as the parts that take
    work on are given it when they are made: the name what it takes on carries, its
    instance's name, whether it may act now, and whether it is over. A gateway alone
    on its store is ``ALONE``: each part names its work after this process."""

    #: ``i:<instance>:<epoch>``, the claimer name of this life (None: alone)
    name: str | None = None
    #: the instance a job runs on (None: alone)
    instance: str | None = None
    #: whether this life may act now: waits while a renewal is overdue, False once over
    acting: Acting = may_always_act
    #: whether this life is over (its lease ran out, or another took its name)
    over: Callable[[], bool] = _never

    @property
    def claims(self) -> str | None:
        """What the names of everything this life claims begin with (None: alone)."""
        return life_prefix(self.name) if self.name is not None else None


ALONE = Life()


class LifeOver(HomingError):
    """This instance's life ended while the work waited: a survivor does it instead."""


async def still_acting(acting: Acting) -> None:
    """Wait until this life may act; raise :class:`LifeOver` once it never will."""
    if not await acting():
        raise LifeOver("this instance's lease ran out; another instance takes over")


def still_live_here(conn: Conn, claimer: str | None, what: str) -> None:
    """Inside the write that begins ``what`` (a job, a delegation): raise
    :class:`LifeOver` when ``claimer`` is an instance's life the store no longer counts
    live; else that life stays live, for a survivor, until this write has committed
    (:func:`lock_life`). The check before the write is not enough: the write may wait
    out a stall."""
    if instance_life(claimer or "") is not None and not lock_life(conn, claimer,
                                                                  taking_over=False):
        raise LifeOver(f"this instance's lease ran out before {what}")


async def withheld(acting: Acting, route: Route) -> SendResult | None:
    """None when this life may post to ``route`` now; else the failed send it gets."""
    try:
        await still_acting(acting)
    except LifeOver as exc:
        log.warning("send_withheld", platform=route.platform, chat_id=route.chat_id,
                    reason=str(exc))
        return SendResult.withheld(str(exc))
    return None
