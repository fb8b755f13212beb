"""Three real daemons on one PostgreSQL store, and one of them killed with ``kill -9``
every round — the Telegram poller or not — while people write in a forum's topics and
start jobs there (tests/failover_rounds.py, with every instance a target).

At the end every message and every job is counted from what the fake Bot API received:
answered or reported once, twice (a repeat a kill allowed: the send went out just
before it, its record did not), in another topic (a misroute) or never (lost).

    python -m bench.chaos [--rounds 30] [--seed N]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import psycopg

from bench.common import load_average, run_loop
from tests.failover_rounds import kill_the_poller
from tests.pg_cluster import PgCluster

NAMES = ("vps1", "vps2", "vps3")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--seed", type=int, default=int(time.time()))
    args = parser.parse_args()
    os.environ.setdefault("NO_PROXY", "127.0.0.1,localhost")
    began = time.monotonic()
    with PgCluster() as cluster, tempfile.TemporaryDirectory() as tmp:
        with psycopg.connect(cluster.url(), autocommit=True) as admin:
            admin.execute("CREATE DATABASE chaos")
        url = cluster.url("chaos")
        rounds = await kill_the_poller(Path(tmp), url, args.rounds, args.seed,
                                       names=NAMES, any_instance=True)
    counts = {"once": 0, "twice": 0, "misrouted": 0, "lost": 0}
    for marker, topic in rounds.chatter.items():
        copies = [s for s in rounds.sent if s.text.startswith(f"Received: hello {marker}\n")]
        _count(counts, [s.message_thread_id for s in copies], topic)
    notices = 0
    for marker, topic in rounds.started.items():
        jobs = rounds.jobs.get(marker, [])
        notices += 1
        copies = [s for s in rounds.sent if any(s.text.startswith(f"Job {j} ") for j in jobs)]
        _count(counts, [s.message_thread_id for s in copies], topic)
        if len(jobs) > 1:
            counts["twice"] += 1  # the job itself started twice
    print(f"seed {args.seed}; {len(NAMES)} instances; {len(rounds.kills)} kills "
          f"(the poller {len(rounds.takeovers)} times); {len(rounds.chatter)} messages, "
          f"{notices} jobs; {time.monotonic() - began:.0f} s; "
          f"ended by a stall and restarted: {len(rounds.self_ended)}")
    print(f"once {counts['once']}, twice {counts['twice']}, misrouted "
          f"{counts['misrouted']}, lost {counts['lost']}; {load_average()}")


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
