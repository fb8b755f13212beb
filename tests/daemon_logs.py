"""On a failed test, the end of every daemon log under its temporary directory.

A real daemon in a child process (tests/real_daemon.py) logs to its home's
``logs/homing.log``; CI keeps nothing but pytest's output, so a failure that
depends on what the daemon did (fenced, crashed, never polled) is explained
only if its log is printed beside the assertion."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

LINES = 40
_SKIP = {"timestamp", "level", "event", "logger"}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]
                              ) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    tmp = getattr(item, "funcargs", {}).get("tmp_path")
    if report.when != "call" or not report.failed or not isinstance(tmp, Path):
        return
    for log in sorted(tmp.rglob("homing.log")):
        report.sections.append((f"daemon log {log.relative_to(tmp)} (last {LINES} lines)",
                                tail(log)))


def tail(log: Path) -> str:
    """The last lines, one event per line: time, level, event, the rest."""
    try:
        lines = log.read_text(errors="replace").splitlines()[-LINES:]
    except OSError as exc:
        return f"(unreadable: {exc})"
    return "\n".join(_shown(line) for line in lines)


def _shown(line: str) -> str:
    try:
        record = json.loads(line)
    except ValueError:
        return line
    if not isinstance(record, dict):
        return line
    rest = " ".join(f"{k}={v}" for k, v in record.items() if k not in _SKIP)
    return (f"{str(record.get('timestamp', ''))[11:23]} {record.get('level', '')} "
            f"{record.get('event', '')} {rest}")[:400]
