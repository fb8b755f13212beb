"""Memory per idle session: what each conversation the daemon knows costs it.

Opens 10,000 conversations (each with a message and its answer, through the
real pipeline and command agent), lets them go idle, and divides the growth of
the process's resident memory by their number. Three runs: the median, the
lowest and highest.

    python -m bench.session_memory [--sessions 10000] [--runs 3]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import tempfile

from bench.common import TimedAdapter, bench_config, load_average, quiet, rss_kb, run_loop, spread
from gateway.daemon.assembly import running_gateway, settle_memory
from gateway.words.events import MessageEvent
from gateway.words.route import Route


async def per_session_kb(sessions: int) -> float:
    with tempfile.TemporaryDirectory() as home:
        adapter = TimedAdapter()
        async with running_gateway(bench_config(home), [adapter]) as gw:
            settle_memory()
            warm = [Route("memory", "dm", f"w{n}", user_id=f"w{n}") for n in range(200)]
            await asyncio.gather(*(gw.runner.submit(MessageEvent("hi", r, message_id="1"))
                                   for r in warm))  # caches and pools at their working size
            gc.collect()
            before = rss_kb()
            routes = [Route("memory", "dm", str(n), user_id=str(n)) for n in range(sessions)]
            for start in range(0, sessions, 500):  # as conversations come: not all at once
                await asyncio.gather(*(gw.runner.submit(MessageEvent("hello", r, message_id="1"))
                                       for r in routes[start:start + 500]))
            await gw.store.db.flush()
            gc.collect()
            after = rss_kb()
            answered = len(adapter.sent_ns) - len(warm)
            if answered < sessions:
                raise RuntimeError(f"only {answered} of {sessions} conversations answered")
        gc.unfreeze()
        return (after - before) / sessions


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    quiet()
    figures = [await per_session_kb(args.sessions) for _ in range(args.runs)]
    print(f"per idle session ({args.sessions:,} sessions): {spread(figures, '.2f')} KB")
    print(load_average())


if __name__ == "__main__":
    run_loop(main())
