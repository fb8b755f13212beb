"""Reporting a watched job's output: read as it grows, matched off the event loop.

The log is read chunk by chunk as inotify says it grew, yielding between
chunks, and each chunk's lines are matched in a worker thread (RE2 releases
the GIL), so neither a job that prints gigabytes nor an expensive pattern
holds up any conversation. Every watch notice commits, in its transaction, how
far into the log the watch has read: a restarted daemon reads on from there,
so each matching line is reported once. A notice that cannot be committed is
tried again, never skipped — what comes after it waits in the log.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import structlog

from gateway.delivery.notifications import NewNotification
from gateway.delivery.outbox import Outbox
from gateway.retry import RetryPolicy
from gateway.store.group_commit import Op
from tools.job_notices import watch_text
from tools.job_output import LogReader, OutputWatcher
from tools.job_record import JobRecord
from tools.plain_text import plain
from tools.watch import JobWatch, WatchLimits, WatchNotice

log = structlog.get_logger(__name__)

#: a watch notice is recorded whatever it takes: the match was seen, it must be told
RECORD = RetryPolicy((0.1, 0.5, 1.0, 2.0, 5.0))


class WatchReporter:
    def __init__(self, outbox: Outbox, output: OutputWatcher, limits: WatchLimits) -> None:
        self.outbox = outbox
        self.output = output
        self.limits = limits
        self._matcher = ThreadPoolExecutor(max_workers=2, thread_name_prefix="watch-match")

    async def follow(self, record: JobRecord, watch: JobWatch,
                     ended: asyncio.Future[Any]) -> None:
        """Report matching lines until the job has ended and everything it wrote before
        its end has been read (not what processes it left behind write after it)."""
        sub = self.output.watch(record.log_path)
        ended.add_done_callback(lambda _: sub.changed.set())
        reader = LogReader(record.log_path, record.watch_offset)
        until: int | None = None
        try:
            while not watch.disabled:
                if ended.done() and until is None:
                    until = _size(record)
                sub.changed.clear()
                more = True
                while more and not watch.disabled:
                    lines, more = reader.read(final=until is not None, limit=until)
                    if lines:
                        await self._feed(record, watch, lines)
                    await asyncio.sleep(0)  # one chatty job must not hold the loop
                if until is not None:
                    return
                await sub.changed.wait()
        finally:
            self.output.unwatch(sub)

    def final_notice(self, record: JobRecord, watch: JobWatch) -> NewNotification | None:
        """What the cooldown still holds when the job ends, as one last notice."""
        held = watch.finish()
        return self._notification(record, held, "final") if held is not None else None

    def close(self) -> None:
        self._matcher.shutdown(wait=False, cancel_futures=True)

    async def _feed(self, record: JobRecord, watch: JobWatch,
                    lines: Sequence[tuple[str, int]]) -> None:
        texts = [plain(text) for text, _ in lines]
        loop = asyncio.get_running_loop()
        matched = await loop.run_in_executor(self._matcher, _matching, watch, texts)
        for index in matched:
            notice = watch.matched(texts[index])
            if notice is not None:
                await self._commit(record, notice, lines[index][1])

    async def _commit(self, record: JobRecord, notice: WatchNotice, end_offset: int) -> None:
        notices = record.watch_notices + (notice.kind == "watch_match")
        ops: list[Op] = [("UPDATE jobs SET watch_notices = ?, watch_offset = ? WHERE id = ?",
                          (notices, end_offset, record.id))]
        if notice.kind == "watch_disabled":
            ops.append(("UPDATE jobs SET watch_disabled = 1 WHERE id = ?", (record.id,)))
        sequence = notices if notice.kind == "watch_match" else 0
        new = self._notification(record, notice, sequence)
        for attempt in RECORD.tries():
            try:
                await self.outbox.produce([new], with_ops=ops)
                break
            except Exception:
                log.exception("watch_notice_not_recorded", job_id=record.id, attempt=attempt)
                await RECORD.pause(attempt)
        record.watch_notices, record.watch_offset = notices, end_offset
        record.watch_disabled = record.watch_disabled or notice.kind == "watch_disabled"

    def _notification(self, record: JobRecord, notice: WatchNotice,
                      sequence: int | str) -> NewNotification:
        return NewNotification(
            idempotency_key=f"{record.id}:{notice.kind}:{sequence}", kind=notice.kind,
            address=record.address, job_id=record.id,
            text=watch_text(record, notice, self.limits),
            outcome="match" if notice.kind != "watch_disabled" else "info",
            trace_parent=record.trace_parent)


def _matching(watch: JobWatch, texts: list[str]) -> list[int]:
    """Indexes of the lines that match (in a worker thread)."""
    return [i for i, text in enumerate(texts) if watch.matches(text)]


def _size(record: JobRecord) -> int:
    try:
        return os.path.getsize(record.log_path)
    except OSError:
        return 0
