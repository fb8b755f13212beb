"""Whose work is it: the names a life of a daemon gives what it takes on — outbox
claims, journal entries, delegations — and whether that life is over.

On one host a life is a process (``router-<process identity>-…``): it is over when
that process is gone. On a shared store it is an epoch of an instance
(``i:<instance name>:<epoch>:…``): over once that epoch's lease ran out, it stopped,
or its name started again — on any host. A life that is over never comes back, so a
survivor may act on what it left without a race against its return.
"""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import structlog

from gateway.cluster.rows import store_now, writer_now
from gateway.errors import HomingError
from gateway.machine.processes import identity_alive, process_identity
from gateway.words.events import SendResult

if TYPE_CHECKING:
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


def claim_alive(conn: sqlite3.Connection, claimer: str | None, now: float) -> bool:
    """Whether the life named still runs, inside a write transaction (``now``: the
    store's clock there). An unnamed or unreadable name belongs to nobody alive."""
    if claimer is None:
        return False
    life = instance_life(claimer)
    if life is None:
        return claimer_alive(claimer)
    return conn.execute(_INSTANCE_LIVE, (*life, now)).fetchone() is not None


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


def still_live_here(conn: sqlite3.Connection, claimer: str | None, what: str) -> None:
    """Inside the write that begins ``what`` (a job, a delegation): raise
    :class:`LifeOver` when ``claimer`` is an instance's life the store no longer counts
    live. The check before the write is not enough: the write may wait out a stall."""
    if instance_life(claimer or "") is not None and not claim_alive(conn, claimer,
                                                                    writer_now(conn)):
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
