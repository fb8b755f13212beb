"""The state database as its users see it, whichever backend holds it.

SQLite (a file in the home, the embedded default) and PostgreSQL
(``store.url``, for several instances) answer the same calls with the same
SQL: statements with ``?`` placeholders in the dialect both speak, and
functions of the connection run inside the batch's transaction. Callers name
this protocol, never a backend; :func:`open_state_database` picks one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, Protocol, TypeVar, overload

from gateway.store.group_commit import Op, Work

T = TypeVar("T")

POSTGRES_SCHEMES = ("postgresql://", "postgres://")


class StateDatabase(Protocol):
    #: transactions committed so far (each holds a batch of writes)
    commits: int
    #: several instances may share it (PostgreSQL): a statement taking rows locks them
    shared: bool

    async def open(self) -> None: ...

    async def close(self) -> None: ...

    @property
    def is_open(self) -> bool: ...

    async def health(self, *, deep_within: float | None = None) -> str | None: ...

    @overload
    async def write(self, work: Callable[[Any], T]) -> T: ...

    @overload
    async def write(self, work: Sequence[Op]) -> None: ...

    def write_behind(self, work: Work[Any]) -> asyncio.Future[None]: ...

    def gather(self, ops: Iterable[Op]) -> asyncio.Future[Any]: ...

    async def flush(self) -> None: ...

    async def fetchone(self, sql: str, params: Sequence[Any] = ()) -> Any: ...

    async def fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[Any]: ...

    def listen(self, channel: str, heard: Callable[[str | None], None]) -> None:
        """Call ``heard(payload)`` when an instance notifies ``channel``; ``heard(None)``
        when some notifications may have been missed (a listener made again)."""


def is_postgres(location: str | Path) -> bool:
    return isinstance(location, str) and location.startswith(POSTGRES_SCHEMES)


def open_state_database(location: str | Path) -> StateDatabase:
    """The backend for ``location``: a PostgreSQL URL, else a SQLite file's path.
    Not opened yet (``await db.open()``)."""
    if is_postgres(location):
        from gateway.store.postgres import PgDatabase  # psycopg only when configured

        return PgDatabase(str(location))
    from gateway.store.sqlite import Database

    return Database(location)
