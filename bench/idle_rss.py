"""The resident memory of an idle daemon: `homing run` on the embedded default (web
chat, command agent), three runs, each read a few seconds after it listens.

    python -m bench.idle_rss [--runs 3] [--settle 3] [--python PATH] [--loop asyncio]

``--python`` runs the daemon with another interpreter: a venv holding only
``pip install .`` measures what a user runs. The test extras add packages that
libraries import when they find them (structlog imports Twisted, which Synapse
brings: about 2 MB), so this checkout's own venv reads high. ``--loop`` sets
``HOMING_LOOP`` for the daemon; ``--otlp URL`` turns OpenTelemetry on (installed with
``homing[otel]``) exporting there.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
from pathlib import Path

from bench.common import load_average, rss_kb
from tests.real_daemon import HOMING, home_env, listening_url


async def one_run(settle: float, python: str | None = None, loop: str | None = None,
                  otlp: str | None = None) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        home.mkdir()
        (home / "config.yaml").write_text(
            "platforms: {web: {port: 0}}\n"
            + (f"telemetry: {{otlp_endpoint: '{otlp}'}}\n" if otlp else ""))
        env = home_env(home) | ({"HOMING_LOOP": loop} if loop else {})
        command = [python, *HOMING[1:]] if python else HOMING
        proc = await asyncio.create_subprocess_exec(
            *command, "run", env=env, stderr=asyncio.subprocess.PIPE)
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
    parser.add_argument("--python", help="the interpreter to run the daemon with")
    parser.add_argument("--loop", choices=("uvloop", "asyncio"), help="HOMING_LOOP")
    parser.add_argument("--otlp", metavar="URL", help="telemetry.otlp_endpoint")
    args = parser.parse_args()
    figures = [asyncio.run(one_run(args.settle, args.python, args.loop, args.otlp))
               for _ in range(args.runs)]
    print(f"idle RSS, web only, command agent: {statistics.median(figures):.1f} MB "
          f"median ({min(figures):.1f}–{max(figures):.1f}) over {len(figures)} runs"
          f" ({args.python or sys.executable}, loop {args.loop or 'default'}, "
          f"OpenTelemetry {'to ' + args.otlp if args.otlp else 'off'})")
    print(load_average())


if __name__ == "__main__":
    main()
