"""Gateway overhead per model turn, with a zero-latency fake model.

The whole gateway (store, runner, model agent with the real ``openai``
client) behind the in-memory adapter; the fake OpenAI-compatible endpoint
runs in a child process and answers at once, so what is measured is what the
gateway adds to a turn: intake, history load and save, request building,
the HTTP round trip on loopback, response parsing, tool dispatch, the send.

Shapes of turn: a plain reply; a reply after one tool call (``process
list``, a store query); and a plain reply in a session with a long history.

    python -m bench.agent_overhead [--turns 300] [--sessions 1,10]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent.model import ModelAgent  # noqa: E402
from agent.model_client import ModelClient  # noqa: E402
from bench.common import TimedAdapter, bench_config, percentiles, quiet, run_loop  # noqa: E402
from gateway.daemon.assembly import running_gateway  # noqa: E402
from gateway.words.route import Route  # noqa: E402


def _serve(port_out: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    from tests.fakes.openai_server import CallTools, ChatRequest, FakeOpenAI, Response, Say

    def brain(req: ChatRequest) -> Response:
        if req.last["role"] == "tool":
            return Say("listed")
        if req.last["content"].startswith("tool"):
            return CallTools([("process", {"action": "list"})])
        return Say("ok")

    async def run() -> None:
        async with FakeOpenAI(brain) as fake:
            port_out.put(fake.base_url)
            await asyncio.Event().wait()

    asyncio.run(run())


class _Timed(ModelClient):
    """Counts the time spent waiting for the endpoint (HTTP round trip included)."""

    spent = 0.0

    async def complete(self, messages, tools=None, **kw):  # type: ignore[no-untyped-def]
        started = time.perf_counter()
        try:
            return await super().complete(messages, tools, **kw)
        finally:
            _Timed.spent += time.perf_counter() - started


async def measure(base_url: str, shape: str, sessions: int, turns: int,
                  history: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as home:
        config = bench_config(home, agent={
            "backend": "openai", "base_url": base_url, "model": "fake-model",
            "context_budget_tokens": 10_000_000})
        adapter = TimedAdapter()
        async with running_gateway(config, extra_adapters=[adapter]) as gw:
            agent = gw.runner.agent
            assert isinstance(agent, ModelAgent)
            timed = _Timed(config.agent)
            agent.compressor.client = agent.loop.client = timed
            latencies: list[float] = []
            text = "tool please" if shape == "tool call" else "hello"

            async def converse(n: int, count: int, record: bool) -> None:
                route = Route("memory", "group", "-100777", thread_id=str(n), user_id="1")
                for _ in range(count):
                    started = time.perf_counter()
                    await adapter.receive(text, route)
                    if record:
                        latencies.append(time.perf_counter() - started)

            await asyncio.gather(*(converse(n, history + 3, False) for n in range(sessions)))
            _Timed.spent = 0.0
            begin = time.perf_counter()
            await asyncio.gather(*(converse(n, turns // sessions, True)
                                   for n in range(sessions)))
            elapsed = time.perf_counter() - begin
            spent, _Timed.spent = _Timed.spent, 0.0
            await timed.close()
    p50, p99 = percentiles([x * 1000 for x in latencies])
    return {"turns": len(latencies), "per_second": len(latencies) / elapsed,
            "p50": p50, "p99": p99, "http_share": spent / sum(latencies)}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, default=300)
    parser.add_argument("--sessions", default="1,10")
    args = parser.parse_args()
    quiet()
    ctx = multiprocessing.get_context("spawn")
    port_out = ctx.Queue()
    server = ctx.Process(target=_serve, args=(port_out,), daemon=True)
    server.start()
    try:
        base_url = port_out.get(timeout=30)
        print(f"{'turn':<22}{'sessions':>8}  {'turns':>6}  {'turns/s':>8}  {'p50 ms':>7}  "
              f"{'p99 ms':>7}  {'in model call':>13}")
        for shape, history in (("plain reply", 0), ("tool call", 0),
                               ("reply, 200-msg history", 100)):
            for sessions in (int(s) for s in args.sessions.split(",")):
                r = await measure(base_url, shape, sessions, args.turns, history)
                print(f"{shape:<22}{sessions:>8}  {r['turns']:>6}  {r['per_second']:>8.0f}  "
                      f"{r['p50']:>7.2f}  {r['p99']:>7.2f}  {r['http_share']:>12.0%}")
    finally:
        server.terminate()
        server.join()


if __name__ == "__main__":
    run_loop(main())
