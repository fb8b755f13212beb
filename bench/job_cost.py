"""What a background job costs the machine, and how fast exits become committed notices.

Starts 1,000 jobs in 1,000 conversations, each ``sh -c '…'`` blocked on a read
from one FIFO (a shell builtin, so the command is one process), and counts the
processes in the jobs' process groups and the daemon's threads. Then one
write to the FIFO ends every job at once, and the figure is how fast the
daemon turns those exits into completion notices committed to the outbox
(the router is running, as in the daemon).

    python -m bench.job_cost [--jobs 1000] [--runs 3]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from pathlib import Path

from bench.common import TimedAdapter, bench_config, forum_topic_addresses, quiet, run_loop
from gateway.daemon.assembly import running_gateway


def _threads() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    raise RuntimeError("no thread count in /proc/self/status")


def _processes_in_groups(groups: set[int]) -> int:
    count = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        if fields[0] != "Z" and int(fields[2]) in groups:
            count += 1
    return count


async def measure(jobs: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as home:
        fifo = Path(home) / "go"
        os.mkfifo(fifo)
        # held open for reading and writing: the jobs' opens never block, their reads do
        holder = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)
        adapter = TimedAdapter()
        try:
            async with running_gateway(bench_config(home), [adapter]) as gw:
                addresses = await forum_topic_addresses(gw, jobs)
                threads_before = _threads()
                records = []
                for address in addresses:
                    records.append(await gw.jobs.start(f"sh -c 'read line < {fifo}'", address))
                await asyncio.sleep(1.0 + jobs / 1000)  # every job reaches its read
                groups = {r.pid for r in records if r.pid}
                processes = _processes_in_groups(groups)
                threads = _threads() - threads_before
                started = time.perf_counter()
                os.write(holder, b"\n" * jobs)  # every job reads one line and exits
                committed = 0
                while committed < jobs:
                    await asyncio.sleep(0.005)
                    row = await gw.store.db.fetchone(
                        "SELECT COUNT(*) FROM notifications WHERE kind = 'completion'")
                    committed = row[0]
                elapsed = time.perf_counter() - started
                await gw.router.settle()
        finally:
            os.close(holder)
    return {"processes": processes / jobs, "threads": threads / jobs,
            "exits_per_s": jobs / elapsed, "all_committed_ms": elapsed * 1000}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    quiet()
    results = []
    for run in range(args.runs):
        r = await measure(args.jobs)
        results.append(r)
        print(f"run {run + 1}: {r['processes']:.2f} processes and {r['threads']:.2f} daemon "
              f"threads per running job; {args.jobs} exits committed in "
              f"{r['all_committed_ms']:.0f} ms = {r['exits_per_s']:.0f} exits/s")
    rates = [r["exits_per_s"] for r in results]
    print(f"median over {len(results)} runs at {args.jobs} jobs: "
          f"{statistics.median(r['processes'] for r in results):.2f} processes/job, "
          f"{statistics.median(r['threads'] for r in results):.2f} threads/job, "
          f"{statistics.median(rates):.0f} exits/s (spread {min(rates):.0f}–{max(rates):.0f})")
    print("load average: " + " ".join(f"{x:.2f}" for x in os.getloadavg()))


if __name__ == "__main__":
    run_loop(main())
