"""Job exit → adapter send, with 1, 100 and 1,000 concurrent jobs.

Each job runs in its own conversation, sleeps, prints the wall-clock time in
nanoseconds as its very last act, and exits. Jobs end all at once (the worst
case: every exit competes for the two cores) or spread over a few seconds.
The latency is the time from that print to the memory adapter's send of the
completion notice — it
includes the shell's exit, the daemon noticing it, the durable outbox commit,
the router, the owner's turn and the send.

Each figure is the median of ``--runs`` runs with the lowest and highest.

    python -m bench.notify_latency [--levels 1,100,1000] [--spreads 0,10] [--runs 3]
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import tempfile
import time

from bench.common import (
    TimedAdapter,
    bench_config,
    forum_topic_addresses,
    load_average,
    percentiles,
    quiet,
    run_loop,
    spread,
)
from gateway.daemon.assembly import running_gateway


async def measure(jobs: int, spread: float) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as home:
        adapter = TimedAdapter()
        async with running_gateway(bench_config(home), [adapter]) as gw:
            addresses = await forum_topic_addresses(gw, jobs)
            # all jobs run at once; they end together, or spread over ``spread`` seconds
            first_end = time.time_ns() + int((2.0 + jobs * 0.006) * 1e9)
            topic_of_job = {}
            for n, address in enumerate(addresses):
                end_ns = first_end + int(spread * 1e9 * n / max(1, jobs))
                command = (f"d=$(( ({end_ns} - $(date +%s%N)) / 1000000 )); [ $d -gt 0 ] && "
                           f"sleep $((d / 1000)).$(printf %03d $((d % 1000))); date +%s%N")
                job = await gw.jobs.start(command, address)
                topic_of_job[job.id] = address.route.thread_id
            await _wait_for(lambda: len(adapter.sent_ns) >= jobs, 60 + jobs * 0.05)
            latencies = []
            for _route, text, sent_ns in adapter.sent_ns:
                printed = int([w for w in text.split() if w.isdigit() and len(w) >= 18][-1])
                latencies.append((sent_ns - printed) / 1e6)
            # each notice names its job; it must have gone to that job's own topic
            misrouted = sum(1 for route, text, _ in adapter.sent_ns
                            if topic_of_job.get(text.split()[1].rstrip(":")) != route.thread_id)
        p50, p99 = percentiles(latencies)
        return {"jobs": jobs, "p50": p50, "p99": p99, "max": max(latencies),
                "misrouted": misrouted}


async def _wait_for(check, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError("not every notice arrived")
        await asyncio.sleep(0.01)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--levels", default="1,100,1000")
    parser.add_argument("--spreads", default="0,10",
                        help="seconds over which the jobs' ends are spread (0: all at once)")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    quiet()
    print(f"{'jobs':>6}  {'ends over':>9}  {'p50 ms':>22}  {'p99 ms':>22}  {'max ms':>22}  "
          f"misrouted")
    for level in (int(x) for x in args.levels.split(",")):
        for over in (float(x) for x in args.spreads.split(",")):
            if level == 1 and over:
                continue
            runs = [await measure(level, over) for _ in range(args.runs)]
            p50, p99, top = ([r[key] for r in runs] for key in ("p50", "p99", "max"))
            print(f"{level:>6}  {over:>7.1f} s  {spread(p50, ',.1f'):>22}  "
                  f"{spread(p99, ',.1f'):>22}  {spread(top, ',.1f'):>22}  "
                  f"{sum(int(r['misrouted']) for r in runs)}")
            print(f"        {load_average()}")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS of the daemon process: {peak:.0f} MiB")


if __name__ == "__main__":
    run_loop(main())
