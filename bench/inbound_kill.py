"""Web messages sent a few milliseconds before ``kill -9``: is any lost, or handled twice?

Each round starts ``homing run``, sends (with an id) what the page would send —
every message not yet acknowledged, then a new one — and kills the daemon a
random 0–4 ms later (``--max-delay-ms``); a last daemon gets the rest. Prints, per run: rounds,
messages, how many were acknowledged before the kill, handled, lost and
doubled (in the transcript), and shown twice (answers the client got twice that
a page cannot tell apart by their key); then the load average.

    python -m bench.inbound_kill [--rounds 200] [--runs 3] [--max-delay-ms 4]
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

from bench.common import run_loop
from tests.inbound_kill import kill_rounds
from tests.real_daemon import web_home


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--max-delay-ms", type=float, default=4.0,
                        help="the kill comes a random 0..this many ms after the send")
    args = parser.parse_args()
    os.environ.setdefault("NO_PROXY", "127.0.0.1,localhost")
    print(f"{'run':>3}  {'rounds':>6}  {'messages':>8}  {'acked':>5}  {'handled':>7}  "
          f"{'lost':>4}  {'doubled':>7}  {'shown twice':>11}")
    for run in range(args.runs):
        with tempfile.TemporaryDirectory() as tmp:
            t = await kill_rounds(web_home(Path(tmp) / "home"), rounds=args.rounds, seed=run,
                                      max_delay=args.max_delay_ms / 1000)
        print(f"{run + 1:>3}  {t.rounds:>6}  {t.sent:>8}  {t.acked_before_kill:>5}  "
              f"{t.handled:>7}  {t.lost:>4}  {t.doubled:>7}  {t.shown_twice:>11}")
    print("load average: " + " ".join(f"{x:.2f}" for x in os.getloadavg()))


if __name__ == "__main__":
    run_loop(main())
