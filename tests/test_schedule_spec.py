"""When schedules run: intervals, cron and one-shot times, across daylight-saving changes
(no test waits: every time is computed from a given "now")."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

import pytest

import tools.schedule_spec as schedule_spec
from tools.schedule_spec import ScheduleError

BERLIN = "Europe/Berlin"


def at(text: str, zone: str = BERLIN) -> float:
    """Unix time of a local wall-clock time."""
    return datetime.fromisoformat(text).replace(tzinfo=ZoneInfo(zone)).timestamp()


def local(t: float, zone: str = BERLIN) -> str:
    return datetime.fromtimestamp(t, ZoneInfo(zone)).strftime("%Y-%m-%d %H:%M %Z")


@pytest.mark.parametrize(("text", "seconds"), [
    ("30s", 30), ("10m", 600), ("2h", 7200), ("1d", 86400), ("1h30m", 5400), ("1H 30M", 5400)])
def test_intervals_read_as_users_write_them(text: str, seconds: int) -> None:
    assert schedule_spec.parse_interval(text) == seconds


@pytest.mark.parametrize("text", ["10x", "", "m10", "0m", "ten minutes", "1.5h"])
def test_an_interval_that_is_not_one_says_how_to_write_it(text: str) -> None:
    with pytest.raises(ScheduleError, match="interval"):
        schedule_spec.parse_interval(text)


def test_an_interval_under_the_minimum_is_refused_naming_the_setting() -> None:
    with pytest.raises(ScheduleError, match="schedules.min_interval_seconds"):
        schedule_spec.every("30s", "UTC", 0, min_interval=60)


def test_every_counts_from_its_start_and_catches_up_without_drifting() -> None:
    spec = schedule_spec.every("10m", "UTC", 1000.0, min_interval=60)
    assert spec.next_after(1000.0) == 1600.0
    assert spec.next_after(1600.0) == 2200.0
    assert spec.next_after(2199.9) == 2200.0
    assert spec.occurrences(1000.0, 3400.0) == [1600.0, 2200.0, 2800.0, 3400.0]


def test_a_daily_run_keeps_its_local_time_across_both_dst_changes() -> None:
    spec = schedule_spec.every("1d", BERLIN, at("2026-03-27T09:00"), min_interval=60)
    spring = spec.occurrences(at("2026-03-27T09:00"), at("2026-03-31T10:00"))
    assert [local(t) for t in spring] == [
        "2026-03-28 09:00 CET", "2026-03-29 09:00 CEST", "2026-03-30 09:00 CEST",
        "2026-03-31 09:00 CEST"]
    assert spring[2] - spring[1] == 86400 and spring[1] - spring[0] == 82800  # 23 h
    autumn = spec.occurrences(at("2026-10-23T10:00"), at("2026-10-27T10:00"))
    assert [local(t) for t in autumn] == [
        "2026-10-24 09:00 CEST", "2026-10-25 09:00 CET", "2026-10-26 09:00 CET",
        "2026-10-27 09:00 CET"]


def test_an_hourly_run_is_exact_elapsed_time_over_a_dst_change() -> None:
    spec = schedule_spec.every("1h", BERLIN, at("2026-03-29T00:30"), min_interval=60)
    times = spec.occurrences(at("2026-03-29T00:30"), at("2026-03-29T04:30"))
    assert [local(t) for t in times] == ["2026-03-29 01:30 CET", "2026-03-29 03:30 CEST",
                                         "2026-03-29 04:30 CEST"]


def test_a_daily_cron_neither_skips_nor_doubles_over_dst_changes() -> None:
    spec = schedule_spec.cron("30 2 * * *", BERLIN, at("2026-03-27T12:00"))
    # 02:30 does not exist on 29 March: it runs once, at 03:00
    spring = spec.occurrences(at("2026-03-27T12:00"), at("2026-03-31T12:00"))
    assert [local(t) for t in spring] == [
        "2026-03-28 02:30 CET", "2026-03-29 03:00 CEST", "2026-03-30 02:30 CEST",
        "2026-03-31 02:30 CEST"]
    # 02:30 happens twice on 25 October: it runs once
    autumn = spec.occurrences(at("2026-10-24T12:00"), at("2026-10-26T12:00"))
    assert len(autumn) == 2 and local(autumn[0]).startswith("2026-10-25 02:30")


def test_a_weekday_cron_skips_the_weekend() -> None:
    spec = schedule_spec.cron("0 9 * * 1-5", BERLIN, at("2026-12-04T10:00"))  # a Friday
    assert local(spec.next_after(at("2026-12-04T10:00"))) == "2026-12-07 09:00 CET"  # Monday


@pytest.mark.parametrize(("expr", "problem"), [
    ("61 * * * *", "not valid"), ("* * *", "five fields"), ("0 9 * * mon-fri 2026", "five fields"),
    ("0 25 * * *", "not valid")])
def test_a_bad_cron_expression_is_named(expr: str, problem: str) -> None:
    with pytest.raises(ScheduleError, match=problem) as exc:
        schedule_spec.cron(expr, "UTC", 0)
    assert " ".join(expr.split()) in str(exc.value)


def test_one_shot_times() -> None:
    now = at("2026-12-01T12:00")
    assert local(schedule_spec.at("18:30", BERLIN, now).anchor) == "2026-12-01 18:30 CET"
    assert local(schedule_spec.at("09:00", BERLIN, now).anchor) == "2026-12-02 09:00 CET"
    assert local(schedule_spec.at("2026-12-24 09:00", BERLIN, now).anchor) == (
        "2026-12-24 09:00 CET")
    assert schedule_spec.at("+20m", BERLIN, now).anchor == now + 1200
    once = schedule_spec.at("+20m", BERLIN, now)
    assert once.next_after(now) == now + 1200 and once.next_after(now + 1200) is None


@pytest.mark.parametrize(("text", "problem"), [
    ("2026-11-30 09:00", "in the past"), ("25:00", "not a time"), ("tomorrow", "not a time"),
    ("2026-02-30 09:00", "not a date"), ("+0m", "zero")])
def test_a_bad_one_shot_time_is_named(text: str, problem: str) -> None:
    with pytest.raises(ScheduleError, match=problem):
        schedule_spec.at(text, BERLIN, at("2026-12-01T12:00"))


@pytest.mark.parametrize("make", [
    lambda: schedule_spec.every("99999999999d", "UTC", 0, min_interval=60),
    lambda: schedule_spec.every("36501d", "UTC", 0, min_interval=60),
    lambda: schedule_spec.every("1" * 5000 + "s", "UTC", 0, min_interval=60),
    lambda: schedule_spec.at("+99999999999999d", BERLIN, at("2026-12-01T12:00")),
    lambda: schedule_spec.at("9999-12-31 23:59", BERLIN, at("2026-12-01T12:00")),
])
def test_a_time_past_100_years_is_out_of_range_with_the_limit(make: Any) -> None:
    with pytest.raises(ScheduleError, match=r"out of range: at most 36500d \(100 years\)"):
        make()


def test_the_longest_interval_and_the_furthest_time_are_taken() -> None:
    now = at("2026-12-01T12:00")
    assert schedule_spec.every("36500d", BERLIN, now, min_interval=60).next_after(now) == (
        at("2126-11-07T12:00"))
    assert schedule_spec.at("+36500d", BERLIN, now).anchor == now + 36500 * 86400


def test_an_unknown_timezone_is_named() -> None:
    with pytest.raises(ScheduleError, match="unknown timezone 'Mars/Olympus'"):
        schedule_spec.every("1h", "Mars/Olympus", 0, min_interval=60)
    with pytest.raises(ScheduleError, match="unknown timezone"):
        schedule_spec.cron("0 9 * * *", "Nowhere", 0)


def test_the_machine_zone_is_an_iana_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    assert schedule_spec.local_zone_name() == "Asia/Tokyo"
    monkeypatch.setenv("TZ", "Not/AZone")
    assert ZoneInfo(schedule_spec.local_zone_name())  # falls back to the system's, or UTC
