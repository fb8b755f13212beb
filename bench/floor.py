"""The floor under a durable notice: the statements one costs, replayed raw, beside
the router's figure.

A notice delivered by the router costs these writes on the state database: its row
committed (``Outbox.insert_op``), claimed (``claim_statement``), its transcript line
and send record (``TRANSCRIPT_LINE``, ``Outbox.sent_op``) and its outcome (the
``delivered`` update). Here they run on the same schema (the real migrations), WAL
and ``synchronous=NORMAL`` as the daemon opens it, batches of 500, one
``executemany`` per statement and batch, from one thread with nothing else: what no
router could go below on this machine. The router's own figure
(bench/route_throughput.py) is measured in the same run, and the ratio printed, so
the gap to the limit is visible in every run.

Each figure is the median of ``--runs`` runs with the lowest and highest.

    python -m bench.floor [--notifications 10000] [--sessions 10,1000,10000] [--runs 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path

from bench.common import load_average, quiet, run_loop, spread
from bench.route_throughput import measure
from gateway.delivery.notifications import NewNotification
from gateway.delivery.outbox import (
    Outbox,
    claim_parameters,
    claim_statement,
    delivered_op,
)
from gateway.sessions.store import TRANSCRIPT_LINE, transcript_row
from gateway.store.sqlite import Database
from gateway.words.events import NoticeInfo
from gateway.words.return_address import ReturnAddress
from gateway.words.route import Route

BATCH = 500
CLAIMER = "router-floor-1"


async def _schema(path: Path) -> None:
    db = Database(path)
    await db.open()
    await db.close()


def floor(total: int, sessions: int) -> float:
    """Notices per CPU-second of the raw statements alone."""
    with tempfile.TemporaryDirectory() as home:
        path = Path(home) / "state.db"
        asyncio.run(_schema(path))
        conn = sqlite3.connect(path, isolation_level=None)
        conn.execute("PRAGMA synchronous=NORMAL")
        routes = [Route("memory", "group", "-1001", thread_id=str(i), user_id="1")
                  for i in range(sessions)]
        ids = [f"s{i:08d}" for i in range(sessions)]
        keys = [f"agent:main:memory:group:-1001:{i}" for i in range(sessions)]
        now = time.time()
        conn.execute("BEGIN")
        conn.executemany(
            "INSERT INTO sessions (id, session_key, platform, route, created_at, "
            "last_active_at) VALUES (?, ?, 'memory', ?, ?, ?)",
            [(ids[i], keys[i], json.dumps(routes[i].to_dict()), now, now)
             for i in range(sessions)])
        conn.execute("COMMIT")
        addresses = [ReturnAddress(keys[i], ids[i], routes[i]) for i in range(sessions)]
        notices = [NewNotification(f"f{i}:completion:0", "completion", addresses[i % sessions],
                                   f"notice {i} for {i % sessions}", job_id=f"f{i}")
                   for i in range(total)]
        info = NoticeInfo("completion", None)
        claim = claim_statement(shared=False)
        begin = time.process_time()
        for start in range(0, total, BATCH):
            inserts = [Outbox.insert_op(n) for n in notices[start:start + BATCH]]
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany(inserts[0][0], [params for _, params in inserts])
            conn.execute("COMMIT")
            conn.execute("BEGIN IMMEDIATE")
            claimed = conn.execute(claim, claim_parameters(time.time(), BATCH, CLAIMER)
                                   ).fetchall()
            conn.execute("COMMIT")
            # the send records, then the outcomes: as the router writes them
            sent = [Outbox.sent_op(row[0], CLAIMER, "1") for row in claimed]
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany(TRANSCRIPT_LINE, [transcript_row(row[5], "notification",
                                                              row[8], notice=info)
                                               for row in claimed])
            conn.executemany(sent[0][0], [params for _, params in sent])
            conn.execute("COMMIT")
            done = [delivered_op(row[0], CLAIMER, "1", time.time()) for row in claimed]
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany(done[0][0], [params for _, params in done])
            conn.execute("COMMIT")
        cpu = time.process_time() - begin
        (delivered,) = conn.execute(
            "SELECT COUNT(*) FROM notifications WHERE state = 'delivered'").fetchone()
        conn.close()
    assert delivered == total, f"the floor delivered {delivered} of {total}"
    return total / cpu


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--notifications", type=int, default=10_000)
    parser.add_argument("--sessions", default="10,1000,10000")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    quiet()
    print(f"{'sessions':>8}  {'floor per CPU-s':>22}  {'router per CPU-s':>22}  "
          f"router/floor")
    for sessions in (int(x) for x in args.sessions.split(",")):
        floors, routers = [], []
        for _ in range(args.runs):  # interleaved, so both see the same machine
            floors.append(await asyncio.to_thread(floor, args.notifications, sessions))
            routers.append((await measure(args.notifications, sessions, settled=True)
                            )["per_cpu_second"])
        ratio = statistics.median(routers) / statistics.median(floors)
        print(f"{sessions:>8}  {spread(floors):>22}  {spread(routers):>22}  {ratio:>12.2f}")
    print(load_average())


if __name__ == "__main__":
    run_loop(main())
