"""Shared fixtures: real stores on temp dirs, the real runner, real adapters."""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from agent.command import CommandAgent
from gateway.config.settings import Config, parse_config
from gateway.daemon.assembly import Gateway, running_gateway
from gateway.messages.runner import GatewayRunner
from gateway.platforms.web.adapter import WebAdapter
from gateway.sessions.store import SessionStore
from tests.daemon_logs import pytest_runtest_makereport  # noqa: F401  (logs of failed tests)
from tests.fakes.openai_server import FakeOpenAI
from tests.matrix_homeserver import homeserver, matrix_user  # noqa: F401  (Synapse fixtures)
from tests.memory_platform import MemoryAdapter
from tests.pg_cluster import pg_cluster, pg_fresh_url, pg_url  # noqa: F401  (PostgreSQL fixtures)

# the real client libraries honour proxy variables; tests talk to 127.0.0.1 only
os.environ["NO_PROXY"] = os.environ["no_proxy"] = "127.0.0.1,localhost"

# compiled modules are kept (in __pycache__/, ignored by git) even where the shell says
# not to: every worker compiles and rewrites the test modules (10 s of CPU without a
# cache, 3 s with), and every daemon and CLI run the tests start compiles the gateway
# again (a tenth of its start); the workers and those children inherit this
sys.dont_write_bytecode = False
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)

#: free memory a tmpfs needs to hold the tests' files (a whole run leaves about 120 MB)
_TMPFS_ROOM = 2 * 1024**3


def _temp_files_in_memory() -> None:
    """tmp_path (and tempfile) in /dev/shm when it is a tmpfs with room: the stores,
    job logs and daemons' homes of the tests, whose every commit and job file otherwise
    waits on a busy disk (as tests/pg_cluster.py keeps its cluster there). TMPDIR,
    PYTEST_DEBUG_TEMPROOT or --basetemp still decide where, when given."""
    if any(os.environ.get(name) for name in ("TMPDIR", "TEMP", "TMP", "PYTEST_DEBUG_TEMPROOT")):
        return
    shm = "/dev/shm"
    try:
        room = os.statvfs(shm)
    except OSError:
        return
    if room.f_bavail * room.f_frsize >= _TMPFS_ROOM and os.access(shm, os.W_OK | os.X_OK):
        tempfile.tempdir = shm


_temp_files_in_memory()


def make_config(home: Path, **overrides: object) -> Config:
    raw: dict = {"home": str(home), "platforms": {"web": {"port": 0}}}
    for dotted, value in overrides.items():
        node = raw
        *parents, leaf = dotted.split("__")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return parse_config(raw, {})


@pytest.fixture
def config(tmp_path: Path) -> Config:
    return make_config(tmp_path / "home")


@pytest.fixture(params=["sqlite", "postgresql"])
def state_location(request: pytest.FixtureRequest, config: Config) -> str | Path:
    """Each store test runs on both backends: the home's SQLite file, and a database
    of its own on the throwaway PostgreSQL cluster."""
    if request.param == "sqlite":
        return config.state_db
    url: str = request.getfixturevalue("pg_fresh_url")
    return url


@pytest.fixture
async def store(state_location: str | Path) -> AsyncIterator[SessionStore]:
    async with SessionStore(state_location) as s:
        yield s


@pytest.fixture
async def sqlite_store(config: Config) -> AsyncIterator[SessionStore]:
    """For tests of SQLite's own file (WAL, schema version)."""
    async with SessionStore(config.state_db) as s:
        yield s


@pytest.fixture
async def memory_gateway(config: Config, store: SessionStore
                         ) -> AsyncIterator[tuple[GatewayRunner, MemoryAdapter]]:
    """The real runner and command agent behind an in-memory platform."""
    runner = GatewayRunner(config, store, CommandAgent())
    adapter = MemoryAdapter("memory", send_delay=0.001)
    runner.add_adapter(adapter)
    await adapter.connect(runner)
    yield runner, adapter
    await runner.drain(5)


@pytest.fixture
async def web(config: Config) -> AsyncIterator[tuple[GatewayRunner, str]]:
    """The whole gateway with its web chat on a free port: (runner, base URL)."""
    async with running_gateway(config) as gateway:
        runner = gateway.runner
        adapter = runner.adapters["web"].inner  # the platform's own, behind the fence
        assert isinstance(adapter, WebAdapter)
        yield runner, f"http://127.0.0.1:{adapter.port}"


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


@pytest.fixture
async def model() -> AsyncIterator[FakeOpenAI]:
    """A fake OpenAI-compatible endpoint; tests script it or give it a brain."""
    async with FakeOpenAI() as fake:
        yield fake


@pytest.fixture
async def model_gateway(tmp_path: Path, model: FakeOpenAI
                        ) -> AsyncIterator[tuple[Gateway, str]]:
    """The whole gateway with the model agent on the fake endpoint: (gateway, web URL)."""
    from tests.model_support import model_config, web_base

    async with running_gateway(model_config(tmp_path / "home", model)) as gw:
        yield gw, web_base(gw)


@pytest.fixture
def discord_endpoints(monkeypatch: pytest.MonkeyPatch) -> None:
    """Put back discord.py's endpoints after a test that points them at the fake."""
    import discord

    monkeypatch.setattr(discord.http.Route, "BASE", discord.http.Route.BASE)
    monkeypatch.setattr(discord.gateway.DiscordWebSocket, "DEFAULT_GATEWAY",
                        discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY)


@pytest.fixture
def marker(tmp_path: Path, model: FakeOpenAI) -> Path:
    """The file the approval tests' dangerous command appends to; the model runs it on
    "clean up" (tests/approval_support.py)."""
    from tests.approval_support import runner_brain

    path = tmp_path / "marker"
    model.brain = runner_brain(path)
    return path
