"""A lease holder in a process of its own, for a test to kill with SIGKILL.

``python -m tests.lease_holder STORE NAME LEASE_SECONDS LEASE`` (STORE: a SQLite file
or a ``postgresql://`` URL) starts an instance, watches the lease, prints ``held
EPOCH`` once it holds it, and renews until it is killed. Its logs go to stderr.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import structlog

from gateway.cluster.instances import Instance, Lease
from gateway.store.postgres import PgDatabase
from gateway.store.sqlite import Database


async def hold(store: str, name: str, lease_seconds: float, lease_name: str) -> None:
    db = PgDatabase(store) if store.startswith("postgresql://") else Database(Path(store))
    await db.open()
    instance = Instance(db, name, lease_seconds=lease_seconds)
    await instance.start()

    async def on_acquired(epoch: int) -> None:
        print(f"held {epoch}", flush=True)

    async def on_lost() -> None:
        print("lost", flush=True)

    Lease(instance, lease_name).watch(on_acquired, on_lost)
    await asyncio.Event().wait()  # until SIGKILL: nothing is released or marked stopped


if __name__ == "__main__":
    structlog.configure(logger_factory=structlog.PrintLoggerFactory(sys.stderr))
    asyncio.run(hold(sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]))
