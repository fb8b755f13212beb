"""The state database on PostgreSQL (gateway/store/postgres.py), on a real cluster:
group commit, one bad write failing alone, functions of the connection, migrations
from SQLite's list, and write transactions one at a time across instances."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from gateway.store.group_commit import MAX_BATCH, StoreClosed
from gateway.store.migrations import MIGRATIONS, TABLES, ForeignDatabase
from gateway.store.postgres import PgConnection, PgDatabase, translate
from gateway.store.row_locks import locking
from gateway.store.sqlite import Database

INSERT = ("INSERT INTO sessions (id, session_key, platform, route, created_at, last_active_at) "
          "VALUES (?, ?, 'web', '{}', 0, 0)")


@pytest.fixture
async def db(pg_fresh_url: str) -> AsyncIterator[PgDatabase]:
    database = PgDatabase(pg_fresh_url)
    await database.open()
    try:
        yield database
    finally:
        await database.close()


def test_placeholders_are_translated_outside_strings_names_and_comments() -> None:
    assert translate("SELECT a FROM t WHERE b = ? AND c IN (?,?)") == (
        "SELECT a FROM t WHERE b = %s AND c IN (%s,%s)")
    assert translate("SELECT '?', \"odd?name\" FROM t WHERE d LIKE ? -- why?\n AND e = ?") == (
        "SELECT '?', \"odd?name\" FROM t WHERE d LIKE %s -- why?\n AND e = %s")
    # psycopg reads % everywhere, quoted or not
    assert translate("SELECT 'it''s 100%' WHERE x % 2 = ?") == (
        "SELECT 'it''s 100%%' WHERE x %% 2 = %s")


async def test_the_postgresql_only_triggers_are_installed(db: PgDatabase) -> None:
    """What wakes the other instances: a notice added or due again, a session ended, an
    approval decided, a turn ended with notices of its conversation waiting, a job asked
    to stop."""
    rows = await db.fetchall("SELECT tgname FROM pg_trigger WHERE NOT tgisinternal")
    assert {name for (name,) in rows} == {
        "notifications_added", "notifications_pending_again", "sessions_ended",
        "approvals_decided", "inbound_finished", "jobs_kill_asked"}


async def test_every_migration_applies_and_the_tables_match_sqlites(db: PgDatabase,
                                                                    tmp_path: Path) -> None:
    (version,) = await db.fetchone("SELECT version FROM homing_schema")
    assert version == len(MIGRATIONS)
    columns = await db.fetchall(
        "SELECT table_name, column_name, data_type FROM information_schema.columns "
        "WHERE table_schema = current_schema() AND table_name <> 'homing_schema' "
        "ORDER BY table_name, ordinal_position")
    pg: dict[str, list[tuple[str, str]]] = {}
    for table, column, data_type in columns:
        pg.setdefault(table, []).append((column, _kind(data_type)))
    assert set(pg) == TABLES

    lite = Database(tmp_path / "state.db")
    await lite.open()
    try:
        for table in TABLES:
            info = await lite.fetchall(f"PRAGMA table_info({table})")
            assert [(name, _kind(kind)) for _, name, kind, *_ in info] == pg[table], table
    finally:
        await lite.close()


def _kind(sql_type: str) -> str:
    """integer, float or text, whichever spelling either database uses."""
    t = sql_type.lower()
    return "integer" if "int" in t else "float" if t in ("real", "double precision") else t


async def test_instances_starting_together_migrate_once(pg_fresh_url: str) -> None:
    dbs = [PgDatabase(pg_fresh_url) for _ in range(4)]
    await asyncio.gather(*(d.open() for d in dbs))
    try:
        assert await dbs[0].fetchall("SELECT version FROM homing_schema") == [
            (len(MIGRATIONS),)]
    finally:
        for d in dbs:
            await d.close()


async def test_another_programs_database_is_refused(pg_fresh_url: str) -> None:
    with psycopg.connect(pg_fresh_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE invoices (id bigint PRIMARY KEY)")
    db = PgDatabase(pg_fresh_url)
    with pytest.raises(ForeignDatabase, match="invoices"):
        await db.open()
    assert not db.is_open


async def test_writes_that_arrive_together_share_a_commit(db: PgDatabase) -> None:
    before = db.commits
    await asyncio.gather(*(db.write([(INSERT, (f"s{i}", f"k{i}"))]) for i in range(200)))
    assert db.commits - before < 20  # 200 writes, a handful of transactions
    assert (await db.fetchone("SELECT COUNT(*) FROM sessions")) == (200,)


async def test_a_bad_write_fails_alone_and_the_rest_commit(db: PgDatabase) -> None:
    good = [db.write([(INSERT, (f"s{i}", f"k{i}"))]) for i in range(5)]
    bad = db.write([(INSERT, ("s0", "duplicate id"))])  # primary key clash
    results = await asyncio.gather(*good, bad, return_exceptions=True)
    assert all(r is None for r in results[:5])
    assert isinstance(results[5], psycopg.errors.UniqueViolation)
    assert len(await db.fetchall("SELECT id FROM sessions")) == 5


async def test_a_function_of_the_connection_reads_what_it_wrote(db: PgDatabase) -> None:
    await db.write([(INSERT, ("s1", "k1"))])

    def end(conn: PgConnection) -> tuple[int, Any]:
        changed = conn.execute("UPDATE sessions SET ended_at = ?, end_reason = ? "
                               "WHERE id = ? AND ended_at IS NULL", (5.5, "reset", "s1")).rowcount
        row = conn.execute("SELECT ended_at, end_reason FROM sessions WHERE id = ?",
                           ("s1",)).fetchone()
        return changed, row

    assert await db.write(end) == (1, (5.5, "reset"))
    assert await db.write(end) == (0, (5.5, "reset"))  # ended once


async def test_written_behind_lines_are_durable_after_flush(db: PgDatabase) -> None:
    answers = [db.write_behind([(INSERT, (f"s{i}", f"k{i}"))]) for i in range(MAX_BATCH + 10)]
    assert all(a.done() for a in answers[:MAX_BATCH - 1])
    assert not any(a.done() for a in answers[MAX_BATCH:])  # the writer should wait
    await asyncio.gather(*answers)
    await db.flush()
    assert (await db.fetchone("SELECT COUNT(*) FROM sessions")) == (MAX_BATCH + 10,)


async def test_flags_and_times_come_back_as_they_went_in(db: PgDatabase) -> None:
    await db.write([(INSERT, ("s1", "k1")),
                    ("UPDATE sessions SET archived = ?, created_at = ? WHERE id = ?",
                     (True, 1767225600.123456, "s1"))])
    row = await db.fetchone("SELECT archived, created_at FROM sessions WHERE archived = ?",
                            (1,))
    assert row == (1, 1767225600.123456)


async def test_write_transactions_of_two_instances_run_side_by_side(pg_fresh_url: str
                                                                     ) -> None:
    """No lock for every write: while one instance's transaction holds a row, the
    other's writes to other rows commit. A function that reads and then decides locks
    what it read (gateway/store/row_locks.py), and keeps SQLite's meaning: two
    instances counting up one row together lose no step."""
    a, b = PgDatabase(pg_fresh_url), PgDatabase(pg_fresh_url)
    await a.open()
    await b.open()
    try:
        await a.write([("INSERT INTO store_health (id, checked_at) VALUES (1, 0)", ())])
        holding, may_go = threading.Event(), threading.Event()

        def hold_the_row(conn: PgConnection) -> None:
            conn.execute("SELECT checked_at FROM store_health WHERE id = 1 FOR UPDATE")
            holding.set()
            assert may_go.wait(30), "the other instance's write never came through"

        held = asyncio.ensure_future(a.write(hold_the_row))
        await asyncio.to_thread(holding.wait, 30)
        await b.write([(INSERT, ("s1", "k1"))])  # another row: not held up
        may_go.set()
        await held

        def count_up(conn: PgConnection) -> None:
            (now,) = conn.execute("SELECT checked_at FROM store_health WHERE id = 1"
                                  + locking(conn)).fetchone()
            conn.execute("UPDATE store_health SET checked_at = ? WHERE id = 1", (now + 1,))

        await asyncio.gather(*(db.write(count_up) for _ in range(50) for db in (a, b)))
        assert await a.fetchone("SELECT checked_at FROM store_health") == (100.0,)
    finally:
        await a.close()
        await b.close()


async def test_health_writes_its_row(db: PgDatabase) -> None:
    assert await db.health() is None
    assert await db.health() is None  # the second time over the first row
    assert (await db.fetchone("SELECT COUNT(*) FROM store_health")) == (1,)


async def test_a_closed_database_refuses_writes(db: PgDatabase) -> None:
    await db.close()
    with pytest.raises(StoreClosed):
        await db.write([(INSERT, ("s1", "k1"))])
    with pytest.raises(StoreClosed):
        db.write_behind([(INSERT, ("s1", "k1"))])
    assert await db.health() == "the state database is closed"

