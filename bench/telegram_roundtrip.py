"""Telegram through the real python-telegram-bot against the local fake Bot API.

1. Round trip: an inbound update → the gateway's reply recorded by the fake,
   one message at a time (a person waiting for each answer): median and p99.
2. Sustained notices: 300 job notices for 30 direct-message chats, sent under
   the default flood limits (30 messages/s overall): notices/s achieved.

    python -m bench.telegram_roundtrip [--messages 300]
"""

from __future__ import annotations

import argparse
import tempfile
import time

from bench.common import bench_config, percentiles, quiet, run_loop
from gateway.daemon.assembly import running_gateway
from gateway.delivery.notifications import NewNotification
from gateway.words.return_address import ReturnAddress
from gateway.words.route import Route
from tests.fakes.telegram_server import FakeTelegram


def telegram_settings(fake: FakeTelegram, **limits: float) -> dict:
    return {"telegram": {"enabled": True, "token": fake.token, "base_url": fake.base_url,
                         "base_file_url": fake.base_file_url,
                         "allowed_users": [str(u) for u in range(1, 100)], **limits}}


async def roundtrip(messages: int) -> list[float]:
    async with FakeTelegram() as fake:
        with tempfile.TemporaryDirectory() as home:
            config = bench_config(home, platforms=telegram_settings(
                fake, messages_per_second=10_000, group_messages_per_minute=10_000))
            async with running_gateway(config) as gw:
                await gw.runner.adapters["telegram"].wait_connected()
                latencies = []
                for i in range(messages):
                    started = time.perf_counter()
                    fake.user_message(chat_id=1 + i % 10, user_id=1 + i % 10, text=f"ping {i}")
                    await fake.wait_for_sent(i + 1)
                    latencies.append((time.perf_counter() - started) * 1000)
                return latencies


async def sustained(notices: int, chats: int) -> float:
    async with FakeTelegram() as fake:
        with tempfile.TemporaryDirectory() as home:
            config = bench_config(home, platforms=telegram_settings(fake))  # default limits
            async with running_gateway(config) as gw:
                await gw.runner.adapters["telegram"].wait_connected()
                addresses = []
                for c in range(1, chats + 1):
                    route = Route("telegram", "dm", str(c), user_id=str(c))
                    key = gw.runner.session_key_for(route)
                    session = await gw.store.get_or_create(key, route)
                    addresses.append(ReturnAddress(key, session.id, route))
                begin = time.perf_counter()
                await gw.outbox.produce([
                    NewNotification(f"t{i}:completion:0", "completion", addresses[i % chats],
                                    f"notice {i}") for i in range(notices)])
                await fake.wait_for_sent(notices, timeout=notices)
                return notices / (time.perf_counter() - begin)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=300)
    args = parser.parse_args()
    quiet()
    p50, p99 = percentiles(await roundtrip(args.messages))
    print(f"round trip (update → reply at the fake), {args.messages} messages: "
          f"p50 {p50:.2f} ms, p99 {p99:.2f} ms")
    rate = await sustained(300, 30)
    print(f"sustained notices under the default flood limits (30/s overall): {rate:.1f}/s")


if __name__ == "__main__":
    run_loop(main())
