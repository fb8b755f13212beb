"""Each conversation's lane: its messages and notices, one after another.

A lane is a busy session's inbox — a notification for a session that is
mid-turn waits here, in order, and runs right after that turn. Each piece of
work runs in a task of its own, so ``/stop`` can end the turn under way and
the lane go on with the next.

The router may instead *hold* an idle conversation's lane (:meth:`Lanes.hold`) while
it posts that conversation's notices itself, inline in one task for a whole claimed
batch (gateway/delivery/router.py): no task or future a notice. Whatever comes for a
held lane meanwhile waits in it, as behind a turn, and runs once it is released.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import structlog

log = structlog.get_logger(__name__)

Work = Callable[[], Awaitable[Any]]


@dataclass(slots=True)
class Lane:
    queue: deque[tuple[Work, asyncio.Future[Any]]] = field(default_factory=deque)
    task: asyncio.Task[None] | None = None
    busy: bool = False
    #: the work running now, in a task of its own so /stop can end it and the lane go on
    current: asyncio.Future[Any] | None = None
    #: held by work outside the lane (the router posting notices inline): the task
    #: doing that work (None until it is made); the lane serves nothing until released
    held: bool = False
    holder: asyncio.Task[Any] | None = None


class Lanes:
    def __init__(self) -> None:
        self.by_key: dict[str, Lane] = {}

    def run(self, session_key: str, work: Work) -> asyncio.Future[Any]:
        """Run ``work`` after everything already queued for this conversation."""
        lane = self.by_key.get(session_key)
        if lane is None:
            lane = self.by_key[session_key] = Lane()
        done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        lane.queue.append((work, done))
        if lane.task is None and not lane.held:
            self._start(session_key, lane)
        return done

    def hold(self, session_key: str) -> bool:
        """Take an idle conversation's lane for work done outside it: busy until
        :meth:`release`; False when the lane has work of its own."""
        if session_key in self.by_key:
            return False
        self.by_key[session_key] = Lane(busy=True, held=True)
        return True

    def held_by(self, session_key: str, holder: asyncio.Task[Any]) -> None:
        """The task doing a held lane's work: what :meth:`drain` and :meth:`idle` wait for."""
        lane = self.by_key.get(session_key)
        if lane is not None and lane.held:
            lane.holder = holder

    def release(self, session_key: str) -> None:
        """The holder is done: what came meanwhile runs now, in order."""
        lane = self.by_key.get(session_key)
        if lane is None or not lane.held:
            return
        lane.held = lane.busy = False
        lane.holder = None
        if lane.queue:
            self._start(session_key, lane)
        else:
            del self.by_key[session_key]

    def _start(self, session_key: str, lane: Lane) -> None:
        lane.task = asyncio.create_task(self._serve(session_key, lane),
                                        name=f"lane:{session_key}")

    def stop(self, session_key: str) -> bool:
        """End the work under way in this conversation; False when there is none — or
        when it is the caller itself (a /stop replayed in its lane after a restart)."""
        lane = self.by_key.get(session_key)
        if (lane is None or lane.current is None or lane.current.done()
                or lane.current is asyncio.current_task()):
            return False
        lane.current.cancel()
        log.info("turn_stopped", session_key=session_key)
        return True

    def is_busy(self, session_key: str) -> bool:
        lane = self.by_key.get(session_key)
        return bool(lane and lane.busy)

    def queued_last(self, session_key: str, done: asyncio.Future[Any]) -> bool:
        """Whether the work ``done`` belongs to has not started, and nothing is queued
        behind it (what joins it then overtakes nothing)."""
        lane = self.by_key.get(session_key)
        return bool(lane and lane.queue and lane.queue[-1][1] is done)

    def queued(self, session_key: str) -> list[asyncio.Future[Any]]:
        """The futures of the work queued in this conversation and not started, in order."""
        lane = self.by_key.get(session_key)
        return [done for _, done in lane.queue] if lane else []

    def withdraw(self, session_key: str, done: asyncio.Future[Any]) -> bool:
        """Take the queued work ``done`` belongs to out of the lane before it starts (the
        router sends its notices with the delivery before it); False when it started."""
        lane = self.by_key.get(session_key)
        if lane is None:
            return False
        for index, (_, queued) in enumerate(lane.queue):
            if queued is done:
                del lane.queue[index]
                return True
        return False

    def waiting(self, session_key: str) -> int:
        lane = self.by_key.get(session_key)
        return len(lane.queue) if lane else 0

    async def idle(self, session_key: str) -> None:
        """Until this conversation's lane is gone: its work done (or cancelled) and
        nothing queued behind it."""
        while (lane := self.by_key.get(session_key)) is not None:
            running = lane.task or lane.holder
            if running is None:  # held, its holder not made yet: it is, within this step
                await asyncio.sleep(0)
                continue
            await asyncio.wait({running})

    @property
    def busy_keys(self) -> Iterable[str]:
        return [key for key, lane in self.by_key.items() if lane.busy]

    async def drain(self, timeout: float) -> bool:
        """Let queued work finish for up to ``timeout``, then cancel it; True when all did."""
        tasks = list({running for lane in self.by_key.values()
                      if (running := lane.task or lane.holder) is not None})
        if not tasks:
            return True
        _, pending = await asyncio.wait(tasks, timeout=timeout)
        for task in pending:
            task.cancel()
        if pending:
            log.warning("drain_timeout", unfinished_conversations=len(pending))
            await asyncio.gather(*pending, return_exceptions=True)
        return not pending

    async def _serve(self, key: str, lane: Lane) -> None:
        try:
            while lane.queue:
                work, done = lane.queue.popleft()
                lane.busy = True
                lane.current = asyncio.ensure_future(work())
                try:
                    result = await lane.current
                except asyncio.CancelledError:
                    task = asyncio.current_task()
                    if task is not None and not task.cancelling():
                        # only the turn was cancelled (/stop, or a message interrupting it)
                        if not done.done():
                            done.set_result("stopped")
                        continue
                    lane.current.cancel()
                    if not done.done():
                        done.set_result("shutdown")
                    raise
                except Exception as exc:
                    if not done.done():
                        done.set_exception(exc)
                    continue
                finally:
                    lane.busy = False
                    lane.current = None
                if not done.done():
                    done.set_result(result)
        finally:
            for _, done in lane.queue:
                if not done.done():
                    done.set_result("shutdown")
            lane.queue.clear()
            if self.by_key.get(key) is lane:
                del self.by_key[key]
