"""Claims on a shared store belong to a life of an instance, on both backends.

A router on PostgreSQL claims as ``i:<instance>:<epoch>:…``. When that life ends —
its lease runs out (a crash, on any host), it stops, or its name starts again
with a newer epoch — its claims are settled by the rule a crash always had: a
recorded send counts as delivered, anything else is pending again, sent once.
A live instance's claims are left alone.
"""

from __future__ import annotations

import pytest

from gateway.cluster.instances import Instance
from gateway.cluster.lives import claimer_name
from gateway.delivery import affinity
from gateway.delivery.notifications import NewNotification
from gateway.delivery.outbox import Outbox
from gateway.sessions.store import SessionStore
from gateway.words.return_address import ReturnAddress
from gateway.words.route import Route
from tests.helpers import eventually_async
from tests.test_cluster import LEASE, crash


@pytest.fixture(autouse=True)
def no_preference(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests are about whose claims a survivor settles, not about which instance
    prefers which conversation: every claim here may take every due notice at once."""
    monkeypatch.setattr(affinity, "AFFINITY_GRACE", -3600.0)


async def notices(store: SessionStore, count: int) -> Outbox:
    """One notice into each of ``count`` topics (on a shared store one conversation's
    notices are claimed by one claimer at a time: gateway/delivery/affinity.py)."""
    outbox = Outbox(store.db)
    made = []
    for n in range(count):
        topic = Route("memory", "group", "-100", thread_id=str(42 + n), user_id="1")
        key = f"agent:main:memory:group:-100:{42 + n}"
        session = await store.get_or_create(key, topic)
        made.append(NewNotification(f"j{n}:completion:0", "completion",
                                    ReturnAddress(key, session.id, topic), f"notice {n}",
                                    job_id=f"j{n}"))
    await outbox.produce(made)
    return outbox


async def states(outbox: Outbox) -> dict[str, tuple[str, str | None]]:
    return {n.text: (n.state, n.claimed_by) for n in await outbox.list()}


async def test_a_dead_lifes_claims_are_settled_and_a_live_ones_left(
        store: SessionStore) -> None:
    outbox = await notices(store, 3)
    dead = Instance(store.db, "vps1", lease_seconds=LEASE)
    live = Instance(store.db, "vps2", lease_seconds=60)
    await dead.start()
    await live.start()
    dead_router, live_router = claimer_name((dead.name, dead.epoch)), claimer_name(
        (live.name, live.epoch))
    sent, unsent = await outbox.claim(dead_router, 2)
    (kept,) = await outbox.claim(live_router, 1)
    # the dead one's send of the first went out and was recorded; then it died
    await store.db.write([outbox.sent_op(sent.id, dead_router, "m-1")])
    crash(dead)
    assert await outbox.reconcile_claimed() == (0, 0)  # its lease still runs: alive

    async def reconciled() -> bool:
        return await outbox.reconcile_claimed() == (1, 1)

    await eventually_async(reconciled, what="the dead life's claims settled")
    found = await states(outbox)
    assert found[sent.text] == ("delivered", dead_router)  # not sent again
    assert found[unsent.text] == ("pending", None)  # sent once, by whoever claims it
    assert found[kept.text] == ("claimed", live_router)
    await live.stop()


async def test_a_newer_epoch_of_the_name_ends_the_last_lifes_claims_at_once(
        store: SessionStore) -> None:
    """A restart under the same name, on another host too: no waiting for the lease."""
    outbox = await notices(store, 1)
    first = Instance(store.db, "vps1", lease_seconds=60)
    await first.start()
    (claimed,) = await outbox.claim(claimer_name((first.name, first.epoch)), 1)
    crash(first)
    again = Instance(store.db, "vps1", lease_seconds=60)
    await again.start()
    assert again.epoch == first.epoch + 1
    assert await outbox.reconcile_claimed() == (0, 1)
    assert (await states(outbox))[claimed.text] == ("pending", None)
    await again.stop()


async def test_a_clean_stop_ends_its_claims_too(store: SessionStore) -> None:
    outbox = await notices(store, 1)
    instance = Instance(store.db, "vps1", lease_seconds=60)
    await instance.start()
    (claimed,) = await outbox.claim(claimer_name((instance.name, instance.epoch)), 1)
    await instance.stop()
    assert await outbox.reconcile_claimed() == (0, 1)
