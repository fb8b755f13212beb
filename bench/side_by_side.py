"""One benchmark on an older revision and on this checkout, interleaved in one run.

The older revision is checked out into a temporary git worktree and given this
checkout's ``bench/`` (so both are measured by the same script), then the benchmark
runs there and here in turns, ``--rounds`` times each, with the same arguments; each
run's output is printed under the name of the code it measured. A revision from
before ``gateway/daemon/event_loop.py`` runs on the standard loop, as it shipped.

    python -m bench.side_by_side REV route_throughput [-- --sessions 10000 --runs 1]
    python -m bench.side_by_side 5d5b5fd notify_latency --rounds 3 -- --levels 1000 --runs 1
    python -m bench.side_by_side f4a2929 floor --against main -- --runs 1
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("revision", help="the older code: a commit, tag or branch")
    parser.add_argument("bench", help="a module of bench/, e.g. route_throughput")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--against", metavar="REV",
                        help="the newer code as a revision too (default: this checkout, "
                             "as it is on disk)")
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)
    args = parser.parse_args(argv[:cut])
    bench_args = argv[cut + 1:]  # after --: the benchmark's own arguments
    with tempfile.TemporaryDirectory() as tmp:
        trees = {f"old ({args.revision})": _worktree(Path(tmp) / "old", args.revision)}
        trees[f"new ({args.against or 'this checkout'})"] = (
            _worktree(Path(tmp) / "new", args.against) if args.against else HERE)
        try:
            for round_ in range(1, args.rounds + 1):
                for name, tree in trees.items():
                    print(f"--- round {round_}, {name}", flush=True)
                    # the tree's own code first: python -m puts the working directory there
                    subprocess.run([sys.executable, "-m", f"bench.{args.bench}", *bench_args],
                                   cwd=tree, check=True,
                                   env={**os.environ, "PYTHONPATH": str(tree)})
        finally:
            for tree in trees.values():
                if tree != HERE:
                    subprocess.run(["git", "-C", str(HERE), "worktree", "remove", "--force",
                                    str(tree)], check=False, capture_output=True)


def _worktree(where: Path, revision: str) -> Path:
    """``revision`` checked out at ``where``, with this checkout's ``bench/``."""
    subprocess.run(["git", "-C", str(HERE), "worktree", "add", "--detach", str(where),
                    revision], check=True, capture_output=True)
    shutil.rmtree(where / "bench")
    shutil.copytree(HERE / "bench", where / "bench",
                    ignore=shutil.ignore_patterns("__pycache__"))
    return where


if __name__ == "__main__":
    main()
