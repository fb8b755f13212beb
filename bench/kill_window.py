"""``kill -9`` of the real daemon within 0–40 ms of ``/bg``, repeated: what is lost?

Each round starts ``homing run`` on one home, sends a few ``/bg`` jobs over the
web chat and kills the daemon a random 0–40 ms later; a last daemon reports
everything. Prints jobs, kills, and how each job was reported: once with its
real exit code and output, "did not start" (killed before its process
existed), lost, doubled, missing or wrong. Three runs, then the load average.

    python -m bench.kill_window [--rounds 40] [--jobs-per-round 5] [--runs 3]
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

from bench.common import run_loop
from tests.kill_window import kill_window_rounds
from tests.real_daemon import kill_leftover_jobs, web_home


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--jobs-per-round", type=int, default=5)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    os.environ.setdefault("NO_PROXY", "127.0.0.1,localhost")
    print(f"{'run':>3}  {'jobs':>5}  {'kills':>5}  {'reported':>8}  {'not started':>11}  "
          f"{'lost':>4}  {'doubled':>7}  {'missing':>7}  {'wrong':>5}")
    for run in range(args.runs):
        with tempfile.TemporaryDirectory() as tmp:
            env = web_home(Path(tmp) / "home")
            try:
                t = await kill_window_rounds(env, rounds=args.rounds,
                                             jobs_per_round=args.jobs_per_round, seed=run)
            finally:
                await kill_leftover_jobs(env)
        print(f"{run + 1:>3}  {t.jobs:>5}  {t.kills:>5}  {t.reported:>8}  {t.not_started:>11}  "
              f"{t.lost:>4}  {t.duplicates:>7}  {t.missing:>7}  {t.wrong:>5}")
    print("load average: " + " ".join(f"{x:.2f}" for x in os.getloadavg()))


if __name__ == "__main__":
    run_loop(main())
