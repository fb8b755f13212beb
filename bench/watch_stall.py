"""How long another conversation waits while watched jobs do their worst.

Three watched jobs, one at a time: a pattern that takes a backtracking engine
hours (``(a+)+$`` on 40 a's and a b, 200 lines), a pattern RE2 runs slowly but
in linear time (``(.*a){150}b`` on 60 KB lines, 20 of them), and a job writing
20 MB that no line of matches. Meanwhile a second conversation sends ``/status``
again and again; the figure is its round trip (p50 and max), which the issue
wants under a second.

    python -m bench.watch_stall [--runs 3]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time

from bench.common import bench_config, percentiles, quiet, run_loop
from gateway.daemon.assembly import running_gateway
from gateway.words.route import Route
from tests.memory_platform import MemoryAdapter

CASES = {
    "(a+)+$ backtracking killer": ("(a+)+$", f"for i in $(seq 200); do echo {'a' * 40}b; done"),
    "(.*a){150}b on 60 KB lines": (
        "(.*a){150}b", "python3 -c \"print(('ab' * 30000 + '\\\\n') * 20, end='')\""),
    "20 MB of output, no match": ("NEVER-MATCHES", "yes abcdefgh | head -c 20000000"),
}
JOBS = Route("memory", "dm", "1", user_id="1")
OTHER = Route("memory", "dm", "2", user_id="2")


async def measure(pattern: str, command: str) -> list[float]:
    with tempfile.TemporaryDirectory() as home:
        adapter = MemoryAdapter("memory")
        config = bench_config(home, jobs={"watch": {"cooldown_seconds": 0}})
        async with running_gateway(config, [adapter]) as gw:
            await adapter.receive(f"/watch '{pattern}' {command}", JOBS)
            waits = []
            while True:
                started = time.perf_counter()
                await adapter.receive("/status", OTHER)
                waits.append((time.perf_counter() - started) * 1000)
                if not gw.jobs.running:
                    break
                await asyncio.sleep(0.05)
            await gw.router.settle()
    return waits


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    quiet()
    print(f"{'watched job':30}  {'run':>3}  {'replies':>7}  {'p50 ms':>7}  {'max ms':>7}")
    for name, (pattern, command) in CASES.items():
        worst = []
        for run in range(args.runs):
            waits = await measure(pattern, command)
            p50, _ = percentiles(waits)
            worst.append(max(waits))
            print(f"{name:30}  {run + 1:>3}  {len(waits):>7}  {p50:>7.1f}  {max(waits):>7.1f}")
        print(f"{name:30}  max over {args.runs} runs: {max(worst):.1f} ms "
              f"(spread {min(worst):.1f}–{max(worst):.1f})")
    print("load average: " + " ".join(f"{x:.2f}" for x in os.getloadavg()))


if __name__ == "__main__":
    run_loop(main())
