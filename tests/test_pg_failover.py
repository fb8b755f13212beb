"""Two real daemons on one PostgreSQL store with the Telegram fake, the poller killed
with SIGKILL 20 times at random points (issue 21's acceptance; tests/failover_rounds.py
runs the rounds, bench/failover.py times the takeovers).

Another life takes over polling after each kill; whichever instance runs a job reports
its end, and a job whose instance died is reported by a survivor. At the end every
message has been answered in its topic, every job ran once and its end was told in its
topic, and nothing was sent anywhere else.

One thing no platform lets us check: a send that went out before the kill, whose record
had not committed. After the crash it goes out again — the outbox's rule and the
journal's. So a second copy is allowed only as that: the first sent before a kill (by
then the record could still be waiting, on a loaded machine, for about a lease), the
second after it. Any other repeat, a third copy, or a copy elsewhere fails the test.

"Before the kill" is as the fake saw it, and the fake shares this test's event loop: a
request the killed process had already written is read by the fake only after the kill
was noted, so its copy may come up to ``IN_FLIGHT`` after the kill. No survivor can send
that early (the lease, renewed every third of a lease, has about two thirds left to run),
so the allowance does not cover a survivor's double take.

A job whose instance was killed between registering it and spawning it never ran; its
end is told as "did not start", which is an end as good as its exit.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tests.failover_rounds import TOPICS, Rounds, kill_the_poller
from tests.fakes.telegram_server import SentRecord

ROUNDS = 20
#: a lease a loaded machine can renew: at 1 s (the bench's), with two other programs
#: busy on two cores, every life was fenced within a second of its start and none polled
LEASE_SECONDS = 2.0
#: how long before a kill a send may still have been waiting for its record
RECORD_WINDOW = 3 * LEASE_SECONDS
#: how long after a kill the fake may still read a request the killed process had sent
IN_FLIGHT = LEASE_SECONDS / 2
#: the ends a job's notice may tell: its exit, its instance gone, or never started
ENDS = ("stopped answering", "did not start: the gateway stopped while starting it")


@pytest.mark.timeout(420)
async def test_the_poller_killed_20_times_loses_and_doubles_nothing(
        tmp_path: Path, pg_fresh_url: str) -> None:
    seed = int(os.environ.get("HOMING_FAILOVER_SEED", time.time()))
    rounds = await kill_the_poller(tmp_path, pg_fresh_url, ROUNDS, seed, LEASE_SECONDS)
    where = (f"(seed {seed}; HOMING_FAILOVER_SEED repeats the run; ended by a stall and "
             f"started again: {rounds.self_ended or 'none'})")
    sent = rounds.sent
    for marker, topic in rounds.chatter.items():  # every message answered, in its topic
        answers = [s for s in sent if s.text.startswith(f"Received: hello {marker}\n")]
        assert answers, f"hello {marker} was never answered {where}"
        assert {s.message_thread_id for s in answers} == {topic}, where
        _at_most_a_crash_repeat(answers, rounds, f"hello {marker} {where}")
    for marker, topic in rounds.started.items():  # every job once, its end told once
        assert len(rounds.jobs.get(marker, [])) == 1, (
            f"job {marker}: {rounds.jobs.get(marker)} {where}")
        (job_id,) = rounds.jobs[marker]
        notices = [s for s in sent if s.text.startswith(f"Job {job_id} ")]
        assert notices, f"job {job_id} ({marker}) was never reported {where}"
        assert {s.message_thread_id for s in notices} == {topic}, where
        _at_most_a_crash_repeat(notices, rounds, f"job {job_id} {where}")
        told = notices[0].text
        assert (f"done-{marker}" in told and "finished: exit code 0" in told) or any(
            end in told for end in ENDS), told
    assert not [s for s in sent if s.message_thread_id not in (*TOPICS, None)], where
    assert len(rounds.takeovers) == ROUNDS  # polling moved on after every kill


def _at_most_a_crash_repeat(copies: list[SentRecord], rounds: Rounds, what: str) -> None:
    """One copy; two only when a kill fell between them, soon after the first (or the
    first was still on its way to the fake when the kill came)."""
    by_text: dict[str, list[float]] = {}
    for s in copies:
        by_text.setdefault(s.text, []).append(s.at)
    for times in by_text.values():
        if len(times) == 1:
            continue
        first, second, *more = sorted(times)
        between = [k for k in rounds.kills
                   if first - IN_FLIGHT <= k <= min(second, first + RECORD_WINDOW)]
        nearest = min(rounds.kills, key=lambda k: abs(k - first), default=None)
        assert not more and between, (
            f"{what}: sent {len(times)} times, {second - first:.2f} s apart; the nearest "
            f"kill {'none' if nearest is None else f'{nearest - first:+.2f} s'} from the first")
