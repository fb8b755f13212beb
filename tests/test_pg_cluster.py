"""The throwaway PostgreSQL cluster (tests/pg_cluster.py) with a real client: psycopg."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import psycopg
import pytest

import tests.pg_cluster as cluster_module
from tests.pg_cluster import MISSING, PgCluster, start_cluster


async def test_a_fresh_database_takes_queries_and_starts_empty(pg_fresh_url: str) -> None:
    async with await psycopg.AsyncConnection.connect(pg_fresh_url, autocommit=True) as conn:
        assert await _value(conn, "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'"
                            ) == 0
        await conn.execute("CREATE TABLE notes (id bigserial PRIMARY KEY, text text NOT NULL)")
        async with conn.cursor() as cur:
            await cur.executemany("INSERT INTO notes (text) VALUES (%s)", [("a",), ("b",)])
        rows = await (await conn.execute("SELECT text FROM notes ORDER BY id")).fetchall()
        assert [text for (text,) in rows] == ["a", "b"]


async def test_fresh_databases_are_not_the_shared_one(pg_fresh_url: str, pg_url: str) -> None:
    assert pg_fresh_url != pg_url
    async with await psycopg.AsyncConnection.connect(pg_url) as conn:
        assert await _value(conn, "SELECT current_database()") == "homing"


async def test_a_notify_wakes_a_listener_on_another_connection(pg_fresh_url: str) -> None:
    async with await psycopg.AsyncConnection.connect(pg_fresh_url, autocommit=True) as listener, \
            await psycopg.AsyncConnection.connect(pg_fresh_url) as sender:
        await listener.execute("LISTEN outbox")
        await sender.execute("SELECT pg_notify('outbox', '42')")
        heard = listener.notifies(timeout=0.2, stop_after=1)
        assert [n async for n in heard] == []  # a notification is sent when its transaction commits
        await sender.commit()
        (note,) = [n async for n in listener.notifies(timeout=10, stop_after=1)]
        assert (note.channel, note.payload) == ("outbox", "42")


async def test_the_cluster_is_local_fast_and_not_run_as_root(pg_cluster: PgCluster,
                                                             pg_url: str) -> None:
    async with await psycopg.AsyncConnection.connect(pg_url) as conn:
        assert await _value(conn, "SHOW listen_addresses") == "127.0.0.1"
        assert await _value(conn, "SHOW fsync") == "off"
        socket_dir = await _value(conn, "SHOW unix_socket_directories")
    assert pg_cluster.root is not None and Path(socket_dir) == pg_cluster.root
    if os.geteuid() == 0:
        assert pg_cluster.data.stat().st_uid != 0


async def _value(conn: psycopg.AsyncConnection[Any], sql: str) -> Any:
    row = await (await conn.execute(sql)).fetchone()
    assert row is not None
    return row[0]


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
