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

from .config import InboundConfig
from .inbound import JournalEntry

#: skipped messages of one conversation arriving this close together share one note
_NOTE_GATHER_SECONDS = 0.5
_PREVIEW = 60


class Intake:
    def __init__(self, settings: InboundConfig,
                 tell: Callable[[JournalEntry, str], Awaitable[None]],
                 clock: Callable[[], float] = time.time) -> None:
        self.settings = settings
        self._tell = tell  # posts a system line in the entry's conversation
        self._clock = clock
        self._skipped: dict[str, list[JournalEntry]] = {}

    def too_old(self, entry: JournalEntry) -> bool:
        return self._clock() - entry.sent_at > self.settings.max_age_seconds

    def late_note(self, entry: JournalEntry) -> str | None:
        if self._clock() - entry.sent_at <= self.settings.late_after_seconds:
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
        minutes = self.settings.max_age_seconds / 60
        listed = "; ".join(f"“{_preview(e.event.text)}” (sent {_clock_time(e.sent_at)})"
                           for e in entries)
        count = f"{len(entries)} message{'s' if len(entries) != 1 else ''}"
        await self._tell(entries[-1], f"{count} sent while the gateway was away "
                                      f"{'were' if len(entries) != 1 else 'was'} not run: "
                                      f"older than {minutes:g} min (inbound.max_age_seconds). "
                                      f"{listed}. Send again what is still wanted.")


def _preview(text: str) -> str:
    one_line = " ".join(text.split())
    return one_line if len(one_line) <= _PREVIEW else one_line[:_PREVIEW - 1] + "…"


def _clock_time(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(t))
