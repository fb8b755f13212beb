"""Where a platform keeps a cursor of its own, durably: the point in its stream up to
which everything is journaled (Matrix's sync ``since`` token). Telegram keeps its
offset itself; a platform whose client holds the cursor saves it here, and only after
the journal commit of every message before it — so a crash at any moment makes the
next life ask again from an earlier point, never a later one (the journal knows the
messages it has by their platform ids). In the state database, so on a shared store
the instance that takes a platform's connection over goes on from the same point.
"""

from __future__ import annotations

import time

from gateway.store.state import StateDatabase


class Cursors:
    def __init__(self, db: StateDatabase) -> None:
        self.db = db

    async def get(self, platform: str, name: str) -> str | None:
        """The cursor saved last, or None before the first."""
        row = await self.db.fetchone(
            "SELECT value FROM platform_cursors WHERE platform = ? AND name = ?",
            (platform, name))
        return str(row[0]) if row is not None else None

    async def put(self, platform: str, name: str, value: str) -> None:
        """Save ``value`` (committed when this returns)."""
        await self.db.write([(
            "INSERT INTO platform_cursors (platform, name, value, updated_at) "
            "VALUES (?, ?, ?, ?) ON CONFLICT (platform, name) DO UPDATE SET "
            "value = excluded.value, updated_at = excluded.updated_at",
            (platform, name, value, time.time()))])
