"""Assembling and running the gateway: store, agent, runner, adapters."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import structlog

from agent.command import CommandAgent

from .config import Config
from .platforms.base import Adapter
from .platforms.web import WebAdapter
from .runner import GatewayRunner
from .store import SessionStore

log = structlog.get_logger(__name__)

DRAIN_TIMEOUT = 30.0


class StartupError(RuntimeError):
    """The daemon cannot start with this configuration."""


def build_adapters(config: Config) -> list[Adapter]:
    adapters: list[Adapter] = []
    if config.platforms.web.enabled:
        adapters.append(WebAdapter(config.platforms.web))
    for name in ("telegram", "discord"):
        if getattr(config.platforms, name).enabled:
            raise StartupError(
                f"platforms.{name}.enabled: the {name} adapter is not part of this "
                f"version of homing yet; set it to false")
    if not adapters:
        raise StartupError("platforms: no platform is enabled; enable platforms.web at least")
    return adapters


@asynccontextmanager
async def running_gateway(config: Config) -> AsyncIterator[GatewayRunner]:
    """The gateway with its store open and every adapter connected."""
    adapters = build_adapters(config)
    async with SessionStore(config.state_db) as store:
        runner = GatewayRunner(config, store, CommandAgent())
        connected: list[Adapter] = []
        try:
            for adapter in adapters:
                runner.add_adapter(adapter)
                await adapter.connect(runner)
                connected.append(adapter)
            log.info("gateway_started", platforms=[a.platform for a in connected],
                     state_db=str(config.state_db))
            yield runner
        finally:
            await runner.drain(DRAIN_TIMEOUT)
            for adapter in reversed(connected):
                await adapter.disconnect()
            log.info("gateway_stopped")


async def run_daemon(config: Config) -> None:
    """Run until SIGINT or SIGTERM, then stop cleanly."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        async with running_gateway(config):
            await stop.wait()
            log.info("gateway_stopping")
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
