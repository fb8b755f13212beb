"""A steady mixed load for a while: does the daemon's memory or descriptor count grow?

Messages from many conversations (each answered), background jobs that end and
report back, and `/new` now and then, at a fixed rate through the real
pipeline with a memory platform. Each minute it prints the process's RSS and
open descriptors; at the end, the growth from minute 2 (after warm-up) to the
end, and the load average.

    python -m bench.soak [--minutes 10] [--conversations 200] [--rate 50]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import tempfile
import time

from bench.common import TimedAdapter, bench_config, load_average, quiet, rss_kb
from gateway.daemon.assembly import running_gateway
from gateway.words.events import MessageEvent
from gateway.words.route import Route


def rss_mb() -> float:
    return rss_kb() / 1024


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


async def soak(minutes: float, conversations: int, rate: float) -> list[tuple[float, float, int]]:
    samples: list[tuple[float, float, int]] = []
    with tempfile.TemporaryDirectory() as home:
        adapter = TimedAdapter()
        async with running_gateway(bench_config(home), [adapter]) as gw:
            routes = [Route("memory", "dm", str(n), user_id=str(n)) for n in range(conversations)]
            start = time.monotonic()
            next_sample = start + 60
            sent = 0
            pending: set[asyncio.Future[object]] = set()
            while (now := time.monotonic()) - start < minutes * 60:
                route = random.choice(routes)
                roll = random.random()
                text = ("/bg sleep 0.2; echo soak" if roll < 0.2
                        else "/new" if roll < 0.22 else f"hello {sent}")
                handled = gw.runner.submit(MessageEvent(text=text, route=route,
                                                        message_id=str(sent)))
                pending.add(handled)
                handled.add_done_callback(pending.discard)
                sent += 1
                if now >= next_sample:
                    samples.append(((now - start) / 60, rss_mb(), open_fds()))
                    print(f"minute {samples[-1][0]:4.1f}: RSS {samples[-1][1]:7.1f} MB, "
                          f"{samples[-1][2]} open descriptors, {sent} messages, "
                          f"{len(adapter.sent_ns)} sends", flush=True)
                    next_sample += 60
                await asyncio.sleep(1 / rate)
            await asyncio.gather(*pending, return_exceptions=True)
            samples.append(((time.monotonic() - start) / 60, rss_mb(), open_fds()))
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--conversations", type=int, default=200)
    parser.add_argument("--rate", type=float, default=50.0, help="messages per second")
    args = parser.parse_args()
    quiet()
    samples = asyncio.run(soak(args.minutes, args.conversations, args.rate))
    warm = next((s for s in samples if s[0] >= 2.0), samples[0])
    last = samples[-1]
    print(f"growth from minute {warm[0]:.1f} to {last[0]:.1f}: "
          f"RSS {last[1] - warm[1]:+.1f} MB ({warm[1]:.1f} → {last[1]:.1f}), "
          f"descriptors {last[2] - warm[2]:+d} ({warm[2]} → {last[2]})")
    print(load_average())


if __name__ == "__main__":
    main()
