"""Streamed replies: time to the first delta, and what streaming costs a turn.

The whole gateway with the model agent and the web chat; a WebSocket client
(as the page) sends a message and times the first ``delta`` frame and the
final ``message`` frame. The fake OpenAI-compatible endpoint runs in a child
process and streams a 40-word answer:

- first delta: the model waits ``--model-ms`` before each piece (as a real
  one does), so the figure to compare is that wait: what the gateway adds on
  top of it is the time from the model's first piece to the page;
- per-turn overhead: the model answers at once, streamed and not, so the
  difference is what streaming adds (SSE parsing, delta frames to the tab).

Three runs of each; the spread is min–max of the medians.

    python -m bench.streaming [--turns 200] [--model-ms 20]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import bench_config, percentiles, quiet, run_loop  # noqa: E402
from gateway.daemon.assembly import running_gateway  # noqa: E402
from gateway.platforms.web.adapter import WebAdapter  # noqa: E402

ANSWER = " ".join(f"word{i}" for i in range(40))


def _serve(port_out: multiprocessing.Queue, delay: float) -> None:  # type: ignore[type-arg]
    from tests.fakes.openai_server import FakeOpenAI, Say

    async def run() -> None:
        async with FakeOpenAI(lambda req: Say(ANSWER), chunk_delay=delay) as fake:
            port_out.put(fake.base_url)
            await asyncio.Event().wait()

    asyncio.run(run())


def _endpoint(delay: float) -> tuple[multiprocessing.Process, str]:
    ctx = multiprocessing.get_context("spawn")
    port_out = ctx.Queue()
    server = ctx.Process(target=_serve, args=(port_out, delay), daemon=True)
    server.start()
    return server, port_out.get(timeout=30)


async def measure(base_url: str, turns: int, stream: bool) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as home:
        config = bench_config(home, platforms={"web": {"enabled": True, "port": 0}}, agent={
            "backend": "openai", "base_url": base_url, "model": "fake-model",
            "stream": stream, "context_budget_tokens": 10_000_000})
        async with running_gateway(config) as gw, aiohttp.ClientSession() as http:
            web = gw.runner.adapters["web"]
            assert isinstance(web, WebAdapter)
            ws = await http.ws_connect(f"http://127.0.0.1:{web.port}/ws")
            await ws.receive_json()  # ready
            firsts: list[float] = []
            totals: list[float] = []
            for n in range(turns + 3):  # the first three warm up
                started = time.perf_counter()
                await ws.send_json({"type": "message", "text": f"hello {n}"})
                first = None
                while True:
                    frame = await ws.receive_json(timeout=30)
                    if frame["type"] == "delta" and first is None:
                        first = time.perf_counter() - started
                    if frame["type"] == "message":
                        break
                if n >= 3:
                    totals.append(time.perf_counter() - started)
                    firsts.append(first if first is not None else totals[-1])
            await ws.close()
    first50, first99 = percentiles([x * 1000 for x in firsts])
    p50, p99 = percentiles([x * 1000 for x in totals])
    return {"first50": first50, "first99": first99, "p50": p50, "p99": p99}


def _spread(values: list[float]) -> str:
    return f"{statistics.median(values):7.2f}  ({min(values):.2f}–{max(values):.2f})"


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--model-ms", type=float, default=20.0)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    quiet()

    server, base_url = _endpoint(args.model_ms / 1000)
    try:
        runs = [await measure(base_url, max(20, args.turns // 5), True)
                for _ in range(args.runs)]
    finally:
        server.terminate()
        server.join()
    print(f"model waits {args.model_ms:g} ms before each of 40 pieces; median of "
          f"{args.runs} runs (spread of the runs' medians)")
    print(f"  time to first delta, p50 ms  {_spread([r['first50'] for r in runs])}")
    print(f"  time to first delta, p99 ms  {_spread([r['first99'] for r in runs])}")
    print(f"  whole reply, p50 ms          {_spread([r['p50'] for r in runs])}")

    server, base_url = _endpoint(0.0)
    try:
        streamed = [await measure(base_url, args.turns, True) for _ in range(args.runs)]
        whole = [await measure(base_url, args.turns, False) for _ in range(args.runs)]
    finally:
        server.terminate()
        server.join()
    print(f"model answers at once; message to final frame, {args.turns} turns per run")
    print(f"  streamed,  p50 ms            {_spread([r['p50'] for r in streamed])}")
    print(f"  streamed,  p99 ms            {_spread([r['p99'] for r in streamed])}")
    print(f"  whole,     p50 ms            {_spread([r['p50'] for r in whole])}")
    print(f"  whole,     p99 ms            {_spread([r['p99'] for r in whole])}")
    added = [s["p50"] - w["p50"] for s, w in zip(streamed, whole, strict=True)]
    print(f"  streaming adds, p50 ms       {_spread(added)}")
    print("load average: " + " ".join(f"{x:.2f}" for x in os.getloadavg()))


if __name__ == "__main__":
    run_loop(main())
