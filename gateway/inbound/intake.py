"""What happens to a journaled message before its turn: too old to run, or late.

A message older than ``inbound.max_age_seconds`` is not run — a ``/bg
./deploy.sh`` from last night must not run this morning — and its
conversation is told once, in one note, which messages were skipped and why.
One handled more than ``inbound.late_after_seconds`` after it was sent is
answered with a short note that it came while the gateway was away.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import structlog

from gateway.config.settings import InboundConfig
from gateway.inbound.journal import JournalEntry

log = structlog.get_logger(__name__)

#: skipped messages of one conversation arriving this close together share one note
_NOTE_GATHER_SECONDS = 0.5
_PREVIEW = 60


class Intake:
    def __init__(self, settings: InboundConfig,
                 tell: Callable[[JournalEntry, str], Awaitable[None]],
                 told: Callable[[list[JournalEntry]], None],
                 clock: Callable[[], float] = time.time) -> None:
        self.settings = settings
        self._tell = tell  # posts a system line in the entry's conversation, in its lane
        self._told = told  # records the entries as skipped: only once their note went out
        self._clock = clock
        self._skipped: dict[str, list[JournalEntry]] = {}

    def away(self, entry: JournalEntry, *, replayed: bool) -> float:
        """How long the message waited for a gateway: until it was journaled — or, taken
        in by a process that stopped, until now. Time spent queued behind this
        conversation's earlier turns is not the gateway being away."""
        until = self._clock() if replayed else entry.received_at
        return until - entry.sent_at

    def too_old(self, entry: JournalEntry, *, replayed: bool = False) -> bool:
        return self.away(entry, replayed=replayed) > self.settings.max_age_seconds

    def late_note(self, entry: JournalEntry, *, replayed: bool = False) -> str | None:
        if self.away(entry, replayed=replayed) <= self.settings.late_after_seconds:
            return None
        return (f"(This message was sent at {_clock_time(entry.sent_at)}, while the gateway "
                f"was away; answering it now.)")

    def skip(self, entry: JournalEntry) -> None:
        """Note ``entry`` as not run; its conversation hears of it (and of any other
        skipped together with it) once."""
        waiting = self._skipped.setdefault(entry.session_key, [])
        waiting.append(entry)
        if len(waiting) == 1:
            asyncio.get_running_loop().call_later(
                _NOTE_GATHER_SECONDS,
                lambda: asyncio.ensure_future(self._tell_skipped(entry.session_key)))

    async def _tell_skipped(self, session_key: str) -> None:
        entries = self._skipped.pop(session_key, [])
        if not entries:
            return
        try:
            await self._tell(entries[-1], self._skip_text(entries))
        except Exception:  # they stay unfinished: the next start tells again
            log.exception("skip_note_failed", session_key=session_key)
            return
        self._told(entries)

    def _skip_text(self, entries: list[JournalEntry]) -> str:
        listed = "; ".join(f"“{_preview(e.event.text)}” (sent {_clock_time(e.sent_at)})"
                           for e in entries)
        count = f"{len(entries)} message{'s' if len(entries) != 1 else ''}"
        return (f"{count} sent while the gateway was away "
                f"{'were' if len(entries) != 1 else 'was'} not run: older than "
                f"{_duration(self.settings.max_age_seconds)} (inbound.max_age_seconds). "
                f"{listed}. Send again what is still wanted.")


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:g} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _preview(text: str) -> str:
    one_line = " ".join(text.split())
    return one_line if len(one_line) <= _PREVIEW else one_line[:_PREVIEW - 1] + "…"


def _clock_time(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(t))
