"""Following jobs' ``output.log`` files as they grow.

A job writes its output straight to its log, so the daemon reads it from
there — the same way for a job it just started and for one an earlier daemon
left running. One inotify descriptor serves every job: a write to a log wakes
that job's reader, which reads what was appended (event-driven, no polling, no
thread). Where inotify is unavailable or out of watches, a reader is woken a
few times a second instead.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from pathlib import Path

import structlog

log = structlog.get_logger(__name__)

try:  # Linux only; elsewhere every reader falls back to the timer
    from inotify_simple import INotify, flags
except ImportError:  # pragma: no cover - not on Linux
    INotify = None

LINE_LIMIT = 64 * 1024  # longer lines are cut here for watching (the log keeps them whole)
READ_CHUNK = 256 * 1024  # per read; the reader yields between reads
#: where inotify is missing. Read at every tick: tests set it to an hour, so an output
#: match that is reported at all was read on inotify's word, not on the timer's
FALLBACK_SECONDS = 0.2


@dataclass(slots=True)
class Subscription:
    """A job's wake-up: ``changed`` is set whenever its log may have grown."""

    changed: asyncio.Event = field(default_factory=asyncio.Event)
    wd: int | None = None
    timer: asyncio.TimerHandle | None = None
    closed: bool = False


class OutputWatcher:
    def __init__(self) -> None:
        self._inotify: INotify | None = None
        self._by_wd: dict[int, Subscription] = {}
        self._unavailable = INotify is None

    def watch(self, path: Path) -> Subscription:
        sub = Subscription()
        sub.changed.set()  # read once at the start, whatever happened before
        inotify = self._descriptor()
        if inotify is not None:
            try:
                sub.wd = inotify.add_watch(path, flags.MODIFY | flags.CLOSE_WRITE)
            except OSError as exc:
                log.warning("job_output_not_watched", path=str(path), error=str(exc),
                            fallback_seconds=FALLBACK_SECONDS)
            else:
                self._by_wd[sub.wd] = sub
                return sub
        self._tick(sub)
        return sub

    def unwatch(self, sub: Subscription) -> None:
        sub.closed = True
        if sub.timer is not None:
            sub.timer.cancel()
        if sub.wd is not None and self._by_wd.get(sub.wd) is sub:
            del self._by_wd[sub.wd]
            if self._inotify is not None:
                with contextlib.suppress(OSError):  # the file may be gone
                    self._inotify.rm_watch(sub.wd)

    def close(self) -> None:
        for sub in list(self._by_wd.values()):
            self.unwatch(sub)
        if self._inotify is not None:
            with contextlib.suppress(Exception):
                asyncio.get_running_loop().remove_reader(self._inotify.fileno())
            self._inotify.close()
            self._inotify = None

    def _descriptor(self) -> INotify | None:
        if self._inotify is None and not self._unavailable:
            try:
                self._inotify = INotify(nonblocking=True)
            except OSError as exc:
                self._unavailable = True
                log.warning("inotify_unavailable", error=str(exc))
                return None
            asyncio.get_running_loop().add_reader(self._inotify.fileno(), self._on_events)
        return self._inotify

    def _on_events(self) -> None:
        assert self._inotify is not None
        try:
            events = self._inotify.read(timeout=0)
        except BlockingIOError:
            return
        for event in events:
            if event.mask & flags.Q_OVERFLOW:  # events were lost: everyone looks
                for sub in self._by_wd.values():
                    sub.changed.set()
                continue
            found = self._by_wd.get(event.wd)
            if found is not None:
                found.changed.set()

    def _tick(self, sub: Subscription) -> None:
        if sub.closed:
            return
        sub.changed.set()
        sub.timer = asyncio.get_running_loop().call_later(FALLBACK_SECONDS, self._tick, sub)


class LogReader:
    """Reads complete lines appended to a log since ``offset``, each with the offset
    just past its newline (what a watch records as read). A line longer than
    ``LINE_LIMIT`` is handed out cut, once its end has been read."""

    def __init__(self, path: Path, offset: int = 0) -> None:
        self.path = path
        self.offset = offset  # the end of the last whole line handed out
        self._position = offset  # how far the file has been read
        self._partial = b""  # the line being read, at most LINE_LIMIT + 1 bytes of it

    def read(self, *, final: bool = False, limit: int | None = None
             ) -> tuple[list[tuple[str, int]], bool]:
        """Lines now complete, and whether more is waiting. ``limit``: read no further
        than this offset; with ``final``, the last unterminated line comes too once
        everything up to it has been read."""
        want = READ_CHUNK if limit is None else max(0, min(READ_CHUNK, limit - self._position))
        chunk = b""
        if want:
            try:
                with self.path.open("rb") as file:
                    file.seek(self._position)
                    chunk = file.read(want)
            except FileNotFoundError:
                pass
        base, self._position = self._position, self._position + len(chunk)
        lines: list[tuple[str, int]] = []
        start = 0
        while (end := chunk.find(b"\n", start)) >= 0:
            lines.append((_cut(self._partial + chunk[start:min(end, start + LINE_LIMIT + 1)]),
                          base + end + 1))
            self._partial = b""
            start = end + 1
        self._partial = (self._partial + chunk[start:start + LINE_LIMIT + 1])[:LINE_LIMIT + 1]
        more = bool(want) and len(chunk) == want and (
            limit is None or self._position < limit)
        if final and not more and self._partial:
            lines.append((_cut(self._partial), self._position))
            self._partial = b""
        if lines:
            self.offset = lines[-1][1]
        return lines, more


def _cut(raw: bytes) -> str:
    if len(raw) > LINE_LIMIT:
        return decode_line(raw[:LINE_LIMIT]) + " [line cut]"
    return decode_line(raw)


def decode_line(raw: bytes) -> str:
    return raw.decode("utf-8", "replace").rstrip("\r")
