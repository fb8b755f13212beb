"""When a schedule runs: an interval, a cron expression or one time, in a timezone.

Times are Unix seconds; a schedule's timezone decides what "09:00" and "every
day" mean. Intervals of whole days keep the local time of day across
daylight-saving changes (a daily run at 09:00 stays at 09:00); shorter ones
are exact elapsed time. Cron expressions are evaluated by ``cronsim`` in the
schedule's zone, which, like Debian's cron, runs a time skipped by a
spring-forward once at the new time and a time repeated by a fall-back once.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Literal
from zoneinfo import ZoneInfo

from cronsim import CronSim, CronSimError

from gateway.config.timezones import check_zone
from gateway.errors import RefusedInput

Kind = Literal["every", "cron", "at"]

_INTERVAL = re.compile(r"(\d+)\s*([smhd])")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_CLOCK = re.compile(r"^([01]?\d|2[0-3]):([0-5]\d)$")
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


class ScheduleError(RefusedInput, ValueError):
    """A schedule that cannot be made; the message names the problem."""


#: the longest interval, and the furthest ahead a one-time run may be: past this a
#: time no longer fits the clock's range (an OverflowError, or errno 75 from the OS)
MAX_AHEAD_DAYS = 36_500
_MAX_AHEAD = MAX_AHEAD_DAYS * 86400
_LIMIT = f"{MAX_AHEAD_DAYS}d (100 years)"
_WALK_LIMIT = 200_000  # a cron time a minute for over four months
_KEEP_LIMIT = 10_000  # missed runs ever run at once


@dataclass(frozen=True, slots=True)
class Due:
    """Times that came due: their number, first and last, and the recent ones."""

    count: int
    first: float
    last: float
    kept: list[float]
    #: counting stopped at the walk limit; there were at least ``count``
    capped: bool


@dataclass(frozen=True, slots=True)
class Spec:
    kind: Kind
    #: as it is shown: "10m", "0 9 * * 1-5", or the one time in ISO form
    text: str
    timezone: str
    #: every: the first run's time, from which the interval counts
    anchor: float

    @property
    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.timezone)

    def next_after(self, t: float) -> float | None:
        """The first run strictly after ``t``; None when there is none (a one-shot)."""
        if self.kind == "at":
            return self.anchor if self.anchor > t else None
        if self.kind == "cron":
            return next(CronSim(self.text, datetime.fromtimestamp(t, self.zone))).timestamp()
        seconds = parse_interval(self.text)
        if t < self.anchor:
            return self.anchor
        if seconds % 86400 == 0:  # whole days: the same local time of day
            return self._next_local_day(t, seconds // 86400)
        steps = int((t - self.anchor) // seconds) + 1
        return self.anchor + steps * seconds

    def _next_local_day(self, t: float, days: int) -> float:
        start = datetime.fromtimestamp(self.anchor, self.zone)
        elapsed = (datetime.fromtimestamp(t, self.zone).date() - start.date()).days
        step = max(0, elapsed // days - 1)
        while True:
            candidate = _local(start.replace(tzinfo=None) + timedelta(days=step * days),
                               self.zone)
            if candidate > t:
                return candidate
            step += 1

    def occurrences(self, after: float, until: float, limit: int = 10_000) -> list[float]:
        """Runs in ``(after, until]``, oldest first (at most ``limit``)."""
        times: list[float] = []
        t = after
        while len(times) < limit:
            nxt = self.next_after(t)
            if nxt is None or nxt > until:
                break
            times.append(nxt)
            t = nxt
        return times

    def due(self, first: float, now: float, keep_since: float) -> Due:
        """The times from ``first`` (a run's time) up to ``now``: how many, the first and
        the last, and those since ``keep_since``. Exact elapsed intervals are counted,
        not walked, so a long downtime costs nothing; cron and whole days are walked
        (at most ``_WALK_LIMIT`` steps: call it off the event loop)."""
        if self.kind == "every" and (seconds := parse_interval(self.text)) % 86400:
            count = int((now - first) // seconds) + 1
            last = first + (count - 1) * seconds
            start = max(0, math.ceil((keep_since - first) / seconds))
            kept = [first + k * seconds for k in range(start, count)]
            return Due(count, first, last, kept[-_KEEP_LIMIT:], capped=False)
        count, last, kept, t = 1, first, [first] if first >= keep_since else [], first
        while count < _WALK_LIMIT:
            nxt = self.next_after(t)
            if nxt is None or nxt > now:
                break
            count, last, t = count + 1, nxt, nxt
            if nxt >= keep_since:
                kept.append(nxt)
        return Due(count, first, last, kept[-_KEEP_LIMIT:], capped=count >= _WALK_LIMIT)

    def describe(self) -> str:
        if self.kind == "every":
            return f"every {self.text}"
        if self.kind == "cron":
            return f"cron '{self.text}'"
        return f"once at {format_time(self.anchor, self.timezone)}"


def every(text: str, timezone: str, now: float, min_interval: float) -> Spec:
    seconds = parse_interval(text)
    if seconds < min_interval:
        raise ScheduleError(f"the interval {text} is shorter than the minimum of "
                            f"{_human(min_interval)} (schedules.min_interval_seconds)")
    zone = ZoneInfo(zone_name(timezone))
    if seconds % 86400 == 0:  # the same local time of day, even across a DST change
        wall = datetime.fromtimestamp(now, zone).replace(tzinfo=None)
        first = _local(wall + timedelta(days=seconds // 86400), zone)
    else:
        first = now + seconds
    return Spec("every", text.replace(" ", ""), timezone, first)


def cron(expr: str, timezone: str, now: float) -> Spec:
    expr = " ".join(expr.split())
    if len(expr.split()) != 5:
        raise ScheduleError(f"the cron expression '{expr}' must have five fields: "
                            f"minute hour day-of-month month day-of-week")
    zone = ZoneInfo(zone_name(timezone))
    try:
        next(CronSim(expr, datetime.fromtimestamp(now, zone)))
    except CronSimError as exc:
        raise ScheduleError(f"the cron expression '{expr}' is not valid: {exc}") from None
    except StopIteration:
        raise ScheduleError(f"the cron expression '{expr}' never matches") from None
    return Spec("cron", expr, timezone, now)


def at(text: str, timezone: str, now: float) -> Spec:
    """``18:30`` (today, or tomorrow once passed), ``2026-12-24 09:00``, or ``+20m``."""
    zone = ZoneInfo(zone_name(timezone))
    text = " ".join(text.split())
    if text.startswith("+"):
        when = now + parse_interval(text[1:])
    else:
        when = _parse_local(text, zone, now)
        if when <= now:
            raise ScheduleError(f"{text} ({timezone}) is in the past")
        if when > now + _MAX_AHEAD:
            raise ScheduleError(f"{text} ({timezone}) is out of range: at most {_LIMIT} "
                                f"ahead")
    return Spec("at", datetime.fromtimestamp(when, zone).isoformat(timespec="minutes"),
                timezone, when)


def _parse_local(text: str, zone: ZoneInfo, now: float) -> float:
    clock = _CLOCK.match(text)
    if clock:
        today = datetime.fromtimestamp(now, zone).replace(tzinfo=None)
        wall = today.replace(hour=int(clock[1]), minute=int(clock[2]), second=0, microsecond=0)
        # the first time ahead: today's (either of two, in the hour a fall-back repeats),
        # else tomorrow's
        for candidate in (_local(wall, zone), _local(wall, zone, fold=1),
                          _local(wall + timedelta(days=1), zone)):
            if candidate > now:
                return candidate
        return _local(wall + timedelta(days=1), zone)
    date, _, clock_text = text.partition(" ")
    clock = _CLOCK.match(clock_text or "00:00")
    if not _DATE.match(date) or not clock:
        raise ScheduleError(f"'{text}' is not a time: use HH:MM, YYYY-MM-DD HH:MM or +20m")
    try:
        day = datetime.strptime(date, "%Y-%m-%d")
    except ValueError:
        raise ScheduleError(f"'{date}' is not a date") from None
    return _local(day.replace(hour=int(clock[1]), minute=int(clock[2])), zone)


def parse_interval(text: str) -> int:
    """``30s``, ``10m``, ``2h``, ``1d``, ``1h30m`` → seconds."""
    compact = text.replace(" ", "").lower()
    parts = _INTERVAL.findall(compact)
    if not compact or "".join(n + u for n, u in parts) != compact:
        raise ScheduleError(f"'{_shown(text)}' is not an interval: use e.g. 30s, 10m, 2h, 1d "
                            f"or 1h30m")
    # a number too long for int() (over 4300 digits) is out of range all the same
    seconds = sum(int(n) * _UNITS[u] if len(n.lstrip("0")) <= 20 else _MAX_AHEAD + 1
                  for n, u in parts)
    if seconds <= 0:
        raise ScheduleError(f"the interval '{_shown(text)}' is zero")
    if seconds > _MAX_AHEAD:
        raise ScheduleError(f"the interval '{_shown(text)}' is out of range: at most {_LIMIT}")
    return seconds


def zone_name(name: str) -> str:
    """``name`` when it is a known IANA timezone; ScheduleError otherwise."""
    try:
        return check_zone(name)
    except ValueError as exc:
        raise ScheduleError(str(exc)) from None


def local_zone_name() -> str:
    """The machine's timezone as an IANA name (``TZ``, /etc/timezone, /etc/localtime)."""
    candidates = [os.environ.get("TZ", "").lstrip(":")]
    try:
        candidates.append(Path("/etc/timezone").read_text().strip())
    except OSError:
        pass
    try:
        target = os.readlink("/etc/localtime")
        candidates.append(target.split("zoneinfo/", 1)[1] if "zoneinfo/" in target else "")
    except OSError:
        pass
    for name in candidates:
        if name:
            try:
                return zone_name(name)
            except ScheduleError:
                continue
    return "UTC"


def format_time(t: float, timezone: str) -> str:
    """A run's time as a user reads it: local date and time, and the zone."""
    local = datetime.fromtimestamp(round(t), ZoneInfo(timezone))
    clock = f"{local:%H:%M}" if local.second == 0 else f"{local:%H:%M:%S}"
    return f"{local:%Y-%m-%d} {clock} {local.tzname()}"


def _local(wall: datetime, zone: ZoneInfo, *, fold: int = 0) -> float:
    """Unix time of a local wall-clock time: the earlier of two when a fall-back repeats
    it (``fold=1``: the later); one a spring-forward skips becomes the moment the clocks
    jump (as cron runs it: 02:30 on that night runs at 03:00)."""
    t = wall.replace(tzinfo=zone, fold=fold).timestamp()
    if datetime.fromtimestamp(t, zone).replace(tzinfo=None) == wall:
        return t
    # in the gap: the jump lies between the two readings of the missing time
    low, high = sorted((wall.replace(tzinfo=zone, fold=0).timestamp(),
                        wall.replace(tzinfo=zone, fold=1).timestamp()))
    while high - low > 1:
        middle = (low + high) // 2
        if datetime.fromtimestamp(middle, zone).utcoffset() == datetime.fromtimestamp(
                low, zone).utcoffset():
            low = middle
        else:
            high = middle
    return high


def _shown(text: str) -> str:
    """What the user wrote, as an error quotes it: not all of a 5,000-digit number."""
    return text if len(text) <= 40 else f"{text[:37]}…"


def _human(seconds: float) -> str:
    return f"{seconds:g} s" if seconds < 120 else f"{seconds / 60:g} min"
