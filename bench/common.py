"""Shared bits for the benchmarks: a quiet gateway on a temp dir and percentiles."""

from __future__ import annotations

import asyncio
import inspect
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gateway.config.settings import Config, LoggingConfig, parse_config  # noqa: E402
from gateway.daemon.assembly import Gateway  # noqa: E402

try:
    from gateway.daemon.event_loop import loop_factory  # noqa: E402
except ImportError:  # a revision from before it (bench/side_by_side.py): the standard loop
    def loop_factory() -> tuple[str, Any]:  # type: ignore[misc]
        return "asyncio", None
from gateway.telemetry.logs import configure_logging  # noqa: E402
from gateway.words.events import MessageKind, NoticeInfo, SendResult  # noqa: E402
from gateway.words.return_address import ReturnAddress
from gateway.words.route import Route  # noqa: E402
from tests.memory_platform import MemoryAdapter  # noqa: E402


def run_loop(main: Coroutine[Any, Any, None]) -> None:
    """Run a bench on the loop ``homing run`` would use (uvloop where installed;
    ``HOMING_LOOP=asyncio`` for the standard loop), and say which."""
    name, factory = loop_factory()
    print(f"event loop: {name}")
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(main)


def quiet() -> None:
    if "final" in inspect.signature(configure_logging).parameters:  # as `homing run` does
        configure_logging(LoggingConfig(level="warning"), final=True)
    else:  # a revision from before it (bench/side_by_side.py)
        configure_logging(LoggingConfig(level="warning"))


def bench_config(home: str, **sections: dict[str, object]) -> Config:
    """A config on ``home`` with the web chat off unless ``platforms`` turns it on:
    ``platforms`` is merged into that default, not put in its place (a Telegram bench
    must not start the web chat on port 8765)."""
    platforms: dict[str, object] = {"web": {"enabled": False}}
    platforms.update(sections.pop("platforms", {}))
    return parse_config({"home": home, "platforms": platforms, **sections}, {})


class TimedAdapter(MemoryAdapter):
    """Records the wall-clock time of every send, in nanoseconds."""

    def __init__(self) -> None:
        super().__init__("memory")
        self.sent_ns: list[tuple[Route, str, int]] = []

    @property
    def connected(self) -> bool:
        return True

    async def send(self, route: Route, text: str, *, kind: MessageKind = "reply",
                   session_id: str | None = None, dedupe_key: str | None = None,
                   notice: NoticeInfo | None = None) -> SendResult:
        self.sent_ns.append((route, text, time.time_ns()))
        return SendResult.sent(str(len(self.sent_ns)))


async def forum_topic_addresses(gw: Gateway, count: int) -> list[ReturnAddress]:
    """Return addresses of ``count`` live sessions, one per topic of a forum group."""
    addresses = []
    for n in range(count):
        route = Route("memory", "group", "-1001", thread_id=str(n), user_id="1")
        key = gw.runner.session_key_for(route)
        session = await gw.store.get_or_create(key, route)
        addresses.append(ReturnAddress(key, session.id, route))
    return addresses


def percentiles(values_ms: list[float]) -> tuple[float, float]:
    ordered = sorted(values_ms)
    p99 = ordered[max(0, int(len(ordered) * 0.99) - 1)]
    return statistics.median(ordered), p99


def spread(values: list[float], fmt: str = ",.0f") -> str:
    """``median (lowest–highest)``: how the issue tables quote a figure of several runs."""
    return (f"{format(statistics.median(values), fmt)} "
            f"({format(min(values), fmt)}–{format(max(values), fmt)})")


def rss_kb(pid: int | str = "self") -> int:
    """Resident memory of a process (this one by default), in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def load_average() -> str:
    return "load average: " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def daemon_code() -> str:
    """Which gateway a daemon started here imports (``python -m`` from this directory),
    and its revision: a daemon is a child process, so the code measured is the one it
    finds, not necessarily this checkout's."""
    where = subprocess.run([sys.executable, "-c", "import gateway; print(gateway.__file__)"],
                           capture_output=True, text=True, check=True).stdout.strip()
    tree = Path(where).resolve().parent.parent
    rev = subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"],
                         capture_output=True, text=True).stdout.strip() or "no git"
    dirty = subprocess.run(["git", "-C", str(tree), "status", "--porcelain", "--", "gateway",
                            "agent", "tools"], capture_output=True, text=True).stdout.strip()
    state = "with uncommitted changes in gateway/agent/tools" if dirty else "clean"
    return f"daemon code: {tree}/gateway at {rev} ({state})"
