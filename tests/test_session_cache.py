"""The live-session cache: a session read from the store as live is remembered as live
only if no session stopped being live while the read was under way — an end the read
may not have seen (here, or on another instance) is never undone by it."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from gateway.sessions.cache import LiveSessionCache
from gateway.sessions.store import SessionStore
from gateway.words.route import Route
from gateway.words.session_entry import SessionEntry

ROUTE = Route("memory", "dm", "1", user_id="1")


def _entry(sid: str, key: str = "k", ended: float | None = None) -> SessionEntry:
    return SessionEntry(sid, key, ROUTE, created_at=0.0, last_active_at=0.0, ended_at=ended)


def test_a_read_begun_before_an_end_remembers_nothing() -> None:
    cache = LiveSessionCache()
    generation = cache.generation
    cache.forget("someone")  # an end, here or told by another instance, meanwhile
    cache.put_read([_entry("s1")], generation)
    assert cache.by_id("s1") is None


def test_a_read_remembers_its_live_sessions_and_not_its_ended_ones() -> None:
    cache = LiveSessionCache()
    cache.put_read([_entry("s1", "a"), _entry("s2", "b", ended=1.0)], cache.generation)
    assert cache.by_id("s1") is not None and cache.by_key("a") is not None
    assert cache.by_id("s2") is None


async def test_get_many_makes_the_next_look_free_but_never_revives_an_ended_session(
        tmp_path: Path) -> None:
    async with SessionStore(tmp_path / "state.db") as store:
        live = await store.get_or_create("k", ROUTE)
        other = SessionStore(store.location)  # another process's view: nothing cached
        async with other:
            assert not other.is_live_session(live.id)
            assert (await other.get_many([live.id]))[live.id].is_live
            assert other.is_live_session(live.id)  # known now: no second read
            ended = await store.end_session(live.id, "new")
            other._ended_elsewhere(ended.id)  # as the instance's listener is told
            assert not other.is_live_session(live.id)
            stale = replace(live)  # a read that began before the end, answering now
            other._live.put_read([stale], other._live.generation - 1)
            assert not other.is_live_session(live.id)
