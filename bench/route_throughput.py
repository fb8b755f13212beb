"""Durable notifications through the router: notifications/s and misroutes.

10,000 notifications addressed to 10, 1,000 and 10,000 sessions (forum
topics of one group) are committed to the outbox by concurrent producers and
routed through the real router, lanes, command agent and a memory adapter.
The clock runs from the first produce to the last row marked delivered.
A misroute is a notice sent anywhere but its own topic.

Each figure is the median of ``--runs`` runs with the lowest and highest.

    python -m bench.route_throughput [--notifications 10000] [--sessions 10,1000,10000]
                                     [--runs 3] [--store postgresql://user@host/db]

With ``--store``, the state is on PostgreSQL: each run gets a database of its own,
created beside the URL's (the user needs CREATEDB) and dropped after.

``--instances 1,2,4`` (with ``--store``) routes with that many Homing instances, each
a process of its own on the run's one database (bench/instances_worker.py); this
process commits the notices and routes nothing. Every count in such a list, 1
included, is measured that way, so the rows compare; the default (``1`` alone) is
the single process above. Besides the figures: the notices per CPU-second summed
over the instances (and this process, which commits the notices), how long the run's
database connections waited on locks per notice (sampled from ``pg_stat_activity``)
and that as a share of a notice's CPU, each instance's share of the notices, and
duplicates (a notice sent by two instances; must be 0).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import itertools
import os
import resource
import tempfile
import time
from collections.abc import Iterator
from urllib.parse import urlsplit, urlunsplit

from bench.common import (
    TimedAdapter,
    bench_config,
    forum_topic_addresses,
    load_average,
    quiet,
    run_loop,
    spread,
)
from gateway.daemon.assembly import running_gateway, settle_memory
from gateway.delivery.notifications import NewNotification

DEFAULT_GC = gc.get_threshold()


async def measure(total: int, sessions: int, settled: bool = False,
                  store: str | None = None) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as home, fresh_database(store) as url:
        adapter = TimedAdapter()
        sections = {"store": {"url": url}} if url else {}
        async with running_gateway(bench_config(home, **sections), [adapter]) as gw:
            addresses = await forum_topic_addresses(gw, sessions)
            if settled:  # as `homing run` does once started
                settle_memory()
            notices = [NewNotification(f"b{i}:completion:0", "completion",
                                       addresses[i % sessions], f"notice {i} for {i % sessions}",
                                       job_id=f"b{i}") for i in range(total)]
            begin, cpu_begin = time.perf_counter(), time.process_time()
            await asyncio.gather(*(gw.outbox.produce([n]) for n in notices))
            produced = time.perf_counter()
            while len(adapter.sent_ns) < total:  # noqa: ASYNC110 - the bench's own clock
                await asyncio.sleep(0.005)
            await gw.router.settle()
            elapsed = time.perf_counter() - begin
            cpu = time.process_time() - cpu_begin
            delivered = len(await gw.outbox.list("delivered", limit=total + 1))
            misroutes = sum(1 for route, text, _ in adapter.sent_ns
                            if route.thread_id != text.split()[3])
    if settled:
        gc.unfreeze()
        gc.set_threshold(*DEFAULT_GC)
    return {"per_second": total / elapsed, "per_cpu_second": total / cpu,
            "produce_per_second": total / (produced - begin),
            "misroutes": misroutes, "delivered": delivered, "sent": len(adapter.sent_ns)}


_runs = itertools.count()


@contextlib.contextmanager
def fresh_database(url: str | None) -> Iterator[str | None]:
    """A new database beside ``url``'s for one run (nothing left from the last), or
    None for SQLite."""
    if url is None:
        yield None
        return
    import psycopg

    name = f"homing_bench_{os.getpid()}_{next(_runs)}"
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    parts = urlsplit(url)
    try:
        yield urlunsplit(parts._replace(path=f"/{name}"))
    finally:
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE {name} WITH (FORCE)")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--notifications", type=int, default=10_000)
    parser.add_argument("--sessions", default="10,1000,10000")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--store", metavar="URL",
                        help="a postgresql:// URL: the state on PostgreSQL (default SQLite)")
    parser.add_argument("--plain-gc", action="store_true",
                        help="without the daemon's gc.freeze and threshold (to compare)")
    parser.add_argument("--instances", default="1",
                        help="instance counts sharing the --store database, e.g. 1,2,4")
    args = parser.parse_args()
    instances = [int(x) for x in args.instances.split(",")]
    if instances != [1] and not args.store:
        parser.error("--instances needs --store: instances share a PostgreSQL store")
    quiet()
    where = urlsplit(args.store).netloc.split("@")[-1] if args.store else None
    print(f"store: PostgreSQL at {where}" if where else "store: SQLite")
    if instances != [1]:
        await main_instances(args, instances)
        return
    print(f"{'sessions':>8}  {'routed/s':>22}  {'per CPU-s':>22}  {'committed/s':>22}  "
          f"misroutes  undelivered")
    for sessions in (int(x) for x in args.sessions.split(",")):
        runs = [await measure(args.notifications, sessions, settled=not args.plain_gc,
                              store=args.store) for _ in range(args.runs)]
        figures = {key: [r[key] for r in runs]
                   for key in ("per_second", "per_cpu_second", "produce_per_second")}
        misroutes = sum(int(r["misroutes"]) for r in runs)
        undelivered = sum(args.notifications - int(r["delivered"]) for r in runs)
        print(f"{sessions:>8}  {spread(figures['per_second']):>22}  "
              f"{spread(figures['per_cpu_second']):>22}  "
              f"{spread(figures['produce_per_second']):>22}  {misroutes:>9}  {undelivered:>11}")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS: {peak:.0f} MiB; {load_average()}")


async def main_instances(args: argparse.Namespace, instances: list[int]) -> None:
    """The table for several instances: a row per session and instance count, then
    each instance's share of the sends and the load average after that row's runs."""
    # (here: psycopg and multiprocessing stay out of the SQLite run's peak RSS)
    from bench.instances_worker import measure_instances

    print(f"{'sessions':>8}  {'instances':>9}  {'routed/s':>22}  {'per CPU-s (all)':>22}  "
          f"{'lock wait a notice':>22}  {'committed/s':>22}  misroutes  duplicates  "
          f"undelivered")
    peak = 0.0
    for sessions in (int(x) for x in args.sessions.split(",")):
        for count in instances:
            runs = []
            for _ in range(args.runs):
                with fresh_database(args.store) as url:
                    assert url is not None
                    runs.append(await measure_instances(url, count, args.notifications,
                                                        sessions, settled=not args.plain_gc))
            figures = {key: [r[key] for r in runs]
                       for key in ("per_second", "per_cpu_second", "produce_per_second",
                                   "lock_wait_ms", "lock_wait_share")}
            waited = (f"{spread(figures['lock_wait_ms'], ',.3f')} ms "
                      f"({spread(figures['lock_wait_share'], '.1%')})")
            misroutes = sum(r["misroutes"] for r in runs)
            duplicates = sum(r["duplicates"] for r in runs)
            undelivered = sum(args.notifications - r["delivered"] for r in runs)
            print(f"{sessions:>8}  {count:>9}  {spread(figures['per_second']):>22}  "
                  f"{spread(figures['per_cpu_second']):>22}  {waited:>22}  "
                  f"{spread(figures['produce_per_second']):>22}  {misroutes:>9}  "
                  f"{duplicates:>10}  {undelivered:>11}")
            shares = ", ".join(f"bench-{i + 1} {spread([r['shares'][i] for r in runs], '.0%')}"
                               for i in range(count))
            print(f"{'':>21}share: {shares}; {load_average()}")
            peak = max(peak, *(r["peak_rss_mib"] for r in runs))
    print(f"peak RSS of an instance: {peak:.0f} MiB; {load_average()}")


if __name__ == "__main__":
    run_loop(main())
