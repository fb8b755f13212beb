"""The systemd notify protocol against a real datagram socket, as systemd would hold it."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import threading
import time
from pathlib import Path

from gateway.systemd.notify import Notifier
from tests.helpers import eventually
from tests.test_cli import HOMING, web_home


class NotifySocket:
    """What systemd does: a datagram socket that collects what the service says."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))
        self.sock.settimeout(0.1)
        self.received: list[tuple[float, str]] = []
        self._stop = False
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        while not self._stop:
            try:
                data = self.sock.recv(4096)
            except TimeoutError:
                continue
            except OSError:
                return
            self.received.append((time.monotonic(), data.decode()))

    def lines(self) -> list[str]:
        return [line for _, text in self.received for line in text.splitlines()]

    def close(self) -> None:
        self._stop = True
        self._thread.join()
        self.sock.close()


async def test_ready_watchdog_and_stopping_from_the_real_daemon(tmp_path: Path) -> None:
    home = tmp_path / "home"
    notify = NotifySocket(tmp_path / "notify.sock")
    env = {**web_home(home), "NOTIFY_SOCKET": str(notify.path), "WATCHDOG_USEC": "400000"}
    proc = await asyncio.create_subprocess_exec(*HOMING, "run", env=env,
                                                stderr=asyncio.subprocess.PIPE)
    try:
        await eventually(lambda: "READY=1" in notify.lines(), 20, "READY=1")
        log = b""
        while b"web_chat_listening" not in log:  # the web chat listened before READY
            log += await asyncio.wait_for(proc.stderr.readline(), 10)
        await eventually(lambda: notify.lines().count("WATCHDOG=1") >= 5, 20,
                         "five watchdog pings")
        pings = [t for t, text in notify.received if text == "WATCHDOG=1"]
        gaps = sorted(b - a for a, b in zip(pings, pings[1:], strict=False))
        assert 0.1 <= gaps[len(gaps) // 2] <= 0.35  # at half of the 0.4 s systemd asked for
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 20) == 0
        lines = notify.lines()
        assert lines.index("READY=1") < lines.index("STOPPING=1")
        assert any(line.startswith("STATUS=starting") for line in lines)
        assert any(line.startswith("STATUS=stopping") for line in lines)
    finally:
        if proc.returncode is None:
            proc.kill()
        notify.close()


async def test_the_watchdog_stops_pinging_while_the_loop_is_blocked(tmp_path: Path) -> None:
    notify = NotifySocket(tmp_path / "notify.sock")
    notifier = Notifier({"NOTIFY_SOCKET": str(notify.path), "WATCHDOG_USEC": "200000",
                         "WATCHDOG_PID": str(os.getpid())})
    try:
        notifier.start_watchdog()
        await eventually(lambda: notify.lines().count("WATCHDOG=1") >= 2, 20,
                         "two watchdog pings")
        blocked_from = time.monotonic()
        time.sleep(1.0)  # noqa: ASYNC251 - blocking the loop on purpose
        blocked_to = time.monotonic()
        await eventually(lambda: any(t > blocked_to for t, _ in notify.received), 20,
                         "a ping after the block")
        during = [t for t, text in notify.received if blocked_from + 0.05 < t < blocked_to]
        assert during == []  # a hung loop sends no sign of life
    finally:
        await notifier.close()
        notify.close()


async def test_abstract_socket_addresses_work(tmp_path: Path) -> None:
    name = f"homing-test-{os.getpid()}"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    server.bind(b"\0" + name.encode())
    server.settimeout(5)
    notifier = Notifier({"NOTIFY_SOCKET": f"@{name}"})
    try:
        notifier.ready("serving web")
        assert server.recv(1024).decode().splitlines() == ["READY=1", "STATUS=serving web"]
    finally:
        await notifier.close()
        server.close()


async def test_without_a_notify_socket_nothing_happens() -> None:
    notifier = Notifier({})
    assert not notifier.enabled
    notifier.ready("x")
    notifier.start_watchdog()
    await notifier.close()
