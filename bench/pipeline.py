"""Throughput and latency of the message pipeline.

The real runner, store (SQLite on a temp dir) and command agent behind the
in-memory adapter. Each of N sessions sends its messages one after another
(a closed loop, like a person waiting for the reply); sessions run at once.

    python -m bench.pipeline [--messages-per-session 10]
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent.command import CommandAgent  # noqa: E402
from bench.common import run_loop  # noqa: E402
from gateway.config.settings import LoggingConfig, parse_config  # noqa: E402
from gateway.messages.runner import GatewayRunner  # noqa: E402
from gateway.sessions.store import SessionStore  # noqa: E402
from gateway.telemetry.logs import configure_logging  # noqa: E402
from gateway.words.route import Route  # noqa: E402
from tests.memory_platform import MemoryAdapter  # noqa: E402


async def measure(sessions: int, per_session: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as home:
        config = parse_config({"home": home}, {})
        async with SessionStore(Path(home) / "state.db") as store:
            runner = GatewayRunner(config, store, CommandAgent())
            adapter = MemoryAdapter("memory")
            runner.add_adapter(adapter)
            await adapter.connect(runner)
            latencies: list[float] = []

            async def converse(n: int) -> None:
                route = Route("memory", "group", "-100777", thread_id=str(n), user_id="1")
                for i in range(per_session):
                    started = time.perf_counter()
                    await adapter.receive(f"message {i} from {n}", route)
                    latencies.append(time.perf_counter() - started)

            await converse(-1)  # warm up imports and the connection
            latencies.clear()
            adapter.sent.clear()
            begin = time.perf_counter()
            await asyncio.gather(*(converse(n) for n in range(sessions)))
            elapsed = time.perf_counter() - begin
            await store.flush()
            assert len(adapter.sent) == sessions * per_session
    latencies.sort()
    return {
        "messages": len(latencies),
        "per_second": len(latencies) / elapsed,
        "p50_ms": statistics.median(latencies) * 1000,
        "p99_ms": latencies[int(len(latencies) * 0.99) - 1] * 1000,
    }


async def main() -> None:
    configure_logging(LoggingConfig(level="warning"))
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages-per-session", type=int, default=10)
    parser.add_argument("--levels", default="1,100,1000")
    args = parser.parse_args()
    print(f"{'sessions':>8}  {'messages':>8}  {'msg/s':>8}  {'p50 ms':>7}  {'p99 ms':>7}")
    for level in (int(x) for x in args.levels.split(",")):
        per = max(args.messages_per_session, 2000 // level)
        r = await measure(level, per)
        print(f"{level:>8}  {r['messages']:>8}  {r['per_second']:>8.0f}  "
              f"{r['p50_ms']:>7.2f}  {r['p99_ms']:>7.2f}")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS: {peak:.0f} MiB")


if __name__ == "__main__":
    run_loop(main())
