"""The stateful property test of the way back with its store on PostgreSQL, and two
routers claiming from it.

The same machine as tests/test_stateful_routing.py — messages, work started
and finishing, ``/new``, ``/compress``, crashes with notices in flight,
restarts — over a database of its own per example on the throwaway cluster,
so every invariant it checks is checked on the second backend too. A second
router, on connections of its own (as another instance would be), claims from the
same outbox and delivers through the same conversations' lanes: every notice still
goes to its owner once, whichever router took it.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator

import psycopg
import pytest

from gateway.delivery.outbox import Outbox
from gateway.delivery.router import Router
from gateway.sessions.store import SessionStore
from tests.pg_cluster import PgCluster
from tests.test_stateful_routing import RoutingMachine, in_parts

_cluster: list[PgCluster] = []
_databases = itertools.count()


class PgRoutingMachine(RoutingMachine):
    def __init__(self) -> None:
        (cluster,) = _cluster
        name = f"stateful_{os.getpid()}_{next(_databases)}"
        with psycopg.connect(cluster.url(), autocommit=True) as admin:
            admin.execute(f"CREATE DATABASE {name} TEMPLATE template0 STRATEGY file_copy")
        self.url = cluster.url(name)  # before the machine starts its store
        super().__init__()

    def state_location(self) -> str:
        return self.url

    async def _start(self) -> None:
        await self._close_second()  # (a crash closed the first store only)
        await super()._start()
        self.second_store = SessionStore(self.url)
        await self.second_store.initialize()
        second = Router(Outbox(self.second_store.db), self.second_store, self.runner)
        await second.start()
        self.router = BothRouters(self.router, second)  # type: ignore[assignment]

    async def _stop(self) -> None:
        await super()._stop()
        await self._close_second()

    async def _kill(self) -> None:
        await super()._kill()
        await self._close_second()

    async def _close_second(self) -> None:
        store: SessionStore | None = getattr(self, "second_store", None)
        if store is not None and store.is_open:
            await self.router.stop()
            await store.close()


class BothRouters:
    """Two routers as the machine's one: started, stopped and settled together."""

    def __init__(self, *routers: Router) -> None:
        self.routers = routers

    async def start(self) -> None:
        for router in self.routers:
            await router.start()

    async def stop(self) -> None:
        for router in self.routers:
            await router.stop()

    async def settle(self) -> None:
        for router in self.routers:
            await router.settle()

    def wake(self) -> None:
        for router in self.routers:
            router.wake()

    @property
    def unsettled(self) -> int:
        return sum(router.unsettled for router in self.routers)


@pytest.fixture(autouse=True, scope="module")
def _on_the_cluster(pg_cluster: PgCluster) -> Iterator[None]:
    _cluster.append(pg_cluster)
    yield
    _cluster.clear()


globals().update(in_parts("test_routing_state_machine_with_two_routers_on_postgresql",
                          PgRoutingMachine,
                          int(os.environ.get("HOMING_STATEFUL_PG_EXAMPLES", "12"))))
