"""A command run on a pseudo-terminal, as a person at a keyboard runs it: the pty is its
controlling terminal (so ``getpass`` hides what is typed, as on a real one), and the
test waits for prompts and types answers::

    async with Terminal(*HOMING, "setup", env=env) as term:
        await term.expect("Platforms to enable")
        term.type("web,telegram")
        assert await term.exit_code() == 0

Reads happen on the event loop (``add_reader``), so fakes serving the command keep
running in the same loop.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import pty
import termios
from typing import Self


class Terminal:
    def __init__(self, *argv: str, env: dict[str, str]) -> None:
        self.argv = argv
        self.env = env
        #: everything the command wrote, and the terminal echoed of what was typed
        self.transcript = ""
        self._seen = 0  # how far expect() has read
        self._master = -1
        self._proc: asyncio.subprocess.Process | None = None
        self._changed = asyncio.Event()
        self._closed = False

    async def __aenter__(self) -> Self:
        self._master, slave = pty.openpty()
        try:
            self._proc = await asyncio.create_subprocess_exec(
                *self.argv, stdin=slave, stdout=slave, stderr=slave, env=self.env,
                start_new_session=True, preexec_fn=_take_controlling_terminal)
        finally:
            os.close(slave)
        asyncio.get_running_loop().add_reader(self._master, self._read)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._proc is not None and self._proc.returncode is None:
            self._proc.kill()
            await self._proc.wait()
        self._stop_reading()
        os.close(self._master)

    async def expect(self, text: str, timeout: float = 20) -> str:
        """Wait until ``text`` shows after what was expected before; what came up to it."""
        try:
            async with asyncio.timeout(timeout):
                while (at := self.transcript.find(text, self._seen)) < 0:
                    if self._closed:
                        raise AssertionError(f"the command ended without showing {text!r}")
                    changed = self._changed
                    await changed.wait()
        except TimeoutError:
            raise AssertionError(f"{text!r} did not show; the terminal shows:\n"
                                 f"{self.transcript[self._seen:]}") from None
        before = self.transcript[self._seen:at]
        self._seen = at + len(text)
        return before

    def type(self, line: str) -> None:
        """Type a line and press Enter."""
        os.write(self._master, line.encode() + b"\r")

    async def exit_code(self, timeout: float = 20) -> int:
        assert self._proc is not None
        code = await asyncio.wait_for(self._proc.wait(), timeout)
        async with asyncio.timeout(timeout):  # what it wrote last, to the end
            while not self._closed:
                await self._changed.wait()
        return code

    def _read(self) -> None:
        try:
            data = os.read(self._master, 4096)
        except OSError:  # EIO: every process on the other side has closed it
            data = b""
        if data:
            self.transcript += data.decode(errors="replace").replace("\r\n", "\n")
        else:
            self._stop_reading()
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    def _stop_reading(self) -> None:
        if not self._closed:
            self._closed = True
            asyncio.get_running_loop().remove_reader(self._master)


def _take_controlling_terminal() -> None:
    """In the child, after setsid: make the pty (its stdin) its controlling terminal."""
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)
