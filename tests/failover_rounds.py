"""Two real daemons on one PostgreSQL store with the Telegram fake, and the instance
polling Telegram killed with SIGKILL round after round, at random points of its work.
For tests/test_pg_failover.py (which checks what users saw) and bench/failover.py (which
prints how fast polling moved on).

Each round, messages go into three topics of a forum — chatter, and a ``/bg`` job —
then the instance holding the Telegram lease is killed and started again under its
name, as systemd would.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import random
import signal
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from tests.fakes.telegram_server import FakeTelegram, SentRecord
from tests.helpers import eventually_async
from tests.real_daemon import home_env, start_daemon

ALICE, FORUM = 1, -1001
TOPICS = (42, 17, 5)
NAMES = ("vps1", "vps2")
#: the bench's settings (bench/failover.py measures the takeover against them)
LEASE_SECONDS, FAILOVER_SECONDS = 1.0, 3.0


@dataclass
class Rounds:
    """What the rounds did and what the fake saw."""

    seed: int
    chatter: dict[str, int] = field(default_factory=dict)  # marker: topic
    started: dict[str, int] = field(default_factory=dict)  # job marker: topic
    kills: list[float] = field(default_factory=list)  # time.monotonic()
    #: seconds from a kill until another life held the Telegram lease
    takeovers: list[float] = field(default_factory=list)
    sent: list[SentRecord] = field(default_factory=list)
    jobs: dict[str, list[str]] = field(default_factory=dict)  # job marker: job ids
    #: daemons that ended by themselves (a stall fenced them) and were started again
    self_ended: list[str] = field(default_factory=list)


def instance_env(home: Path, fake: FakeTelegram, url: str, name: str,
                 lease_seconds: float = LEASE_SECONDS) -> dict[str, str]:
    home.mkdir()
    (home / "config.yaml").write_text(
        f"store: {{url: '{url}'}}\n"
        f"instance: {{name: {name}}}\n"
        f"cluster: {{lease_seconds: {lease_seconds}, "
        f"failover_seconds: {lease_seconds * FAILOVER_SECONDS / LEASE_SECONDS}}}\n"
        "platforms:\n  web: {port: 0}\n"
        f"  telegram: {{enabled: true, token: '{fake.token}', base_url: '{fake.base_url}', "
        f"base_file_url: '{fake.base_file_url}', allowed_users: ['{ALICE}'], "
        "messages_per_second: 1000, group_messages_per_minute: 1000}\n")
    return home_env(home)


async def kill_the_poller(root: Path, url: str, rounds: int, seed: int,
                          lease_seconds: float = LEASE_SECONDS, *,
                          names: tuple[str, ...] = NAMES, any_instance: bool = False
                          ) -> Rounds:
    """Run ``rounds`` rounds, then wait until nothing is left to do. ``any_instance``:
    each round kills one of ``names`` at random, the poller or not (bench/chaos.py)."""
    rng = random.Random(seed)
    result = Rounds(seed)
    async with FakeTelegram() as fake:
        envs = {name: instance_env(root / name, fake, url, name, lease_seconds)
                for name in names}
        procs = {name: (await start_daemon(env))[0] for name, env in envs.items()}

        async def restart_ended() -> None:
            """systemd's Restart=on-failure: an instance fenced by a stall (a busy
            machine) exits 1 and is started again."""
            for other, proc in procs.items():
                if proc.returncode is not None:
                    result.self_ended.append(other)
                    procs[other] = (await start_daemon(envs[other]))[0]

        async def poller(not_this: tuple[str, int] | None = None) -> tuple[str, int] | None:
            await restart_ended()  # both may have been fenced while the test waits
            return await _holder(url, not_this)

        try:
            held_by = await eventually_async(poller, timeout=60, what="a first poller")
            for round_ in range(rounds):
                _say_three(fake, rng, result, f"r{round_}")
                await asyncio.sleep(rng.uniform(0, 0.8))  # a random point of its work
                await restart_ended()
                name = rng.choice(names) if any_instance else held_by[0]
                procs[name].send_signal(signal.SIGKILL)
                result.kills.append(time.monotonic())
                await procs[name].wait()
                procs[name] = (await start_daemon(envs[name]))[0]  # systemd's restart
                gone = held_by if name == held_by[0] else None
                held_by = await eventually_async(lambda old=gone: poller(old),
                                                 timeout=60, what=f"a poller after {round_}")
                if gone is not None:
                    result.takeovers.append(time.monotonic() - result.kills[-1])
            async def acknowledged() -> bool:
                await restart_ended()
                return not fake.pending_updates

            async def finished() -> bool:
                await restart_ended()
                return await _nothing_left(url)

            await eventually_async(acknowledged, timeout=60, what="every update acknowledged")
            await eventually_async(finished, timeout=90,
                                   what="every message finished and every notice delivered")
            result.sent = list(fake.sent)
            result.jobs = await _jobs_by_marker(url)
        finally:
            for proc in procs.values():
                if proc.returncode is None:
                    proc.terminate()
                    await proc.wait()
    return result


async def _holder(url: str, not_this: tuple[str, int] | None = None
                  ) -> tuple[str, int] | None:
    """(instance, its epoch) holding the Telegram lease now by the store's clock, when
    it is not the tenure ``not_this`` (the one just killed)."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        row = await (await conn.execute(
            "SELECT holder, holder_epoch FROM leases WHERE name LIKE 'telegram:%' "
            "AND holder IS NOT NULL "
            "AND expires_at >= EXTRACT(EPOCH FROM clock_timestamp())")).fetchone()
    held = (str(row[0]), int(row[1])) if row else None
    return held if held != not_this else None


async def _nothing_left(url: str) -> bool:
    """No notice waiting, no job running, no message unfinished — in one statement, so
    in one snapshot: counted one by one, a job that ends between two counts has left
    "running" and its notice was not yet there when the notices were counted."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        row = await (await conn.execute(
            "SELECT (SELECT COUNT(*) FROM notifications WHERE state IN ('pending', 'claimed'))"
            " + (SELECT COUNT(*) FROM jobs WHERE state = 'running')"
            " + (SELECT COUNT(*) FROM inbound WHERE state IN "
            "('received', 'started', 'acted', 'replied'))")).fetchone()
    return row is not None and row[0] == 0


async def _jobs_by_marker(url: str) -> dict[str, list[str]]:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        rows = await (await conn.execute("SELECT id, command FROM jobs")).fetchall()
    found: dict[str, list[str]] = {}
    for job_id, command in rows:
        found.setdefault(command.rsplit("done-", 1)[1], []).append(job_id)
    return found


# chaos: by the clock, with the store going away once (bench/chaos.py) -------------------

@dataclass
class Chaos(Rounds):
    """What a run of :func:`chaos` did and saw, beside what :class:`Rounds` holds."""

    #: (instance, seconds into the run) of each exit nobody asked for: a self-fencing
    fencings: list[tuple[str, float]] = field(default_factory=list)
    #: seconds from the store coming back until an instance polled Telegram again
    outage_recovery: float | None = None
    #: seconds from the last kill until every update was handled and every notice out
    drained_after: float | None = None
    pending_notices: int = 0
    unhandled_updates: int = 0  # not acknowledged by the poller, or journaled and unfinished
    seconds: float = 0.0
    #: why the instances' logs say they fenced themselves: reason -> times
    fenced_because: dict[str, int] = field(default_factory=dict)


async def chaos(root: Path, url: str, seconds: float, seed: int,
                outage: Callable[[], Awaitable[None]] | None = None, *,
                names: tuple[str, ...] = NAMES, lease_seconds: float = LEASE_SECONDS,
                kill_every: tuple[float, float] = (5.0, 15.0), settle: float = 120.0
                ) -> Chaos:
    """``names`` run on ``url`` for ``seconds`` while a person writes in a forum's
    topics (three messages, one a ``/bg`` job, every 1-3 s), one of them killed with
    SIGKILL every ``kill_every`` seconds (the poller or not) and started again at once;
    an instance that exits by itself (fenced) is started again too, as systemd would.
    Halfway through, ``outage()`` takes the store away and back (its own duration).
    Then the writing stops and the run waits up to ``settle`` seconds for the backlog."""
    rng = random.Random(seed)
    result = Chaos(seed)
    began = time.monotonic()
    async with FakeTelegram() as fake:
        envs = {name: instance_env(root / name, fake, url, name, lease_seconds)
                for name in names}
        procs: dict[str, asyncio.subprocess.Process] = {}
        turns = {name: asyncio.Lock() for name in names}  # a kill and a restart, not both
        holder: list[tuple[str, int] | None] = [None]  # the poller, as last seen
        seen = asyncio.Condition()  # told at each look at the poller

        async def polled_by_other_than(than: tuple[str, int] | None) -> None:
            async with seen:
                await seen.wait_for(lambda: holder[0] is not None and holder[0] != than)

        async def start(name: str) -> None:
            """Start ``name`` until it listens (it exits while the store is away)."""
            while True:
                try:
                    procs[name] = (await start_daemon(envs[name]))[0]
                    return
                except (AssertionError, TimeoutError, OSError, ValueError):  # exited early
                    await asyncio.sleep(0.5)

        async def supervise() -> None:
            while True:
                for name in names:
                    proc = procs.get(name)
                    if proc is None or proc.returncode is None:
                        continue
                    async with turns[name]:
                        if procs[name].returncode is None:  # a kill restarted it meanwhile
                            continue
                        result.fencings.append((name, time.monotonic() - began))
                        await start(name)
                await asyncio.sleep(0.1)

        async def watch_poller() -> None:
            conn: psycopg.AsyncConnection[Any] | None = None
            while True:
                try:
                    if conn is None or conn.closed or conn.broken:
                        conn = await psycopg.AsyncConnection.connect(url, autocommit=True,
                                                                     connect_timeout=2)
                    now = await _holder_on(conn)
                except (psycopg.Error, OSError):
                    conn, now = None, None
                async with seen:
                    holder[0] = now
                    seen.notify_all()
                await asyncio.sleep(0.05)

        async def write() -> None:
            for n in itertools.count():
                _say_three(fake, rng, result, f"c{n}")
                await asyncio.sleep(rng.uniform(1.0, 3.0))

        async def take_the_store_away() -> None:
            assert outage is not None
            await asyncio.sleep(seconds / 2)
            polling = holder[0]
            await outage()
            back = time.monotonic()
            await polled_by_other_than(polling)
            result.outage_recovery = time.monotonic() - back

        async def takeover(killed: tuple[str, int], at: float) -> None:
            await polled_by_other_than(killed)
            result.takeovers.append(time.monotonic() - at)

        for name in names:
            await start(name)
        tasks = [asyncio.create_task(supervise()), asyncio.create_task(watch_poller())]
        try:
            with contextlib.suppress(TimeoutError):  # (counted as it goes on: no poller yet)
                await asyncio.wait_for(polled_by_other_than(None), 60)
            writing = asyncio.create_task(write())
            tasks.append(writing)
            if outage is not None:
                tasks.append(asyncio.create_task(take_the_store_away()))
            takeovers: list[asyncio.Task[None]] = []
            while time.monotonic() - began < seconds:
                await asyncio.sleep(rng.uniform(*kill_every))
                name = rng.choice(names)
                async with turns[name]:
                    polling = holder[0]
                    with contextlib.suppress(ProcessLookupError):  # (gone by itself)
                        procs[name].send_signal(signal.SIGKILL)
                    killed_at = time.monotonic()
                    if await procs[name].wait() != -signal.SIGKILL:  # it had ended by itself
                        result.fencings.append((name, killed_at - began))
                        await start(name)
                        continue
                    result.kills.append(killed_at)
                    if polling is not None and polling[0] == name:
                        takeovers.append(asyncio.create_task(
                            takeover(polling, result.kills[-1])))
                    await start(name)
            writing.cancel()  # the person stops writing
            last_kill = result.kills[-1] if result.kills else time.monotonic()

            async def drained() -> bool:
                return not fake.pending_updates and await _nothing_left(url)

            try:
                await eventually_async(drained, timeout=settle, what="the backlog drained")
                result.drained_after = time.monotonic() - last_kill
            except AssertionError:
                pass
            for waiting in takeovers:
                waiting.cancel()
            result.pending_notices, unfinished = await _backlog(url)
            result.unhandled_updates = len(fake.pending_updates) + unfinished
            result.sent = list(fake.sent)
            result.jobs = await _jobs_by_marker(url)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            for proc in procs.values():
                if proc.returncode is None:
                    proc.terminate()
                    await proc.wait()
    result.seconds = time.monotonic() - began
    for log in sorted(root.glob("*/logs/homing.log*")):
        for line in log.read_text(errors="replace").splitlines():
            if '"instance_fenced"' in line:
                reason = str(json.loads(line).get("reason", "?"))
                result.fenced_because[reason] = result.fenced_because.get(reason, 0) + 1
    return result


async def _holder_on(conn: psycopg.AsyncConnection[Any]) -> tuple[str, int] | None:
    row = await (await conn.execute(
        "SELECT holder, holder_epoch FROM leases WHERE name LIKE 'telegram:%' "
        "AND holder IS NOT NULL "
        "AND expires_at >= EXTRACT(EPOCH FROM clock_timestamp())")).fetchone()
    return (str(row[0]), int(row[1])) if row else None


async def _backlog(url: str) -> tuple[int, int]:
    """(notices pending or claimed, journaled messages not finished)."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        row = await (await conn.execute(
            "SELECT (SELECT COUNT(*) FROM notifications WHERE state IN ('pending', 'claimed')),"
            " (SELECT COUNT(*) FROM inbound WHERE state IN "
            "('received', 'started', 'acted', 'replied'))")).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def _say_three(fake: FakeTelegram, rng: random.Random, result: Rounds, prefix: str) -> None:
    """A round's writing: a job started in a random topic, then two pings, each marked
    ``<prefix>m<i>`` and noted where it was said (``result.started`` / ``chatter``)."""
    for i in range(3):
        topic, marker = rng.choice(TOPICS), f"{prefix}m{i}"
        if i == 0:
            result.started[marker] = topic
            text = f"/bg sleep {rng.uniform(0, 1.5):.2f}; echo done-{marker}"
        else:
            result.chatter[marker] = topic
            text = f"hello {marker}"
        fake.user_message(chat_id=FORUM, chat_type="supergroup", is_forum=True,
                          thread_id=topic, is_topic_message=True, text=text)
