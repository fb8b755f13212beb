"""The stateful property test of the way back with its store on PostgreSQL.

The same machine as tests/test_stateful_routing.py — messages, work started
and finishing, ``/new``, ``/compress``, crashes with notices in flight,
restarts — over a database of its own per example on the throwaway cluster,
so every invariant it checks is checked on the second backend too.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator

import psycopg
import pytest
from hypothesis import settings

from .pg_cluster import PgCluster
from .test_stateful_routing import RoutingMachine

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


@pytest.fixture(autouse=True, scope="module")
def _on_the_cluster(pg_cluster: PgCluster) -> Iterator[None]:
    _cluster.append(pg_cluster)
    yield
    _cluster.clear()


PgRoutingMachine.TestCase.settings = settings(
    max_examples=int(os.environ.get("HOMING_STATEFUL_PG_EXAMPLES", "12")),
    stateful_step_count=int(os.environ.get("HOMING_STATEFUL_STEPS", "50")),
    deadline=None,
)
test_routing_state_machine_on_postgresql = PgRoutingMachine.TestCase
