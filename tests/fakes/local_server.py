"""What every fake platform server shares: an aiohttp app on 127.0.0.1, a free port,
and ``async with`` to run it."""

from __future__ import annotations

from typing import Self

from aiohttp import web


class LocalServer:
    port: int = 0
    _runner: web.AppRunner | None = None

    def _build_app(self) -> web.Application:
        raise NotImplementedError

    async def _before_stop(self) -> None:
        """Let go of what would hold the shutdown (long polls, open sockets)."""

    async def start(self) -> None:
        """Bind 127.0.0.1 on a free port and start serving."""
        self._runner = web.AppRunner(self._build_app(), access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = self._runner.addresses[0][1]

    async def stop(self) -> None:
        await self._before_stop()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    @property
    def open_connections(self) -> int:
        """How many client connections are open now (a test waits for one to close, as
        a killed process's would). A closed one whose request is still held counts as
        closed: that request sees its client gone."""
        server = self._runner.server if self._runner is not None else None
        handlers = server.connections if server is not None else []
        return sum(1 for handler in handlers if handler.transport is not None)

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()
