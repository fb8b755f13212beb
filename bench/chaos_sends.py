"""Sends repeated around a kill: one daemon on SQLite, ``kill -9`` every 2-6 s, restarted at
once, while a person writes in Telegram forum topics, Discord threads and web tabs
(tests/chaos_sends.py), with CPU hogs beside it.

Each message (a ping, a ``/bg`` job — some ending the same second in one conversation —
or a ``/watch`` job) carries a marker; at the end a last daemon runs until nothing is
left to do, and every answer, job notice and matching line is counted per platform from
what the person was shown: once, twice (a send whose record the kill took), misrouted
(another topic, thread or conversation) or lost. Then the log lines ``maybe_repeated``,
and each doubled one with what the store and the logs say of it.

The daemon runs the code ``python -m gateway.cli`` imports from the working directory
(the first lines say which, and its revision): to measure another revision, run this
from a worktree of it, with its own ``PYTHONPATH``:

    git worktree add /tmp/before HEAD && cp bench/chaos_sends.py /tmp/before/bench/ \\
        && cp tests/chaos_sends.py /tmp/before/tests/
    cd /tmp/before && PYTHONPATH=$PWD /work/main/.venv/bin/python -m bench.chaos_sends

    python -m bench.chaos_sends [--rounds 60] [--seed N] [--hogs 2] [--runs 1] [--keep DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench.common import daemon_code, load_average, run_loop
from tests.chaos_sends import (
    DISCORD_PER,
    DISCORD_POSTS,
    PLATFORMS,
    Chaos,
    Doubled,
    Tally,
    chaos_rounds,
)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=60, help="kills (default 60)")
    parser.add_argument("--seed", type=int, default=int(time.time()))
    parser.add_argument("--hogs", type=int, default=2, help="CPU hogs beside the daemon")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--group-per-minute", type=float, default=60.0,
                        help="platforms.telegram.group_messages_per_minute (default 60)")
    parser.add_argument("--no-slack", action="store_true",
                        help="Telegram, Discord and the web chat only")
    parser.add_argument("--keep", metavar="DIR", type=Path,
                        help="copy each run's home (store, logs) to DIR/run-N")
    args = parser.parse_args()
    os.environ.setdefault("NO_PROXY", "127.0.0.1,localhost")
    print(daemon_code())
    print(f"seed {args.seed}; {args.rounds} kills a run, every 2-6 s; {args.hogs} CPU hogs; "
          f"Telegram {args.group_per_minute:g} messages a minute into the forum group; "
          f"Discord {DISCORD_POSTS} posts in {DISCORD_PER:g} s a thread", flush=True)
    totals = {p: Tally() for p in PLATFORMS if p != "slack" or not args.no_slack}
    for run in range(1, args.runs + 1):
        hogs = [await asyncio.create_subprocess_exec(sys.executable, "-c", "while True: pass")
                for _ in range(args.hogs)]
        try:
            with tempfile.TemporaryDirectory() as tmp:
                chaos = await chaos_rounds(Path(tmp), rounds=args.rounds,
                                           seed=args.seed + run - 1,
                                           group_per_minute=args.group_per_minute,
                                           with_slack=not args.no_slack)
                if args.keep is not None:
                    kept = args.keep / f"run-{run}"
                    shutil.copytree(Path(tmp) / "home", kept, dirs_exist_ok=True,
                                    ignore=shutil.ignore_patterns("*.sock", "jobs"))
                    _keep(chaos, kept)
        finally:
            for hog in hogs:
                hog.send_signal(signal.SIGKILL)
                await hog.wait()
        _report(run, chaos, totals)
    if args.runs > 1:
        print(f"\nall {args.runs} runs")
        _table(totals)


def _keep(chaos: Chaos, kept: Path) -> None:
    """What the person said and was shown, and the kills, beside the kept home."""
    (kept / "chaos.json").write_text(json.dumps({
        "seed": chaos.seed, "kills": chaos.kills, "starts": chaos.starts,
        "items": [dataclasses.asdict(i) for i in chaos.items],
        "shown": [dataclasses.asdict(c) for c in chaos.shown]}, indent=1))


def _report(run: int, chaos: Chaos, totals: dict[str, Tally]) -> None:
    items = chaos.items
    down = sum(1 for i in items if i.while_down)
    kinds = {k: sum(1 for i in items if i.kind == k) for k in ("ping", "bg", "watch")}
    print(f"\nrun {run} (seed {chaos.seed}): {len(chaos.kills)} kills; {len(items)} messages "
          f"({kinds['ping']} pings, {kinds['bg']} jobs, {kinds['watch']} watch jobs; {down} "
          f"said while the daemon was down); {chaos.jobs} jobs started; {chaos.seconds:.0f} s"
          f"{'' if chaos.settled else '; NOT SETTLED (counted as it stood)'}")
    _table(chaos.tallies)
    for platform, tally in chaos.tallies.items():
        totals[platform].add(tally)
    print(f"maybe_repeated in the daemon logs: {len(chaos.maybe_repeated)}; parked notices: "
          f"{chaos.parked}; messages that started two jobs: {chaos.jobs_twice}; web twice "
          f"only in a tab (not the transcript): {chaos.tab_twice}; Discord posts answered by "
          f"their nonce (sent again, shown once): {chaos.nonce_hits}; Discord messages read "
          f"back into a DM session: {chaos.read_back_as_dm}; {load_average()}")
    lags = ", ".join(f"{platform} {statistics.median(v) * 1000:.0f} ms "
                     f"(p99 {sorted(v)[max(0, int(len(v) * 0.99) - 1)] * 1000:.0f}, "
                     f"max {max(v) * 1000:.0f})" for platform, v in chaos.record_lag.items() if v)
    print(f"from the platform having a notice to the daemon noting it delivered: {lags}")
    for doubled in chaos.doubled:
        print("  twice: " + _doubled(chaos, doubled))
    for noted in chaos.noted:
        print("  +note: " + _doubled(chaos, noted))
    for platform, unit, place, item, before, journal in chaos.lost:
        print(f"  lost: {platform} {unit} in {place.label}; said {chaos.when(item.said_at)}, "
              f"{before} messages of its {place.label.split()[1]} journaled before it; "
              f"journaled: {journal}: {item.text[:60]!r}")
    for platform, unit, place, copies in chaos.misrouted:
        print(f"  misrouted: {platform} {unit} from {place.label} shown in "
              f"{sorted({str(c.where) for c in copies})}")


def _table(tallies: dict[str, Tally]) -> None:
    """Counted: answers, job notices and watch lines. +note: answered, and then told
    that it may not have finished as well."""
    print(f"  {'platform':<9} {'counted':>7} {'once':>6} {'twice':>6} {'lost':>5} "
          f"{'misrouted':>9} {'+note':>6}")
    everything = Tally()
    for platform, t in [*tallies.items(), ("all", everything)]:
        print(f"  {platform:<9} {t.total:>7} {t.once:>6} {t.twice:>6} {t.lost:>5} "
              f"{t.misrouted:>9} {t.noted:>6}")
        if platform != "all":
            everything.add(t)


def _doubled(chaos: Chaos, d: Doubled) -> str:
    """One unit shown more than once: each copy (when, in which life, alone or merged
    with other notices, its key or nonce), what its life sent after the first copy
    before it was killed, what the next life found claimed, and its notification rows."""
    shown = "; ".join(
        f"{chaos.when(c.at)}, {'merged with ' + str(c.merged - 1) if c.merged else 'alone'}"
        + (f", key {c.key[:8]}" if c.key else "") for c in d.copies)
    rows = ", ".join(f"#{n['id']} {n['kind']} merged_into={n['merged_into']} "
                     f"attempts={n['attempts']}" for n in d.notices)
    entries = ", ".join(f"inbound #{e['id']} {e['state']}" for e in d.inbound
                        if d.unit.startswith("answer:"))
    events = sorted({str(r.get("event")) for r in d.logs})
    window = (f"; {d.sends_before_here} sends here in the 5 s before it, then "
              f"{d.sends_after} more sends before the kill ({d.sends_after_here} here)"
              if d.copies and chaos.life_at(d.copies[0].at) <= len(chaos.kills) else "")
    found = (f"; the next life found {d.reconciled[1]} claimed rows without a send record "
             f"(requeued), {d.reconciled[0]} with one" if d.reconciled else "")
    return (f"{d.platform} {d.unit} in {d.place.label}: {len(d.copies)} copies ({shown})"
            f"{window}{found}{'; ' + rows if rows else ''}{'; ' + entries if entries else ''}"
            f"{'; logged ' + ' '.join(events) if events else ''}")


if __name__ == "__main__":
    run_loop(main())
