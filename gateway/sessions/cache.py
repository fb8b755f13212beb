"""A bounded cache of live sessions, by key and by id.

Only the store writes sessions, so it can keep this cache exact; the bound
keeps memory flat however many conversations a long-running gateway sees.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gateway.words.session_entry import SessionEntry


class LiveSessionCache:
    def __init__(self, capacity: int = 10_000) -> None:
        self.capacity = capacity
        self._by_key: OrderedDict[str, SessionEntry] = OrderedDict()
        self._by_id: dict[str, SessionEntry] = {}
        #: bumped whenever a session stops being live here (forgotten, cleared): a read
        #: begun before may hold it as live still (see :meth:`put_read`)
        self.generation = 0

    def __len__(self) -> int:
        return len(self._by_key)

    def by_key(self, key: str) -> SessionEntry | None:
        entry = self._by_key.get(key)
        if entry is not None:
            self._by_key.move_to_end(key)
        return entry

    def by_id(self, session_id: str) -> SessionEntry | None:
        return self._by_id.get(session_id)

    def put(self, entry: SessionEntry) -> None:
        """Remember ``entry`` as the live session of its key."""
        old = self._by_key.pop(entry.session_key, None)
        if old is not None:
            self._by_id.pop(old.id, None)
        self._by_key[entry.session_key] = entry
        self._by_id[entry.id] = entry
        while len(self._by_key) > self.capacity:
            _, evicted = self._by_key.popitem(last=False)
            self._by_id.pop(evicted.id, None)

    def refresh(self, entry: SessionEntry) -> None:
        """Replace the cached copy of ``entry``, if that session is the one cached."""
        if self._by_id.get(entry.id) is not None:
            self.put(entry)

    def put_read(self, entries: Iterable[SessionEntry], generation: int) -> None:
        """Remember the live ones of ``entries``, read from the store by a read that
        began at ``generation``: unless a session stopped being live since — an end the
        read may not have seen must not be undone by it."""
        if generation != self.generation:
            return
        for entry in entries:
            if entry.is_live and entry.id not in self._by_id:
                self.put(entry)

    def clear(self) -> None:
        self.generation += 1
        self._by_key.clear()
        self._by_id.clear()

    def forget(self, session_id: str) -> None:
        self.generation += 1
        entry = self._by_id.pop(session_id, None)
        if entry is not None and self._by_key.get(entry.session_key) is entry:
            del self._by_key[entry.session_key]
