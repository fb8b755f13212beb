"""Watch pattern rate limits, with a clock the test controls."""

from __future__ import annotations

from gateway.config.settings import parse_config
from tools.watch import GlobalBreaker, JobWatch, WatchLimits, compile_patterns


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def watch(clock: Clock, breaker: GlobalBreaker | None = None, **limits: float) -> JobWatch:
    return JobWatch(compile_patterns(["ERROR"]), WatchLimits(**limits),
                    breaker or GlobalBreaker(1000, clock), clock=clock)


def test_cooldown_counts_what_it_holds_back_into_the_next_notice() -> None:
    clock = Clock()
    w = watch(clock, cooldown_seconds=2, max_notices=10, max_lines=3)
    first = w.feed("ERROR one")
    assert first is not None and first.lines == ("ERROR one",) and first.suppressed == 0
    for i in range(5):
        clock.now += 0.1
        assert w.feed(f"ERROR held {i}") is None
    assert w.feed("all fine") is None
    clock.now = 2.5
    second = w.feed("ERROR two")
    assert second is not None and second.suppressed == 5
    assert second.lines == ("ERROR held 3", "ERROR held 4", "ERROR two")  # bounded


def test_past_the_cap_the_watch_disables_itself_once() -> None:
    clock = Clock()
    w = watch(clock, cooldown_seconds=0, max_notices=2)
    kinds = []
    for i in range(10):
        notice = w.feed(f"ERROR {i}")
        if notice:
            kinds.append(notice.kind)
    assert kinds == ["watch_match", "watch_match", "watch_disabled"]
    assert w.disabled


def test_the_global_breaker_stops_a_flood_across_jobs() -> None:
    clock = Clock()
    breaker = GlobalBreaker(5, clock)
    jobs = [watch(clock, breaker, cooldown_seconds=0, max_notices=100) for _ in range(10)]
    sent = sum(1 for w in jobs for i in range(3) if w.feed(f"ERROR {i}"))
    assert sent == 5
    clock.now = 61
    assert jobs[0].feed("ERROR later") is not None


def test_watch_defaults_are_configurable() -> None:
    config = parse_config({"jobs": {"watch": {"cooldown_seconds": 1, "max_notices": 2}}}, {})
    assert (config.jobs.watch.cooldown_seconds, config.jobs.watch.max_notices) == (1, 2)
    assert config.jobs.watch.global_max_per_minute == 30


def test_a_bad_pattern_is_named() -> None:
    try:
        compile_patterns(["ok", "(unclosed"])
    except ValueError as exc:
        assert "(unclosed" in str(exc)
    else:
        raise AssertionError("bad pattern accepted")


def test_what_the_cooldown_holds_is_handed_over_at_the_end() -> None:
    clock = Clock()
    w = watch(clock, cooldown_seconds=10, max_notices=10)
    assert w.feed("ERROR one") is not None
    assert w.feed("ERROR two") is None
    held = w.finish()
    assert held is not None and held.lines == ("ERROR two",)
    assert w.finish() is None  # handed over once


def test_the_breaker_counts_end_of_job_flushes_and_what_it_drops_is_counted() -> None:
    clock = Clock()
    breaker = GlobalBreaker(3, clock)
    jobs = [watch(clock, breaker, cooldown_seconds=10, max_notices=100) for _ in range(3)]
    for w in jobs:  # each job: one notice at once, two lines held by its cooldown
        assert w.feed("ERROR first") is not None
        assert w.feed("ERROR second") is None
        assert w.feed("ERROR third") is None
    flushed = [w.finish() for w in jobs]  # the cap (3 a minute) is already used up
    assert flushed == [None, None, None]
    assert [w.dropped for w in jobs] == [2, 2, 2]


def test_a_disable_notice_counts_against_the_breaker_too() -> None:
    clock = Clock()
    breaker = GlobalBreaker(2, clock)
    w = watch(clock, breaker, cooldown_seconds=0, max_notices=2)
    assert [w.feed(f"ERROR {i}") is not None for i in range(3)] == [True, True, False]
    assert w.disabled and w.dropped == 1


def test_a_catastrophic_pattern_matches_in_linear_time() -> None:
    # a backtracking engine takes over 10 s for 28 a's and doubles with each one more
    w = JobWatch(compile_patterns(["(a+)+$"]), WatchLimits(cooldown_seconds=0),
                 GlobalBreaker(1000, Clock()), clock=Clock())
    assert w.feed("a" * 100_000 + "b") is None
    assert w.feed("a" * 100_000) is not None


def test_patterns_the_re2_engine_cannot_run_are_refused_with_the_reason() -> None:
    try:
        compile_patterns([r"(a)\1"])
    except ValueError as exc:
        assert "RE2" in str(exc) and "backreferences" in str(exc)
    else:
        raise AssertionError("a backreference was accepted")
