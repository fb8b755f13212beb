"""Three real daemons on one PostgreSQL store, one of them killed with ``kill -9`` every
5-15 s for ten minutes — the Telegram poller or not — and the store stopped for 10 s
halfway through, while people write in a forum's topics and start jobs there, with two
CPU hogs beside them (tests/failover_rounds.py ``chaos``). Then the writing stops and
the run waits for the backlog.

Printed: self-fencings (an instance ending by itself: its lease ran out before a renewal
reached the store) per real kill, failover (from killing the poller until another life
polls), how long after the last kill the backlog was drained, what was left pending and
unhandled at the end, and every message and job counted from what the fake Bot API
received: answered or reported once, twice (a repeat a kill allowed), in another topic (a
misroute) or never (lost).

The daemons run the code ``python -m gateway.cli`` imports from the working directory:
to measure another revision, run this from a checkout of it (PYTHONPATH=$PWD).

    python -m bench.chaos [--minutes 10] [--hogs 2] [--outage 10] [--seed N]
    python -m bench.chaos --rounds 30    # the older form: a kill a round, no hogs
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

import psycopg

from bench.common import daemon_code, load_average, run_loop
from tests.failover_rounds import Chaos, Rounds, chaos, kill_the_poller
from tests.pg_cluster import PgCluster

NAMES = ("vps1", "vps2", "vps3")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--hogs", type=int, default=2, help="CPU hogs beside the daemons")
    parser.add_argument("--outage", type=float, default=10.0,
                        help="seconds the store is down halfway through (0: none)")
    parser.add_argument("--settle", type=float, default=180.0,
                        help="seconds to wait for the backlog after the last kill")
    parser.add_argument("--rounds", type=int, help="the older form: this many rounds")
    parser.add_argument("--seed", type=int, default=int(time.time()))
    args = parser.parse_args()
    os.environ.setdefault("NO_PROXY", "127.0.0.1,localhost")
    # a run in the background ignores SIGINT: SIGTERM stops it, daemons, hogs and cluster too
    main_task = asyncio.current_task()
    assert main_task is not None
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, main_task.cancel)
    print(daemon_code(), flush=True)
    began = time.monotonic()
    hogs = [] if args.rounds else [
        await asyncio.create_subprocess_exec(sys.executable, "-c", "while True: pass")
        for _ in range(args.hogs)]
    try:
        with PgCluster() as cluster, tempfile.TemporaryDirectory() as tmp:
            with psycopg.connect(cluster.url(), autocommit=True) as admin:
                admin.execute("CREATE DATABASE chaos")
            url = cluster.url("chaos")
            if args.rounds:
                rounds: Rounds = await kill_the_poller(Path(tmp), url, args.rounds,
                                                       args.seed, names=NAMES,
                                                       any_instance=True)
            else:
                async def outage() -> None:
                    await asyncio.to_thread(cluster.halt)
                    await asyncio.sleep(args.outage)
                    await asyncio.to_thread(cluster.resume)

                rounds = await chaos(Path(tmp), url, args.minutes * 60, args.seed,
                                     outage if args.outage > 0 else None, names=NAMES,
                                     settle=args.settle)
    finally:
        for hog in hogs:
            hog.kill()
            await hog.wait()
    print(f"seed {args.seed}; {len(NAMES)} instances; {len(rounds.kills)} kills "
          f"(the poller {len(rounds.takeovers)} times); {len(rounds.chatter)} messages, "
          f"{len(rounds.started)} jobs; {time.monotonic() - began:.0f} s; "
          f"{len(hogs)} CPU hogs")
    if isinstance(rounds, Chaos):
        _print_chaos(rounds, args.outage)
    else:
        print(f"ended by a stall and restarted: {len(rounds.self_ended)}")
    counts = _count_all(rounds)
    print(f"once {counts['once']}, twice {counts['twice']}, misrouted "
          f"{counts['misrouted']}, lost {counts['lost']}; {load_average()}")


def _print_chaos(run: Chaos, outage: float) -> None:
    fencings = run.fencings
    kills = max(1, len(run.kills))
    by_name: dict[str, int] = {}
    for name, _ in fencings:
        by_name[name] = by_name.get(name, 0) + 1
    times = ", ".join(f"{at:.0f}" for _, at in fencings[:12]) or "-"
    print(f"self-fencings {len(fencings)} ({len(fencings) / kills:.2f} per real kill; "
          f"{', '.join(f'{n} {c}' for n, c in sorted(by_name.items())) or 'none'}); at "
          f"{times}{', …' if len(fencings) > 12 else ''} s into the run")
    for reason, times in sorted(run.fenced_because.items(), key=lambda kv: -kv[1]):
        print(f"  fenced {times} times: {reason}")
    if run.takeovers:
        ordered = sorted(run.takeovers)
        p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
        print(f"failover after killing the poller: p50 {statistics.median(ordered):.2f} s, "
              f"p99 {p99:.2f} s, max {ordered[-1]:.2f} s ({len(ordered)} takeovers)")
    recovery = run.outage_recovery
    if outage > 0:
        print(f"store down {outage:g} s: polling again {recovery:.2f} s after it came back"
              if recovery is not None else f"store down {outage:g} s: no poller after it")
    drained = run.drained_after
    print("backlog drained " + (f"{drained:.1f} s after the last kill" if drained is not None
                                else "NOT within the settle")
          + f"; at the end {run.pending_notices} notices pending, "
          f"{run.unhandled_updates} Telegram updates unhandled")


def _count_all(rounds: Rounds) -> dict[str, int]:
    counts = {"once": 0, "twice": 0, "misrouted": 0, "lost": 0}
    for marker, topic in rounds.chatter.items():
        copies = [s for s in rounds.sent if s.text.startswith(f"Received: hello {marker}\n")]
        _count(counts, [s.message_thread_id for s in copies], topic)
    for marker, topic in rounds.started.items():
        jobs = rounds.jobs.get(marker, [])
        copies = [s for s in rounds.sent if any(s.text.startswith(f"Job {j} ") for j in jobs)]
        _count(counts, [s.message_thread_id for s in copies], topic)
        if len(jobs) > 1:
            counts["twice"] += 1  # the job itself started twice
    return counts


def _count(counts: dict[str, int], topics: list[int | None], topic: int) -> None:
    if not topics:
        counts["lost"] += 1
    elif set(topics) != {topic}:
        counts["misrouted"] += 1
    elif len(topics) == 1:
        counts["once"] += 1
    else:
        counts["twice"] += 1


if __name__ == "__main__":
    run_loop(main())
