"""Small test helpers: waiting for a condition, for a gateway with nothing left to do,
for a command to be running; holding the store's write lock from outside."""

from __future__ import annotations

import asyncio
import shlex
import sqlite3
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from gateway.daemon.assembly import Gateway

T = TypeVar("T")


async def eventually(check: Callable[[], T], timeout: float = 30, what: str = "condition"
                     ) -> T:
    """Wait until ``check()`` returns something truthy; fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


async def eventually_async(check: Callable[[], Awaitable[T]], timeout: float = 30,
                           what: str = "condition") -> T:
    """Like :func:`eventually` for a check that has to await."""
    deadline = time.monotonic() + timeout
    while True:
        value = await check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


async def settled(gw: Gateway, timeout: float = 30) -> None:
    """Wait until the gateway has nothing left to do: every message it took in finished,
    no conversation with work running or queued, no notification pending or claimed,
    no delivery under way, every write committed.

    A test that counts "exactly once" waits for this after the first arrival: what
    was sent by then is all that will be. (A message still on its way from a
    platform is not the gateway's yet: wait for the platform to have handed it over
    first, e.g. every Telegram update acknowledged.)
    """
    async def idle() -> bool:
        await gw.router.settle()
        if gw.runner.lanes.by_key:
            return False
        open_rows = [*await gw.outbox.list("pending"), *await gw.outbox.list("claimed")]
        return not open_rows and not await gw.runner.inbound.unfinished()

    await eventually_async(idle, timeout, what="the gateway to have nothing left to do")


def running_command(command: str, parent: int) -> bool:
    """Whether a child process of ``parent`` runs ``command`` now, as the terminal tool
    starts it (``/bin/sh -c command``, or the command itself once the shell exec'd it).
    Read from /proc: the moment a turn's command runs, not a guess at it."""
    wanted = (["/bin/sh", "-c", command], shlex.split(command))
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            if ppid != parent:
                continue
            argv = (stat.parent / "cmdline").read_bytes().decode().split("\0")[:-1]
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile, or not ours to read
        if argv in wanted:
            return True
    return False


class write_lock_held:
    """Another client holding what a stalled store keeps a life's writes waiting on:
    SQLite's write lock; on PostgreSQL (where writes run side by side) the ``instances``
    table, locked so that renewals and every write fenced by its life's row wait
    (reads of it go on)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._release: Callable[[], Awaitable[None]] | None = None

    async def __aenter__(self) -> None:
        if self.url.startswith("postgresql://"):
            import psycopg  # (only the PostgreSQL tests need it)

            pg = await psycopg.AsyncConnection.connect(self.url)
            await pg.execute("LOCK TABLE instances IN EXCLUSIVE MODE")

            async def release_pg() -> None:
                await pg.rollback()
                await pg.close()
            self._release = release_pg
        else:
            lite = sqlite3.connect(self.url, isolation_level=None)
            lite.execute("BEGIN IMMEDIATE")

            async def release_lite() -> None:
                lite.execute("ROLLBACK")
                lite.close()
            self._release = release_lite

    async def __aexit__(self, *exc: object) -> None:
        assert self._release is not None
        await self._release()
