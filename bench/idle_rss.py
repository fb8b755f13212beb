"""The resident memory of an idle daemon: `homing run` on the embedded default (web
chat, command agent), three runs, each read a few seconds after it listens.

    python -m bench.idle_rss [--runs 3] [--settle 3]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
from pathlib import Path

from bench.common import load_average, rss_kb
from tests.real_daemon import HOMING, home_env, listening_url


async def one_run(settle: float) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        home.mkdir()
        (home / "config.yaml").write_text("platforms: {web: {port: 0}}\n")
        proc = await asyncio.create_subprocess_exec(
            *HOMING, "run", env=home_env(home), stderr=asyncio.subprocess.PIPE)
        try:
            assert proc.stderr is not None
            await listening_url(proc.stderr)
            drain = asyncio.ensure_future(_drain(proc.stderr))
            await asyncio.sleep(settle)  # the idle daemon, after start-up
            resident = rss_kb(proc.pid)
        finally:
            proc.terminate()
            await proc.wait()
        await drain
        return resident / 1024


async def _drain(stream: asyncio.StreamReader) -> None:
    while await stream.readline():
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--settle", type=float, default=3.0)
    args = parser.parse_args()
    figures = [asyncio.run(one_run(args.settle)) for _ in range(args.runs)]
    print(f"idle RSS, web only, command agent: {statistics.median(figures):.1f} MB "
          f"median ({min(figures):.1f}–{max(figures):.1f}) over {len(figures)} runs")
    print(load_average())


if __name__ == "__main__":
    main()
