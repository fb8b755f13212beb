"""Discord through the real discord.py against the local fake REST API and gateway.

Inbound MESSAGE_CREATE → the gateway's reply recorded by the fake, one
message at a time (a person waiting for each answer), paced at 20 messages/s
to stay under Discord's 50 requests/s per bot, which the adapter enforces:
median and p99.

    python -m bench.discord_roundtrip [--messages 300]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time

from bench.common import bench_config, percentiles, quiet, run_loop
from gateway.daemon.assembly import running_gateway
from tests.fakes.discord_server import FakeDiscord


async def roundtrip(messages: int) -> list[float]:
    async with FakeDiscord() as fake:
        fake.add_channel(500)
        with tempfile.TemporaryDirectory() as home:
            config = bench_config(home, platforms={"discord": {
                "enabled": True, "token": fake.token, "api_base": fake.api_base,
                "gateway_url": fake.gateway_url, "allowed_users": ["1"]}})
            async with running_gateway(config) as gw:
                await gw.runner.adapters["discord"].wait_connected(timeout=15)
                latencies = []
                for i in range(messages):
                    started = time.perf_counter()
                    await fake.user_message(channel_id=500, content=f"ping {i}")
                    await fake.wait_for_sent(i + 1)
                    latencies.append((time.perf_counter() - started) * 1000)
                    await asyncio.sleep(0.05)
                return latencies


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=300)
    args = parser.parse_args()
    quiet()
    p50, p99 = percentiles(await roundtrip(args.messages))
    print(f"round trip (MESSAGE_CREATE → reply at the fake), {args.messages} messages: "
          f"p50 {p50:.2f} ms, p99 {p99:.2f} ms")


if __name__ == "__main__":
    run_loop(main())
