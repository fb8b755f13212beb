from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from gateway.sessions.store import SessionNotFound, SessionStore
from gateway.store.migrations import MIGRATIONS
from gateway.words.route import Route

TOPIC = Route("telegram", "group", "-1001", thread_id="42", user_id="7", message_id="900")
KEY = "agent:main:telegram:group:-1001:42"


async def test_concurrent_get_or_create_for_one_new_key_makes_one_session(
        store: SessionStore) -> None:
    entries = await asyncio.gather(*(store.get_or_create(KEY, TOPIC) for _ in range(50)))
    assert len({e.id for e in entries}) == 1


async def test_two_connections_racing_on_one_key_make_one_session(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    async with SessionStore(path) as a, SessionStore(path) as b:
        first, second = await asyncio.gather(a.get_or_create(KEY, TOPIC),
                                             b.get_or_create(KEY, TOPIC))
        assert first.id == second.id


async def test_the_stored_route_survives_a_reopen(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    async with SessionStore(path) as s:
        created = await s.get_or_create(KEY, TOPIC)
    async with SessionStore(path) as s:
        again = await s.get_or_create(KEY, TOPIC)
        loaded = await s.get(created.id)
    assert again.id == created.id
    assert loaded is not None and loaded.route == TOPIC


async def test_rotate_ends_the_session_and_keeps_the_key(store: SessionStore) -> None:
    first = await store.get_or_create(KEY, TOPIC)
    second = await store.rotate(first.id, "new")
    assert second.session_key == KEY and second.id != first.id
    assert second.parent_session_id is None
    ended = await store.get(first.id)
    assert ended is not None and ended.end_reason == "new" and ended.ended_at is not None
    assert (await store.get_or_create(KEY, TOPIC)).id == second.id


async def test_compression_rotation_records_the_lineage(store: SessionStore) -> None:
    first = await store.get_or_create(KEY, TOPIC)
    child = await store.rotate(first.id, "compression", lineage=True)
    assert child.parent_session_id == first.id


async def test_ending_twice_keeps_the_first_reason(store: SessionStore) -> None:
    entry = await store.get_or_create(KEY, TOPIC)
    await store.end_session(entry.id, "new")
    again = await store.end_session(entry.id, "closed")
    assert again.end_reason == "new"
    with pytest.raises(SessionNotFound):
        await store.end_session("no-such-id", "new")


async def test_archived_filter_and_titles(store: SessionStore) -> None:
    a = await store.get_or_create("agent:main:web:dm:a", Route("web", "dm", "a"))
    b = await store.get_or_create("agent:main:web:dm:b", Route("web", "dm", "b"))
    await store.update_session(b.id, title="deploys", archived=True)
    assert [s.id for s in await store.list_sessions("exclude")] == [a.id]
    only = await store.list_sessions("only")
    assert [(s.id, s.title, s.archived) for s in only] == [(b.id, "deploys", True)]
    assert {s.id for s in await store.list_sessions("include")} == {a.id, b.id}
    with pytest.raises(ValueError):
        await store.list_sessions("sometimes")  # type: ignore[arg-type]
    with pytest.raises(SessionNotFound):
        await store.update_session("nope", title="x")


async def test_sessions_page_through_ties_in_activity_once_each_with_their_count(
        store: SessionStore) -> None:
    made = [await store.get_or_create(f"agent:main:web:dm:{n}", Route("web", "dm", str(n)))
            for n in range(25)]
    await store.update_session(made[3].id, archived=True)
    await store.db.write(lambda conn: conn.execute("UPDATE sessions SET last_active_at = 5"))
    pages = [await store.list_sessions("include", limit=10, offset=offset)
             for offset in (0, 10, 20)]
    assert [len(page) for page in pages] == [10, 10, 5]
    listed = [s.id for page in pages for s in page]
    assert sorted(listed) == sorted(s.id for s in made)  # none twice, none left out
    assert await store.count_sessions("include") == 25
    assert await store.count_sessions("exclude") == 24
    assert await store.count_sessions("only") == 1
    assert await store.list_sessions("include", offset=10**30) == []  # past any integer
    assert len(await store.list_sessions("include", limit=10**30)) == 25


async def test_transcript_is_durable_after_close(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    async with SessionStore(path) as s:
        entry = await s.get_or_create(KEY, TOPIC)
        for i in range(100):
            s.record_message(entry.id, "user", f"line {i}")
    async with SessionStore(path) as s:
        lines = await s.messages(entry.id)
    assert [line.text for line in lines] == [f"line {i}" for i in range(100)]


async def test_schema_is_versioned_and_in_wal_mode(sqlite_store: SessionStore) -> None:
    with sqlite3.connect(sqlite_store.path) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS)
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


async def test_a_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    with sqlite3.connect(path) as db:
        db.execute(f"PRAGMA user_version = {len(MIGRATIONS) + 1}")
    with pytest.raises(RuntimeError, match="newer than this homing"):
        async with SessionStore(path):
            pass
