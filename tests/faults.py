"""Fault injection for the invariant tests: a crash at one exact point, and gates.

A crash here is :class:`SimulatedCrash` raised at the point under test. It is
a ``BaseException``, so no ``except Exception`` on the way catches it: the
task that reaches the point goes no further, and nothing of the write it
interrupts commits — what a ``kill -9`` at that instant would leave in the
state directory. The test then stops that gateway and starts another on the
same state directory, as the restart after the crash would.
"""

from __future__ import annotations

import asyncio
import os
import shlex
import shutil
import sqlite3
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

import pytest

from gateway.store.group_commit import Op
from gateway.store.sqlite import Database


class SimulatedCrash(BaseException):
    """The process dying at this point (see the module's story)."""


class CrashPoint:
    """One point where the process dies: :meth:`crash` raises :class:`SimulatedCrash`
    there; :meth:`wait` returns once the task that reached it has ended."""

    def __init__(self) -> None:
        self.happened = asyncio.Event()
        self._task: asyncio.Task[Any] | None = None

    def crash(self, where: str) -> NoReturn:
        self._task = asyncio.current_task()
        self.happened.set()
        _unmourned(asyncio.get_running_loop())
        raise SimulatedCrash(where)

    async def wait(self, timeout: float = 10.0) -> None:
        """Until the crashed task has ended; its exception is taken here, so asyncio has
        no "exception never retrieved" to log when the task is collected later."""
        async with asyncio.timeout(timeout):
            await self.happened.wait()
            assert self._task is not None
            await asyncio.wait([self._task])
        assert isinstance(self._task.exception(), SimulatedCrash)


def _unmourned(loop: asyncio.AbstractEventLoop) -> None:
    """The tasks a simulated crash ends (the one that reached it, and any that awaited
    it: a conversation's lane) died with the process: asyncio is not to log them as an
    "exception never retrieved" when they are collected — which may happen at any later
    allocation, even inside another test's ``ast.parse``, whose AST state the
    traceback's formatting (itself an ``ast.parse`` in 3.11) would then upset."""
    earlier = loop.get_exception_handler()
    if getattr(earlier, "unmourned", False):
        return

    def handle(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if isinstance(context.get("exception"), SimulatedCrash):
            return
        if earlier is not None:
            earlier(loop, context)
        else:
            loop.default_exception_handler(context)

    handle.unmourned = True  # type: ignore[attr-defined]
    loop.set_exception_handler(handle)


class KilledAt(CrashPoint):
    """A crash point that keeps the SQLite state database as it had committed at that
    instant — what a ``kill -9`` there leaves — while the gateway that reached it goes
    on (its ``finally`` blocks, its stop, its later writes). :meth:`restore` puts that
    state back once the gateway is gone, for the next one to start on.

    :meth:`snapshot` alone is the same instant without raising: for a point reached in
    a callback, where an exception would only be logged by the loop."""

    def __init__(self, state_db: Path) -> None:
        super().__init__()
        self.path = state_db
        self.kept = state_db.with_name("killed-at.db")

    def snapshot(self) -> None:
        with sqlite3.connect(self.path) as source, sqlite3.connect(self.kept) as copy:
            source.backup(copy)  # what had committed: a reader's snapshot
        self.happened.set()

    def crash(self, where: str) -> NoReturn:
        self.snapshot()
        super().crash(where)

    def restore(self) -> None:
        assert self.kept.exists(), "the crash point was never reached"
        for extra in ("-wal", "-shm"):
            self.path.with_name(self.path.name + extra).unlink(missing_ok=True)
        shutil.move(self.kept, self.path)


def crash_on_write(monkeypatch: pytest.MonkeyPatch, db: Database,
                   matches: Callable[[Sequence[Op]], bool]) -> CrashPoint:
    """Crashes at the first write to ``db`` whose statements ``matches``, before any of
    them commits; later writes go through (the next process's, in effect)."""
    point = CrashPoint()
    real = db.write

    async def write(work: Any) -> Any:
        if not point.happened.is_set() and not callable(work) and matches(work):
            point.crash("crashed before this write committed")
        return await real(work)

    monkeypatch.setattr(db, "write", write)
    return point


def inserts_notice(kind: str) -> Callable[[Sequence[Op]], bool]:
    """Matches a write that adds a notification of ``kind`` to the outbox."""
    def matches(ops: Sequence[Op]) -> bool:
        return any(sql.startswith("INSERT INTO notifications") and params[1] == kind
                   for sql, params in ops)
    return matches


class Gate:
    """A FIFO a job's command waits on (:attr:`wait` in its command line) until the
    test opens it: the job is provably still running until then, with no sleep."""

    def __init__(self, path: Path) -> None:
        os.mkfifo(path)
        self.path = path

    @property
    def wait(self) -> str:
        return f"read _ < {shlex.quote(str(self.path))}"

    async def open(self, timeout: float = 10.0) -> None:
        def write() -> None:
            with self.path.open("w") as fifo:  # returns once the command has it open
                fifo.write("go\n")

        try:
            await asyncio.wait_for(asyncio.to_thread(write), timeout)
        except TimeoutError:
            # nothing waited on the gate: let the writer thread go before failing
            os.close(os.open(self.path, os.O_RDONLY | os.O_NONBLOCK))
            raise AssertionError(f"no command waited on the gate {self.path}") from None
