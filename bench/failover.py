"""How fast Telegram polling moves to another instance after ``kill -9`` (issue 21).

Two real daemons share a throwaway PostgreSQL cluster (tests/pg_cluster.py) with the
Telegram fake; each round sends messages and a job into a forum, kills the instance
polling then at a random point and starts it again (tests/failover_rounds.py). The
figure is the time from the kill until another life holds the Telegram lease, against
``cluster.failover_seconds``; beside it, the repeats the crash window allowed (a send
that went out just before the kill, sent again after it).

    python -m bench.failover [--rounds 20] [--runs 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
from collections import Counter
from pathlib import Path

import psycopg

from bench.common import load_average, run_loop, spread
from tests.failover_rounds import FAILOVER_SECONDS, LEASE_SECONDS, kill_the_poller
from tests.pg_cluster import PgCluster


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    os.environ.setdefault("NO_PROXY", "127.0.0.1,localhost")
    print(f"lease_seconds {LEASE_SECONDS:g}, failover_seconds {FAILOVER_SECONDS:g}")
    print(f"{'run':>3}  {'kills':>5}  {'takeover median':>15}  {'highest':>7}  "
          f"{'over failover':>13}  {'sent twice':>10}")
    medians, highest = [], []
    with PgCluster() as cluster:
        for run in range(args.runs):
            name = f"failover_{run}"
            with psycopg.connect(cluster.url(), autocommit=True) as admin:
                admin.execute(f"CREATE DATABASE {name}")
            with tempfile.TemporaryDirectory() as tmp:
                rounds = await kill_the_poller(Path(tmp), cluster.url(name), args.rounds,
                                               seed=run)
            takeovers = rounds.takeovers
            # the rounds send no text twice on purpose: a repeat is the crash window's
            twice = sum(n - 1 for n in Counter(s.text for s in rounds.sent).values())
            medians.append(statistics.median(takeovers))
            highest.append(max(takeovers))
            late = sum(t > FAILOVER_SECONDS for t in takeovers)
            print(f"{run + 1:>3}  {len(takeovers):>5}  {medians[-1]:>13.2f} s  "
                  f"{highest[-1]:>5.2f} s  {late:>13}  {twice:>10}")
    print(f"takeover median over runs: {spread(medians, '.2f')} s; "
          f"highest: {spread(highest, '.2f')} s")
    print(load_average())


if __name__ == "__main__":
    run_loop(main())
