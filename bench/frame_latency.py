"""A job's exit → the notice's frame on the web client, from outside: the real daemon
(``homing run``), a WebSocket client per conversation, optionally with CPU-bound
processes beside them.

Each of ``--jobs`` conversations (a web tab each) starts one ``/bg`` job; every job
sleeps until one shared moment, prints the wall-clock time in nanoseconds as its last
act and exits. The figure is, per job, the time from that print to the arrival of its
completion frame at its tab: the shell's exit, the daemon noticing it, the outbox
commit, the router, the send, the WebSocket and the client's own read. ``--hogs N``
runs N ``while True: pass`` processes for the whole measure. A frame in the wrong tab
counts as misrouted.

Each figure is the median of ``--runs`` runs with the lowest and highest.

    python -m bench.frame_latency [--jobs 100] [--hogs 0,2] [--runs 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import signal
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

from bench.common import load_average, percentiles, run_loop, spread
from tests.real_daemon import start_daemon, web_home


async def measure(jobs: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        env = web_home(Path(tmp) / "home")
        daemon, base = await start_daemon(env)
        try:
            async with aiohttp.ClientSession() as http:
                tabs = [await http.ws_connect(f"{base}ws") for _ in range(jobs)]
                for ws in tabs:
                    assert (await ws.receive_json(timeout=30))["type"] == "ready"
                end_ns = time.time_ns() + int((2.0 + jobs * 0.02) * 1e9)
                for n, ws in enumerate(tabs):
                    command = (f"d=$(( ({end_ns} - $(date +%s%N)) / 1000000 )); "
                               f"[ $d -gt 0 ] && sleep $((d / 1000)).$(printf %03d "
                               f"$((d % 1000))); echo tab-{n}; date +%s%N")
                    await ws.send_str(json.dumps({"type": "message", "text": f"/bg {command}"}))
                    while (await ws.receive_json(timeout=30)).get("kind") != "reply":
                        pass
                results = await asyncio.gather(*(_notice(ws) for ws in tabs))
                for ws in tabs:
                    await ws.close()
        finally:
            daemon.send_signal(signal.SIGTERM)
            await daemon.wait()
    latencies = [(arrived - printed) / 1e6 for _, printed, arrived in results]
    misrouted = sum(1 for n, (tab, _, _) in enumerate(results) if tab != f"tab-{n}")
    p50, p99 = percentiles(latencies)
    return {"p50": p50, "p99": p99, "max": max(latencies), "misrouted": misrouted}


async def _notice(ws: aiohttp.ClientWebSocketResponse) -> tuple[str, int, int]:
    """The tab's completion frame: which tab's job it names, when the job printed, when
    the frame was read."""
    while True:
        frame = await ws.receive_json(timeout=120)
        if frame.get("kind") == "notification":
            arrived = time.time_ns()
            words = frame["text"].split()
            printed = int([w for w in words if w.isdigit() and len(w) >= 18][-1])
            found = re.search(r"\btab-\d+\b", frame["text"])
            return found.group(0) if found else "", printed, arrived


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=100)
    parser.add_argument("--hogs", default="0,2", help="CPU-bound processes beside, e.g. 0,2")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    print(f"{'jobs':>5}  {'hogs':>4}  {'p50 ms':>22}  {'p99 ms':>22}  {'max ms':>22}  misrouted")
    for hogs in (int(x) for x in args.hogs.split(",")):
        burners = [await asyncio.create_subprocess_exec(
            sys.executable, "-c", "while True: pass") for _ in range(hogs)]
        try:
            runs = [await measure(args.jobs) for _ in range(args.runs)]
            load = load_average()
        finally:
            for burner in burners:
                burner.terminate()
                await burner.wait()
        p50, p99, top = ([r[key] for r in runs] for key in ("p50", "p99", "max"))
        print(f"{args.jobs:>5}  {hogs:>4}  {spread(p50, ',.1f'):>22}  {spread(p99, ',.1f'):>22}  "
              f"{spread(top, ',.1f'):>22}  {sum(int(r['misrouted']) for r in runs)}")
        print(f"             {load}")


if __name__ == "__main__":
    run_loop(main())
