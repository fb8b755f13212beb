"""How long the README's test command takes: ``python -m pytest -q`` from this
checkout, three runs, with ``--hogs N`` CPU-bound processes beside it (issue 29's
acceptance used two). Prints each run's wall time and result, the spread, and the
load average. The target: at most 5 minutes on 2 cores.

    python -m bench.suite_time [--runs 3] [--hogs 0]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

from bench.common import load_average, spread

ROOT = Path(__file__).parent.parent


def one_run() -> tuple[float, str]:
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
                          cwd=ROOT, capture_output=True, text=True)
    took = time.monotonic() - start
    lines = done.stdout.strip().splitlines()
    failed = [line for line in lines if line.startswith(("FAILED", "ERROR"))]
    result = lines[-1] if lines else f"exit {done.returncode}"
    return took, "; ".join([result, *failed])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--hogs", type=int, default=0, help="CPU-bound processes beside it")
    args = parser.parse_args()
    hogs = [subprocess.Popen([sys.executable, "-c", "while 1: pass"]) for _ in range(args.hogs)]
    try:
        print(f"{args.runs} runs of the README's test command, {args.hogs} hogs beside it; "
              f"{load_average()}")
        took = []
        for n in range(1, args.runs + 1):
            seconds, result = one_run()
            took.append(seconds)
            print(f"  run {n}: {seconds:.0f} s — {result}; {load_average()}", flush=True)
        print(f"wall time per run: {spread(took)} s (target: at most 300 s on 2 cores)")
    finally:
        for hog in hogs:
            hog.terminate()
            hog.wait()
    print(f"after: {load_average()}")


if __name__ == "__main__":
    main()
