"""The throwaway PostgreSQL cluster (tests/pg_cluster.py) with a real client: asyncpg."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import asyncpg
import pytest

from . import pg_cluster as cluster_module
from .pg_cluster import MISSING, PgCluster, start_cluster


async def test_a_fresh_database_takes_queries_and_starts_empty(pg_fresh_url: str) -> None:
    conn = await asyncpg.connect(pg_fresh_url)
    try:
        assert await conn.fetchval("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'"
                                   ) == 0
        await conn.execute("CREATE TABLE notes (id bigserial PRIMARY KEY, text text NOT NULL)")
        await conn.executemany("INSERT INTO notes (text) VALUES ($1)", [("a",), ("b",)])
        assert [r["text"] for r in await conn.fetch("SELECT text FROM notes ORDER BY id")
                ] == ["a", "b"]
    finally:
        await conn.close()


async def test_fresh_databases_are_not_the_shared_one(pg_fresh_url: str, pg_url: str) -> None:
    assert pg_fresh_url != pg_url
    conn = await asyncpg.connect(pg_url)
    try:
        assert await conn.fetchval("SELECT current_database()") == "homing"
    finally:
        await conn.close()


async def test_a_notify_wakes_a_listener_on_another_connection(pg_fresh_url: str) -> None:
    listener = await asyncpg.connect(pg_fresh_url)
    sender = await asyncpg.connect(pg_fresh_url)
    heard: asyncio.Queue[tuple[str, str]] = asyncio.Queue()
    try:
        await listener.add_listener(
            "outbox", lambda _conn, _pid, channel, payload: heard.put_nowait((channel, payload)))
        async with sender.transaction():
            await sender.execute("SELECT pg_notify('outbox', '42')")
            assert heard.empty()  # a notification is sent when its transaction commits
        assert await asyncio.wait_for(heard.get(), 10) == ("outbox", "42")
    finally:
        await sender.close()
        await listener.close()


async def test_the_cluster_is_local_fast_and_not_run_as_root(pg_cluster: PgCluster,
                                                             pg_url: str) -> None:
    conn = await asyncpg.connect(pg_url)
    try:
        assert await conn.fetchval("SHOW listen_addresses") == "127.0.0.1"
        assert await conn.fetchval("SHOW fsync") == "off"
        socket_dir = await conn.fetchval("SHOW unix_socket_directories")
    finally:
        await conn.close()
    assert pg_cluster.root is not None and Path(socket_dir) == pg_cluster.root
    if os.geteuid() == 0:
        assert pg_cluster.data.stat().st_uid != 0


def test_without_postgresql_the_tests_skip_saying_how_to_install_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cluster_module, "find_bindir", lambda: None)
    monkeypatch.delenv("HOMING_REQUIRE_POSTGRES", raising=False)
    with pytest.raises(pytest.skip.Exception, match="apt-get install postgresql"):
        start_cluster()


def test_ci_fails_instead_of_skipping_without_postgresql(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cluster_module, "find_bindir", lambda: None)
    monkeypatch.setenv("HOMING_REQUIRE_POSTGRES", "1")
    with pytest.raises(pytest.fail.Exception) as failed:
        start_cluster()
    assert str(failed.value) == MISSING
