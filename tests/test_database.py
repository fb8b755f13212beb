"""Group commit under failure: nothing lost, one bad write sinks only itself."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest
import structlog

from gateway.store.group_commit import MAX_BATCH, StoreClosed
from gateway.store.migrations import MIGRATIONS
from gateway.store.sqlite import Database
from tests.helpers import eventually

INSERT = ("INSERT INTO sessions (id, session_key, platform, route, created_at, last_active_at) "
          "VALUES (?, ?, 'web', '{}', 0, 0)")


async def test_a_bad_write_fails_alone_and_the_rest_commit(tmp_path: Path) -> None:
    db = Database(tmp_path / "state.db")
    await db.open()
    try:
        good = [db.write([(INSERT, (f"s{i}", f"k{i}"))]) for i in range(5)]
        bad = db.write([(INSERT, ("s0", "duplicate id"))])  # primary key clash
        results = await asyncio.gather(*good, bad, return_exceptions=True)
        assert all(r is None for r in results[:5])
        assert isinstance(results[5], sqlite3.IntegrityError)
        assert len(await db.fetchall("SELECT id FROM sessions")) == 5
    finally:
        await db.close()


async def test_a_locked_database_delays_writes_but_loses_none(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    db = Database(path)
    await db.open()
    blocker = sqlite3.connect(path, timeout=0, isolation_level=None)
    blocker.execute("PRAGMA busy_timeout=0")
    try:
        await db.conn.execute("PRAGMA busy_timeout=50")  # make contention show quickly
        blocker.execute("BEGIN IMMEDIATE")
        with structlog.testing.capture_logs() as logs:
            db.write_behind([(INSERT, ("s1", "k1"))])
            pending = asyncio.ensure_future(db.write([(INSERT, ("s2", "k2"))]))
            await eventually(lambda: any(e["event"] == "state_db_busy_retrying" for e in logs),
                             what="the writes meeting the lock")
        assert not pending.done()  # waiting, not failed
        blocker.execute("COMMIT")
        await asyncio.wait_for(pending, 10)
        await db.flush()
        assert sorted(r[0] for r in await db.fetchall("SELECT id FROM sessions")) == ["s1", "s2"]
    finally:
        blocker.close()
        await db.close()


async def test_flush_waits_only_for_what_came_before_it(tmp_path: Path) -> None:
    db = Database(tmp_path / "state.db")
    await db.open()
    stop, flooding = asyncio.Event(), asyncio.Event()

    async def keep_writing() -> None:
        # as fast as it can, without end, pacing itself only on write_behind's answer: a
        # flush must not wait for writes queued after it, and the backlog stays bounded
        written = 0
        while not stop.is_set():
            await db.write_behind([(INSERT, (f"s{written}", f"k{written}"))])
            written += 1
            if written == 3 * MAX_BATCH:
                flooding.set()  # well into the flood

    writer = asyncio.ensure_future(keep_writing())
    try:
        await flooding.wait()
        before = db.commits
        await db.flush()
        # the batch under way, and the one holding the last write before the flush
        assert db.commits - before <= 2
    finally:
        stop.set()
        await writer
        await db.close()


async def test_write_behind_answers_with_room_once_the_queue_is_long(tmp_path: Path) -> None:
    db = Database(tmp_path / "state.db")
    await db.open()
    try:
        answers = [db.write_behind([(INSERT, (f"s{i}", f"k{i}"))])
                   for i in range(MAX_BATCH + 10)]
        assert all(a.done() for a in answers[:MAX_BATCH - 1])
        assert not any(a.done() for a in answers[MAX_BATCH:])  # the caller should wait
        await asyncio.gather(*answers)  # room comes as the commits drain the queue
        await db.flush()
        (count,) = await db.fetchone("SELECT COUNT(*) FROM sessions")
        assert count == MAX_BATCH + 10  # nothing is refused, only paced
    finally:
        await db.close()


async def test_a_closed_database_refuses_writes(tmp_path: Path) -> None:
    db = Database(tmp_path / "state.db")
    await db.open()
    await db.close()
    with pytest.raises(StoreClosed):
        await db.write([(INSERT, ("s1", "k1"))])
    with pytest.raises(StoreClosed):
        db.write_behind([(INSERT, ("s1", "k1"))])


async def test_two_processes_migrating_a_new_database_at_once(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    dbs = [Database(path) for _ in range(4)]
    await asyncio.gather(*(d.open() for d in dbs))
    try:
        row = await dbs[0].fetchone("PRAGMA user_version")
        assert row[0] == len(MIGRATIONS)
    finally:
        for d in dbs:
            await d.close()
