"""How late an instance's lease renewals reach the store on a busy machine: an
:class:`Instance` on a throwaway PostgreSQL (tests/pg_cluster.py), CPU hogs enough for a
load of about 20, the instance's own event loop busy with steps that do not yield (up to
``--step`` seconds each), and batches of writes queued all the while.

A trigger on ``instances`` records each renewal as the store commits it, so the figure
does not depend on the code measured: a renewal's delay is the time between two renewals
of one life, less the renewal interval (a third of the lease). An instance that fences
itself (its lease ran out before a renewal got through) is counted and started again.

    python -m bench.lease_renewal [--lease 1] [--hogs 18] [--seconds 60] [--runs 3]

To measure another revision, run this from a checkout of it (``PYTHONPATH=$PWD``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import sys
import time

import psycopg

from bench.common import load_average, quiet, run_loop, spread
from gateway.cluster.instances import Instance
from gateway.store.postgres import PgDatabase
from tests.pg_cluster import PgCluster

#: each renewal as the store commits it (row triggers fire for the upsert of a start too)
TRIGGER = """
CREATE TABLE bench_renewals (name TEXT, epoch BIGINT, renewed_at DOUBLE PRECISION);
CREATE TABLE bench_rows (id BIGSERIAL PRIMARY KEY, payload TEXT);
CREATE FUNCTION bench_renewed() RETURNS trigger AS $$
BEGIN
  INSERT INTO bench_renewals VALUES (NEW.name, NEW.epoch, NEW.renewed_at);
  RETURN NEW;
END $$ LANGUAGE plpgsql;
CREATE TRIGGER bench_renewed AFTER INSERT OR UPDATE OF renewed_at ON instances
  FOR EACH ROW EXECUTE FUNCTION bench_renewed();
"""
BATCH_ROWS = 2000


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lease", type=float, default=1.0, help="cluster.lease_seconds")
    parser.add_argument("--hogs", type=int, default=18, help="CPU hogs (default 18)")
    parser.add_argument("--seconds", type=float, default=60.0, help="a run (default 60)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--step", type=float, default=0.5,
                        help="the longest loop step that does not yield (default 0.5 s)")
    args = parser.parse_args()
    quiet()  # (warnings stay: a failed renewal, a fenced instance)
    print(f"lease {args.lease:g} s (renewed every {args.lease / 3:.2f} s); {args.hogs} CPU "
          f"hogs; loop steps up to {args.step:g} s; batches of {BATCH_ROWS} rows; "
          f"{os.cpu_count()} cores", flush=True)
    p50s, p99s, maxes, fenced, loads = [], [], [], [], []
    with PgCluster() as cluster:
        for run in range(1, args.runs + 1):
            database = f"renewal_{run}"
            with psycopg.connect(cluster.url(), autocommit=True) as admin:
                admin.execute(f"CREATE DATABASE {database}")
            delays, fencings, load = await _run(cluster.url(database), args)
            fenced.append(fencings)
            loads.append(load)
            if not delays:
                print(f"run {run}: no renewal reached the store; fenced itself {fencings} "
                      f"times; load average over the run {load:.1f}", flush=True)
                continue
            p50, p99 = statistics.median(delays), _p99(delays)
            p50s.append(p50)
            p99s.append(p99)
            maxes.append(max(delays))
            print(f"run {run}: {len(delays)} renewals, delay p50 {p50 * 1000:.0f} ms, p99 "
                  f"{p99 * 1000:.0f} ms, max {max(delays) * 1000:.0f} ms; fenced itself "
                  f"{fencings} times; load average over the run {load:.1f}", flush=True)
    delay = (f"renewal delay p50 {spread([v * 1000 for v in p50s])} ms, p99 "
             f"{spread([v * 1000 for v in p99s])} ms, max {spread([v * 1000 for v in maxes])}"
             f" ms" if p50s else "no renewal reached the store")
    print(f"{delay}; self-fencings {spread([float(f) for f in fenced])} a run "
          f"(median, lowest-highest of {args.runs}); load {spread(loads, '.1f')}; "
          f"{load_average()}")


async def _run(url: str, args: argparse.Namespace) -> tuple[list[float], int, float]:
    hogs = [await asyncio.create_subprocess_exec(sys.executable, "-c", "while True: pass")
            for _ in range(args.hogs)]
    db = PgDatabase(url)
    await db.open()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(TRIGGER)
    fencings = 0
    loads: list[float] = []
    instance = Instance(db, "busy", lease_seconds=args.lease)
    await instance.start()
    stop = asyncio.Event()
    busy = [asyncio.create_task(_busy_loop(stop, args.step)),
            asyncio.create_task(_batches(db, stop))]
    try:
        ends = time.monotonic() + args.seconds
        while time.monotonic() < ends:
            await asyncio.sleep(1)
            loads.append(os.getloadavg()[0])
            if instance.ended is not None:
                fencings += 1
                await instance.stop()
                instance = Instance(db, "busy", lease_seconds=args.lease)
                await instance.start()
    finally:
        stop.set()
        await asyncio.gather(*busy, return_exceptions=True)
        await instance.stop()
        await db.close()
        for hog in hogs:
            hog.kill()
            await hog.wait()
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute("SELECT epoch, renewed_at FROM bench_renewals "
                            "ORDER BY epoch, renewed_at").fetchall()
    interval = args.lease / 3
    delays = [max(0.0, later - earlier - interval)
              for (e1, earlier), (e2, later) in zip(rows, rows[1:], strict=False) if e1 == e2]
    return delays, fencings, statistics.mean(loads)


async def _busy_loop(stop: asyncio.Event, longest: float) -> None:
    """The event loop busy: steps of work that never yield, a short breath between."""
    rng = random.Random(1)
    while not stop.is_set():
        until = time.monotonic() + rng.uniform(0.05, longest)
        while time.monotonic() < until:
            pass
        await asyncio.sleep(0.02)


async def _batches(db: PgDatabase, stop: asyncio.Event) -> None:
    """Write batches back to back, a few queued at once: the write queue is never empty."""
    payload = "x" * 200
    while not stop.is_set():
        writes = [db.write([("INSERT INTO bench_rows (payload) VALUES (?)", (payload,))]
                           * BATCH_ROWS) for _ in range(3)]
        await asyncio.gather(*writes)


def _p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]


if __name__ == "__main__":
    run_loop(main())
