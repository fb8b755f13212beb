"""Several Homing instances on one PostgreSQL store, for bench/route_throughput.py.

Each instance is a process of its own (multiprocessing's "spawn": a fresh interpreter,
nothing inherited from the parent's loop or connections), running the real gateway:
``running_gateway`` with ``store.url`` the run's database, ``instance.name``
``bench-<n>``, a home of its own, and a TimedAdapter under the one platform name, so
any instance can deliver any notice. The first creates the forum topics' sessions
through its store and hands their addresses over; the parent commits the notices
through a store of its own (it routes nothing) and counts them delivered on another
connection; every instance's router claims from the shared outbox, woken by
PostgreSQL's NOTIFY. At the end each instance says which notices its adapter sent,
so a notice sent twice (by two instances) or to another topic is counted.
"""

from __future__ import annotations

import asyncio
import gc
import multiprocessing
import resource
import tempfile
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any

import psycopg

from bench.common import TimedAdapter, bench_config, forum_topic_addresses, quiet
from gateway.daemon.assembly import running_gateway, settle_memory
from gateway.delivery.notifications import NewNotification
from gateway.delivery.outbox import Outbox
from gateway.sessions.store import SessionStore
from gateway.store.migrations import OUTBOX_CHANNEL
from gateway.words.return_address import ReturnAddress

DEFAULT_GC = gc.get_threshold()
#: how long every instance may take to start and listen, and a run to make no progress
START_SECONDS = 60.0
STALL_SECONDS = 30.0
POLL_SECONDS = 0.005  # the delivered count's poll: the clock's resolution


@dataclass(frozen=True, slots=True)
class Report:
    """What one instance did in a run (sent back over its pipe)."""

    name: str
    sent: list[int]  # the notice numbers its adapter sent, a repeat counted again
    misroutes: int
    cpu_seconds: float  # from the first produce to the report
    peak_rss_mib: float


def serve(conn: Connection, url: str, name: str, sessions: int, settled: bool) -> None:
    """A spawned process's entry point: one instance until the parent asks its report."""
    asyncio.run(_serve(conn, url, name, sessions, settled))


async def _serve(conn: Connection, url: str, name: str, sessions: int,
                 settled: bool) -> None:
    quiet()
    with tempfile.TemporaryDirectory() as home:
        adapter = TimedAdapter()
        config = bench_config(home, store={"url": url}, instance={"name": name})
        async with running_gateway(config, [adapter]) as gw:
            # only the first makes the sessions: all instances then see the same ones
            addresses = await forum_topic_addresses(gw, sessions) if sessions else None
            if settled:  # as `homing run` does once started
                settle_memory()
            conn.send(addresses)
            await asyncio.to_thread(conn.recv)  # "go": the parent starts producing
            cpu_begin = time.process_time()
            await asyncio.to_thread(conn.recv)  # "report": every row is delivered
            await gw.router.settle()
            cpu = time.process_time() - cpu_begin
            sent = [(route.thread_id, text.split()) for route, text, _ in adapter.sent_ns]
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            conn.send(Report(name, [int(words[1]) for _, words in sent],
                             sum(1 for topic, words in sent if topic != words[3]), cpu, peak))


async def measure_instances(url: str, count: int, total: int, sessions: int,
                            settled: bool = True) -> dict[str, Any]:
    """One run of ``total`` notices over ``sessions`` topics routed by ``count``
    instances sharing the (fresh) database at ``url``."""
    spawn = multiprocessing.get_context("spawn")
    workers: list[tuple[BaseProcess, Connection]] = []
    # the parent's store makes the schema once, before the instances race to
    async with SessionStore(url) as store, await psycopg.AsyncConnection.connect(
            url, autocommit=True) as counter:
        try:
            for n in range(count):
                mine, theirs = spawn.Pipe()
                process = spawn.Process(
                    target=serve, name=f"bench-{n + 1}",
                    args=(theirs, url, f"bench-{n + 1}", sessions if n == 0 else 0, settled))
                process.start()
                theirs.close()  # so a worker that dies is an EOFError here, not a hang
                workers.append((process, mine))
            ready = await asyncio.wait_for(
                asyncio.gather(*(asyncio.to_thread(c.recv) for _, c in workers)),
                START_SECONDS)
            addresses: list[ReturnAddress] = ready[0]
            await _every_router_listening(counter, count)
            notices = [NewNotification(f"b{i}:completion:0", "completion",
                                       addresses[i % sessions], f"notice {i} for {i % sessions}",
                                       job_id=f"b{i}") for i in range(total)]
            outbox = Outbox(store.db)
            if settled:
                settle_memory()
            for _, c in workers:
                c.send("go")
            begin, cpu_begin = time.perf_counter(), time.process_time()
            waits = LockWaits(url)
            sampling = asyncio.create_task(waits.sample())
            await asyncio.gather(*(outbox.produce([n]) for n in notices))
            produced = time.perf_counter()
            delivered = await _wait_delivered(counter, total)
            elapsed = time.perf_counter() - begin
            cpu = time.process_time() - cpu_begin
            sampling.cancel()
            await asyncio.gather(sampling, return_exceptions=True)
            for _, c in workers:
                c.send("report")
            reports: list[Report] = await asyncio.gather(
                *(asyncio.to_thread(c.recv) for _, c in workers))
        finally:
            if settled:
                gc.unfreeze()
                gc.set_threshold(*DEFAULT_GC)
            await asyncio.to_thread(_end, workers)
    sends = sum(len(r.sent) for r in reports)
    cpu_total = cpu + sum(r.cpu_seconds for r in reports)
    return {"per_second": total / elapsed,
            "per_cpu_second": total / cpu_total,
            # seconds backends of the run's database spent waiting on a lock, a notice's
            # share, and that against the CPU a notice cost (the instances' and this one's)
            "lock_wait_ms": waits.seconds * 1000 / total,
            "lock_wait_share": waits.seconds / cpu_total,
            "produce_per_second": total / (produced - begin),
            "misroutes": sum(r.misroutes for r in reports), "delivered": delivered,
            "duplicates": sends - len({i for r in reports for i in r.sent}), "sent": sends,
            "shares": [len(r.sent) / max(1, sends) for r in reports],
            "peak_rss_mib": max(r.peak_rss_mib for r in reports)}


class LockWaits:
    """How long the run's connections wait on locks, sampled from ``pg_stat_activity``
    every 10 ms on a connection of its own: each backend seen waiting on a
    lock (``wait_event_type = 'Lock'``: a row, a transaction, an advisory lock) counts
    one sampling interval."""

    INTERVAL = 0.01

    def __init__(self, url: str) -> None:
        self.url = url
        self.seconds = 0.0

    async def sample(self) -> None:
        async with await psycopg.AsyncConnection.connect(self.url, autocommit=True) as conn:
            last = time.perf_counter()
            while True:
                cursor = await conn.execute(
                    "SELECT COUNT(*) FROM pg_stat_activity WHERE datname = current_database() "
                    "AND wait_event_type = 'Lock'")
                row = await cursor.fetchone()
                now = time.perf_counter()
                self.seconds += (int(row[0]) if row else 0) * (now - last)
                last = now
                await asyncio.sleep(self.INTERVAL)


async def _every_router_listening(conn: psycopg.AsyncConnection[Any], count: int) -> None:
    """Wait until ``count`` connections LISTEN on the outbox's channel: a NOTIFY sent
    before an instance listens would reach it only at its idle poll (5 s later)."""
    deadline = time.monotonic() + START_SECONDS
    while True:
        cursor = await conn.execute(
            "SELECT COUNT(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND query LIKE %s", (f'LISTEN "{OUTBOX_CHANNEL}"%',))
        row = await cursor.fetchone()
        if row is not None and row[0] >= count:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"only {row[0] if row else 0} of {count} routers listen")
        await asyncio.sleep(0.05)


async def _wait_delivered(conn: psycopg.AsyncConnection[Any], total: int) -> int:
    """Poll the delivered count until it is ``total`` (or stops moving): the run's end."""
    last, moved = -1, time.monotonic()
    while True:
        cursor = await conn.execute(
            "SELECT COUNT(*) FROM notifications WHERE state = 'delivered'")
        row = await cursor.fetchone()
        done = int(row[0]) if row is not None else 0
        if done >= total:
            return done
        if done != last:
            last, moved = done, time.monotonic()
        elif time.monotonic() - moved > STALL_SECONDS:
            return done
        await asyncio.sleep(POLL_SECONDS)


def _end(workers: list[tuple[BaseProcess, Connection]]) -> None:
    """Each instance stops once reported (a closed pipe stops one still waiting); one
    that does not within the start-up allowance is terminated — only ours, by handle."""
    for _, conn in workers:
        conn.close()
    for process, _ in workers:
        process.join(START_SECONDS)
        if process.is_alive():
            process.terminate()
            process.join()
