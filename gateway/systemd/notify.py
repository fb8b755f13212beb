"""The systemd notify protocol, spoken directly to ``$NOTIFY_SOCKET``.

``READY=1`` once the gateway is up, ``STATUS=`` lines while it starts and
stops, ``STOPPING=1`` on shutdown, and ``WATCHDOG=1`` at half the interval
systemd asks for in ``$WATCHDOG_USEC``. The pings come from a task on the
event loop itself, so a blocked loop stops them and systemd restarts a hung
daemon. Without ``$NOTIFY_SOCKET`` every call does nothing.
"""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Mapping

import structlog

log = structlog.get_logger(__name__)


class Notifier:
    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        self.address = _socket_address(env.get("NOTIFY_SOCKET"))
        self.watchdog_interval = _watchdog_interval(env)
        self._sock: socket.socket | None = None
        self._watchdog: asyncio.Task[None] | None = None
        if self.address is not None:
            self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            self._sock.setblocking(False)

    @property
    def enabled(self) -> bool:
        return self._sock is not None

    def send(self, *lines: str) -> None:
        if self._sock is None or self.address is None:
            return
        try:
            self._sock.sendto("\n".join(lines).encode(), self.address)
        except OSError as exc:  # systemd gone or the socket full: never fatal
            log.warning("sd_notify_failed", error=str(exc))

    def ready(self, status: str) -> None:
        self.send("READY=1", f"STATUS={status}")

    def status(self, status: str) -> None:
        self.send(f"STATUS={status}")

    def stopping(self, status: str = "stopping") -> None:
        self.send("STOPPING=1", f"STATUS={status}")

    def start_watchdog(self) -> None:
        if self.enabled and self.watchdog_interval and self._watchdog is None:
            self._watchdog = asyncio.get_running_loop().create_task(self._ping(),
                                                                    name="sd-watchdog")

    async def _ping(self) -> None:
        assert self.watchdog_interval is not None
        while True:
            self.send("WATCHDOG=1")
            await asyncio.sleep(self.watchdog_interval / 2)

    async def close(self) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
            await asyncio.gather(self._watchdog, return_exceptions=True)
            self._watchdog = None
        if self._sock is not None:
            self._sock.close()
            self._sock = None


def _socket_address(value: str | None) -> str | bytes | None:
    if not value:
        return None
    if value.startswith("@"):  # abstract namespace: a leading NUL byte
        return b"\0" + value[1:].encode()
    return value


def _watchdog_interval(env: Mapping[str, str]) -> float | None:
    usec = env.get("WATCHDOG_USEC")
    pid = env.get("WATCHDOG_PID")
    if not usec or not usec.isdigit() or int(usec) == 0:
        return None
    if pid and pid.isdigit() and int(pid) != os.getpid():
        return None  # meant for another process
    return int(usec) / 1_000_000
