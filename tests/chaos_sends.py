"""One real daemon on SQLite, killed with SIGKILL every few seconds and started again at
once (as systemd would), while a person writes in Telegram forum topics, Discord
threads and web tabs: pings the command agent answers, ``/bg`` jobs (some ending at the
same second, so several notices of one conversation wait at once) and ``/watch`` jobs
whose lines match. For bench/chaos_sends.py, which prints what it counts.

Everything the person says carries a marker of its own (``P00012`` a ping, ``J00013`` a
job, ``W00014`` a watch job, whose matching lines are ``hit-W00014-1``, ``-2``, ...), so
every message the bot sent can be told apart whatever else it holds: the answer to one
message, one job's notice, one matching line (several, when notices went out merged).
At the end a last daemon runs until nothing is left to do, and each of those is counted
per platform from what the person was shown — the fake Bot API's ``sendMessage`` calls,
the fake Discord's posts (a post its nonce answered with an earlier message is not a
second one), the web conversation's transcript and what its tab was sent (a frame whose
key the page showed before is not shown again) — as once, twice (more than once: the
crash fell between a send and its record), misrouted (in another topic, thread or
conversation than the one it started in) or lost (never).
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import signal
import sqlite3
import time
import uuid
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import aiohttp

from gateway.formatting.mrkdwn import unescape
from tests.fakes.discord_server import DISCORD_EPOCH_MS, FakeDiscord
from tests.fakes.slack_server import APP_TOKEN, BOT_TOKEN, DEFAULT_USER, FakeSlack
from tests.fakes.telegram_server import FakeTelegram
from tests.real_daemon import home_env, start_daemon

PERSON = 1
FORUM = -1001
TOPICS = (42, 17, 5, 9)
CHANNEL = 500
THREADS = (601, 602, 603, 604)
CONVERSATIONS = ("chaos-a", "chaos-b", "chaos-c")
#: Slack: threads of #general, each under a colleague's message (someone the bot does
#: not serve, so nothing answers it: tests/conformance/slack.py)
GENERAL, SLACK_THREADS, COLLEAGUE = "C0GENERAL", 3, "U0BOB"
PLATFORMS = ("telegram", "discord", "slack", "web")
#: Discord's own limit on a channel's posts (5 in 5 s): notices waiting together there
#: go out merged (gateway/delivery/merged_notices.py)
DISCORD_POSTS, DISCORD_PER = 5, 5.0

#: every line a watch job prints is a notice (tests/test_crash_recovery.py's setting)
WATCH_EVERY_LINE = ("jobs: {watch: {cooldown_seconds: 0, max_notices: 100, max_lines: 100, "
                    "global_max_per_minute: 1000}}\n")

_MARKER = re.compile(r"(?<![A-Za-z0-9])([PJW]\d{5})(?![0-9])")
_LINE = re.compile(r"hit-(W\d{5})-(\d+)")
_STARTED = re.compile(r"Started job (\S+?)[,;]")
_MERGED = re.compile(r"(\d+) notices at once")
#: where each notice of a message begins (a merged one holds several)
_NOTICE_START = re.compile(r"(?m)^(?=Job \S+ )")


@dataclass(frozen=True)
class Place:
    """Where the person writes: a forum topic, a Discord thread, a web conversation."""

    platform: str
    where: int | str

    @property
    def label(self) -> str:
        kind = {"telegram": "topic", "web": "conversation"}.get(self.platform, "thread")
        return f"{self.platform} {kind} {self.where}"


@dataclass
class Item:
    """One message the person sent, and what it should bring back."""

    marker: str
    kind: str  # ping | bg | watch
    place: Place
    text: str
    said_at: float  # time.time()
    while_down: bool
    lines: int = 0  # a watch job's matching lines


@dataclass(frozen=True)
class Copy:
    """One message the person was shown (or, on the web, one transcript line)."""

    platform: str
    where: int | str
    text: str
    at: float  # time.time()
    message_id: str
    key: str | None = None  # a web frame's key, a Discord post's nonce
    source: str = "sent"  # sent | transcript (the web) | frame (a web tab)

    @property
    def merged(self) -> int:
        """How many notices it carried merged (gateway/delivery/merged_notices.py); 0
        for a message of its own."""
        found = _MERGED.match(self.text)
        return int(found.group(1)) if found else 0


@dataclass
class Tally:
    once: int = 0
    twice: int = 0
    lost: int = 0
    misrouted: int = 0
    #: a message answered, and then told that it may not have finished as well (the
    #: replay after a kill could not see the answer had gone out)
    noted: int = 0

    @property
    def total(self) -> int:
        return self.once + self.twice + self.lost + self.misrouted + self.noted

    def add(self, other: Tally) -> None:
        for name in ("once", "twice", "lost", "misrouted", "noted"):
            setattr(self, name, getattr(self, name) + getattr(other, name))


@dataclass
class Doubled:
    """A unit shown more than once, with what the store and the logs say of it."""

    platform: str
    unit: str
    place: Place
    copies: list[Copy]
    notices: list[dict[str, Any]] = field(default_factory=list)
    inbound: list[dict[str, Any]] = field(default_factory=list)
    #: the daemon's log records naming those notices or journal entries
    logs: list[dict[str, Any]] = field(default_factory=list)
    #: after the first copy and before its life was killed: sends (on every platform),
    #: and those into this conversation
    sends_after: int = 0
    sends_after_here: int = 0
    #: sends into this conversation in the 5 s before the first copy (Discord's bucket
    #: for a channel: the fifth post of five waits out the bucket's reset in discord.py
    #: before it returns)
    sends_before_here: int = 0
    #: what the next life's start found claimed by the dead one: (marked delivered,
    #: requeued), from its ``outbox_reconciled`` line
    reconciled: tuple[int, int] | None = None


@dataclass
class Chaos:
    """What a run did, what the person was shown, and the counts."""

    seed: int
    platforms: tuple[str, ...] = PLATFORMS
    items: list[Item] = field(default_factory=list)
    kills: list[float] = field(default_factory=list)  # time.time() of each SIGKILL
    starts: list[float] = field(default_factory=list)  # time.time() each life listened
    settled: bool = False
    seconds: float = 0.0
    tallies: dict[str, Tally] = field(default_factory=dict)
    doubled: list[Doubled] = field(default_factory=list)
    #: (platform, unit, place, item, messages of that place journaled before it was said,
    #: what the journal holds of the message itself: its entries' states, or "never")
    lost: list[tuple[str, str, Place, Item, int, str]] = field(default_factory=list)
    misrouted: list[tuple[str, str, Place, list[Copy]]] = field(default_factory=list)
    maybe_repeated: list[str] = field(default_factory=list)  # those log lines
    jobs: int = 0
    jobs_twice: int = 0  # markers that started two jobs
    parked: int = 0
    tab_twice: int = 0  # web units a tab was shown twice (not in the transcript)
    noted: list[Doubled] = field(default_factory=list)  # answered, and told "may not ..."
    #: Discord messages journaled into a DM session of a thread's id (read back from
    #: history without the thread's guild: issue 44's phantom DM)
    read_back_as_dm: int = 0
    #: by platform, for job notices shown once: seconds from the platform having the
    #: message to the daemon noting it delivered (the send's answer back, then the
    #: record queued): the least a kill-9 window can be there
    record_lag: dict[str, list[float]] = field(default_factory=dict)
    #: Discord posts its nonce answered with the message it already had (no second one)
    nonce_hits: int = 0
    #: everything the person was shown, every platform (the web: its tabs' frames)
    shown: list[Copy] = field(default_factory=list)

    def life_at(self, at: float) -> int:
        """Which life (1 = the first daemon) was running at ``at``."""
        return 1 + sum(1 for k in self.kills if k <= at)

    def when(self, at: float) -> str:
        """``at`` told against the kills: "life 7, 0.41 s before its kill"."""
        life = self.life_at(at)
        if life > len(self.starts) or at < self.starts[life - 1]:
            return f"while down after kill {life - 1}, {at - self.kills[life - 2]:.2f} s after it"
        if life <= len(self.kills):
            return f"life {life}, {self.kills[life - 1] - at:.2f} s before its kill"
        return f"life {life} (the last), {at - self.starts[-1]:.1f} s after it listened"


# ------------------------------------------------------------------ the web page


class Tab:
    """One conversation open in a browser tab, as the page behaves: every message goes
    with an id and stays queued until its ``ack``; the queue goes again on every
    (re)connection and after an error frame that says ``retry``."""

    def __init__(self, conversation: str) -> None:
        self.conversation = conversation
        self.unacked: dict[str, tuple[str, float]] = {}
        self.frames: list[Copy] = []
        self._ws: aiohttp.ClientWebSocketResponse | None = None
        self._reader: asyncio.Task[None] | None = None

    async def open(self, http: aiohttp.ClientSession, url: str) -> None:
        ws = await http.ws_connect(f"{url}ws", params={"conversation": self.conversation})
        ready = await ws.receive_json(timeout=60)
        if ready.get("type") != "ready":
            raise RuntimeError(f"the web chat answered {ready!r}")
        self._ws = ws
        self._reader = asyncio.create_task(self._read(ws), name=f"tab-{self.conversation}")
        for frame_id in list(self.unacked):
            await self._transmit(frame_id)

    async def closed(self) -> None:
        """The daemon died: the socket is gone (the page reconnects to the next life)."""
        ws, self._ws = self._ws, None
        if ws is not None:
            await ws.close()
        if self._reader is not None:
            await asyncio.gather(self._reader, return_exceptions=True)
            self._reader = None

    async def say(self, text: str) -> None:
        frame_id = uuid.uuid4().hex[:16]
        self.unacked[frame_id] = (text, time.time())
        await self._transmit(frame_id)

    async def _transmit(self, frame_id: str) -> None:
        if self._ws is None or self._ws.closed or frame_id not in self.unacked:
            return
        text, typed_at = self.unacked[frame_id]
        try:
            await self._ws.send_json({"type": "message", "text": text, "id": frame_id,
                                      "sent_at": typed_at})
        except (ConnectionError, aiohttp.ClientError, RuntimeError):
            pass  # it died meanwhile: sent again on the next connection

    async def _read(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        try:
            async for message in ws:
                if message.type is not aiohttp.WSMsgType.TEXT:
                    continue
                frame = json.loads(message.data)
                kind = frame.get("type")
                if kind == "ack":
                    self.unacked.pop(frame.get("id"), None)
                elif kind == "error" and frame.get("id") in self.unacked:
                    if frame.get("retry"):
                        await self._transmit(frame["id"])
                    else:
                        self.unacked.pop(frame["id"])
                elif kind == "message" and frame.get("kind") != "user":
                    chat = str(frame.get("session_key", "")).split(":")
                    where = chat[4] if len(chat) > 4 else self.conversation
                    self.frames.append(Copy("web", where, str(frame.get("text", "")),
                                            time.time(), str(len(self.frames)),
                                            key=frame.get("key"), source="frame"))
        except (TimeoutError, ConnectionError, aiohttp.ClientError):
            pass


# ------------------------------------------------------------------ the person


class Person:
    """Writes pings, jobs and watch jobs into random places, at random moments, whether
    the daemon is up or not."""

    def __init__(self, rng: random.Random, chaos: Chaos, places: list[Place],
                 telegram: FakeTelegram, discord: FakeDiscord, slack: FakeSlack | None,
                 tabs: dict[str, Tab], up: asyncio.Event) -> None:
        self.rng, self.chaos, self.places = rng, chaos, places
        self.telegram, self.discord, self.slack = telegram, discord, slack
        self.tabs, self.up = tabs, up
        self._number = 0

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            roll = self.rng.random()
            place = self.rng.choice(self.places)
            if roll < 0.5:
                m = self._marker("P")
                await self.say(place, "ping", m, f"hello {m}")
            elif roll < 0.72:
                m, seconds = self._marker("J"), self.rng.choice((0.2, 0.5, 1.0, 2.0, 4.0, 7.0))
                await self.say(place, "bg", m, f"/bg echo {m}; sleep {seconds}; echo done-{m}")
            elif roll < 0.87:  # several jobs of one conversation ending the same second
                end = int(time.time()) + self.rng.randint(2, 6)
                for _ in range(self.rng.randint(2, 4)):
                    m = self._marker("J")
                    await self.say(place, "bg", m, (
                        f"/bg echo {m}; while [ $(date +%s) -lt {end} ]; do sleep 0.1; "
                        f"done; echo done-{m}"))
            else:
                m, lines = self._marker("W"), self.rng.randint(2, 5)
                await self.say(place, "watch", m, (
                    f"/watch hit-{m} for i in {' '.join(map(str, range(1, lines + 1)))}; "
                    f"do echo hit-{m}-$i; sleep {self.rng.choice((0.3, 0.8, 1.5))}; done"),
                    lines=lines)
            await asyncio.sleep(self.rng.uniform(0.15, 0.9))

    def _marker(self, letter: str) -> str:
        self._number += 1
        return f"{letter}{self._number:05d}"

    async def say(self, place: Place, kind: str, marker: str, text: str,
                  lines: int = 0) -> None:
        self.chaos.items.append(Item(marker, kind, place, text, time.time(),
                                     not self.up.is_set(), lines))
        if place.platform == "telegram":
            self.telegram.user_message(chat_id=FORUM, chat_type="supergroup", is_forum=True,
                                       thread_id=int(place.where), is_topic_message=True,
                                       text=text, user_id=PERSON)
        elif place.platform == "discord":
            await self.discord.user_message(channel_id=int(place.where), content=text,
                                            author_id=PERSON)
        elif place.platform == "slack" and self.slack is not None:
            self.slack.user_message(channel=GENERAL, text=text, user=DEFAULT_USER,
                                    thread_ts=str(place.where))
        else:
            await self.tabs[str(place.where)].say(text)


# ------------------------------------------------------------------ the rounds


def daemon_config(telegram: FakeTelegram, discord: FakeDiscord, slack: FakeSlack | None,
                  group_per_minute: float) -> str:
    slack_section = "" if slack is None else (
        f"  slack: {{enabled: true, bot_token: '{BOT_TOKEN}', app_token: '{APP_TOKEN}', "
        f"api_base: '{slack.api_base}', allowed_users: ['{DEFAULT_USER}']}}\n")
    return (
        "platforms:\n"
        "  web: {port: 0}\n"
        f"  telegram: {{enabled: true, token: '{telegram.token}', "
        f"base_url: '{telegram.base_url}', base_file_url: '{telegram.base_file_url}', "
        f"allowed_users: ['{PERSON}'], group_messages_per_minute: {group_per_minute}}}\n"
        f"  discord: {{enabled: true, token: '{discord.token}', "
        f"api_base: '{discord.api_base}', gateway_url: '{discord.gateway_url}', "
        f"guild_ready_timeout_seconds: {discord.guild_ready_timeout}, "
        f"allowed_users: ['{PERSON}']}}\n"
        + slack_section + WATCH_EVERY_LINE)


async def chaos_rounds(root: Path, *, rounds: int, seed: int, min_gap: float = 2.0,
                       max_gap: float = 6.0, group_per_minute: float = 60.0,
                       with_slack: bool = True, settle_timeout: float = 300.0) -> Chaos:
    """``rounds`` kills of one daemon on ``root``'s home, a person writing throughout;
    then a last life until nothing is left to do; then the counts."""
    rng = random.Random(seed)
    chaos = Chaos(seed, PLATFORMS if with_slack else tuple(p for p in PLATFORMS
                                                           if p != "slack"))
    began = time.monotonic()
    async with (FakeTelegram() as telegram, FakeDiscord() as discord,
                FakeSlack() as slack_server):
        discord.add_channel(CHANNEL, "builds")
        for thread in THREADS:
            discord.add_thread(thread, CHANNEL)
            discord.limit_posts(thread, posts=DISCORD_POSTS, per=DISCORD_PER)
        places = ([Place("telegram", t) for t in TOPICS] + [Place("discord", t) for t in THREADS]
                  + [Place("web", c) for c in CONVERSATIONS])
        slack = slack_server if with_slack else None
        if slack is not None:
            slack.add_user(COLLEAGUE, "bob")
            places += [Place("slack", slack.user_message(channel=GENERAL, user=COLLEAGUE,
                                                         text=f"a thread for {n}"))
                       for n in range(SLACK_THREADS)]
        home = root / "home"
        home.mkdir()
        (home / "config.yaml").write_text(daemon_config(telegram, discord, slack,
                                                        group_per_minute))
        env = home_env(home)
        tabs = {c: Tab(c) for c in CONVERSATIONS}
        up = asyncio.Event()
        stop = asyncio.Event()
        async with aiohttp.ClientSession() as http:
            daemon, url = await start_daemon(env)
            chaos.starts.append(time.time())
            person: asyncio.Task[None] | None = None
            try:
                for tab in tabs.values():
                    await tab.open(http, url)
                up.set()
                person = asyncio.create_task(
                    Person(rng, chaos, places, telegram, discord, slack, tabs, up).run(stop),
                    name="person")
                for _ in range(rounds):
                    await asyncio.sleep(rng.uniform(min_gap, max_gap))
                    daemon.send_signal(signal.SIGKILL)
                    chaos.kills.append(time.time())
                    up.clear()
                    await daemon.wait()
                    for tab in tabs.values():
                        await tab.closed()
                    daemon, url = await start_daemon(env)  # systemd's restart, at once
                    chaos.starts.append(time.time())
                    for tab in tabs.values():
                        await tab.open(http, url)
                    up.set()
                stop.set()
                await person
                chaos.settled = await _settle(home / "state.db", telegram, discord, slack,
                                              tabs, settle_timeout)
                chaos.seconds = time.monotonic() - began
                _count(chaos, home, telegram, discord, slack, tabs)
            finally:
                stop.set()
                if person is not None and not person.done():
                    person.cancel()
                if daemon.returncode is None:
                    daemon.send_signal(signal.SIGTERM)
                    try:
                        await asyncio.wait_for(daemon.wait(), 30)
                    except TimeoutError:
                        daemon.kill()
                        await daemon.wait()
                for tab in tabs.values():
                    await tab.closed()
                _kill_jobs(home / "state.db")
    return chaos


async def _settle(db: Path, telegram: FakeTelegram, discord: FakeDiscord,
                  slack: FakeSlack | None, tabs: dict[str, Tab], timeout: float,
                  quiet: float = 10.0) -> bool:
    """Until the platforms have handed over everything, the daemon has nothing left to
    do and nothing new was shown for ``quiet`` seconds (Discord's history is read back
    after a connection: the journal holds nothing of it until then)."""
    deadline = time.monotonic() + timeout
    seen: tuple[int, ...] = ()
    quiet_since = time.monotonic()
    while time.monotonic() < deadline:
        now = (len(telegram.sent), len(discord.sent), len(slack.posts) if slack else 0,
               sum(len(t.frames) for t in tabs.values()))
        busy = (bool(telegram.pending_updates) or any(t.unacked for t in tabs.values())
                or (slack is not None and bool(slack.unacked or slack.pending))
                or await asyncio.to_thread(_open_work, db) > 0)
        if now != seen or busy:
            seen, quiet_since = now, time.monotonic()
        elif time.monotonic() - quiet_since >= quiet:
            return True
        await asyncio.sleep(0.5)
    return False


def _read(db: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
    conn.row_factory = sqlite3.Row
    return conn


def _open_work(db: Path) -> int:
    with closing(_read(db)) as conn:
        (count,) = conn.execute(
            "SELECT (SELECT COUNT(*) FROM jobs WHERE state = 'running')"
            " + (SELECT COUNT(*) FROM notifications WHERE state IN ('pending', 'claimed'))"
            " + (SELECT COUNT(*) FROM inbound WHERE state NOT IN ('handled', 'skipped'))"
        ).fetchone()
    return int(count)


def _kill_jobs(db: Path) -> None:
    """Jobs outlive the daemon by design; the bench's must not outlive the bench."""
    import os

    if not db.exists():
        return
    with closing(_read(db)) as conn:
        pids = [r[0] for r in conn.execute(
            "SELECT pid FROM jobs WHERE state = 'running' AND pid IS NOT NULL")]
    for pid in pids:
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


# ------------------------------------------------------------------ counting


def units_of(text: str, job_markers: dict[str, str]) -> set[str]:
    """What one message of the bot carries: ``answer:<marker>`` (the answer to the
    person's message: "Received: ..." or "Started job ..."), ``note:<marker>`` (its
    conversation told the message may not have finished), ``notice:<marker>`` (a job's
    end, or that it did not start) and ``line:<marker>-<n>`` (a watch job's matching
    line); several when notices went out merged in one message."""
    if "may not have finished" in text:
        return {f"note:{m}" for m in _MARKER.findall(text)}
    if text.startswith("Received:"):
        return {f"answer:{m}" for m in _MARKER.findall(text)}
    started = _STARTED.search(text)
    if started is not None and text.startswith("Started job"):
        return {f"answer:{job_markers.get(started.group(1), '?' + started.group(1))}"}
    units = set()
    for notice in _NOTICE_START.split(text):  # each notice of a merged message
        if not notice.startswith("Job "):
            continue
        if "output matched" in notice.split("\n", 1)[0]:
            units |= {f"line:{w}-{n}" for w, n in _LINE.findall(notice)}
        else:  # its end (the output quoted in it is no match of its watch)
            units |= {f"notice:{m}" for m in _MARKER.findall(notice)}
    return units


def _count(chaos: Chaos, home: Path, telegram: FakeTelegram, discord: FakeDiscord,
           slack: FakeSlack | None, tabs: dict[str, Tab]) -> None:
    db = home / "state.db"
    with closing(_read(db)) as conn:
        jobs = [dict(r) for r in conn.execute("SELECT id, command, state FROM jobs")]
        notices = [dict(r) for r in conn.execute(
            "SELECT id, kind, job_id, state, reason, attempts, last_error, merged_into, "
            "idempotency_key, sent_message_id, text, created_at, delivered_at "
            "FROM notifications ORDER BY id")]
        transcript = [dict(r) for r in conn.execute(
            "SELECT m.id, m.role, m.text, m.created_at, s.session_key FROM messages m "
            "JOIN sessions s ON s.id = m.session_id WHERE s.platform = 'web' "
            "AND m.role != 'user' ORDER BY m.id")]
        inbound = [dict(r) for r in conn.execute(
            "SELECT id, platform, platform_id, session_key, state, event, received_at, "
            "handled_at FROM inbound")]
    chaos.jobs = len(jobs)
    chaos.nonce_hits = discord.nonce_hits
    chaos.parked = sum(1 for n in notices if n["state"] == "parked")
    job_markers: dict[str, str] = {}
    jobs_of: dict[str, list[dict[str, Any]]] = {}
    for job in jobs:
        mark = _MARKER.search(job["command"])
        if mark:
            job_markers[job["id"]] = mark.group(1)
            jobs_of.setdefault(mark.group(1), []).append(job)
    chaos.jobs_twice = sum(1 for js in jobs_of.values() if len(js) > 1)

    copies = {p: list(_shown(p, telegram, discord, slack, transcript))
              for p in chaos.platforms}
    frames = [c for tab in tabs.values() for c in tab.frames]
    found: dict[str, dict[str, list[Copy]]] = {p: {} for p in chaos.platforms}
    for platform, shown in copies.items():
        for copy in shown:
            for unit in units_of(copy.text, job_markers):
                found[platform].setdefault(unit, []).append(copy)
    seen_in_tab: dict[str, list[Copy]] = {}
    for frame in frames:
        for unit in units_of(frame.text, job_markers):
            seen_in_tab.setdefault(unit, []).append(frame)

    for platform in chaos.platforms:
        chaos.tallies[platform] = Tally()
    for item in chaos.items:
        for unit in _expected(item, jobs_of):
            platform = item.place.platform
            got = found[platform].get(unit, [])
            in_tab = _shown_by_page(seen_in_tab.get(unit, [])) if platform == "web" else []
            notes: list[Copy] = []
            if unit.startswith("answer:"):  # told it may not have finished: its answer too
                note = "note:" + unit.split(":", 1)[1]
                notes = found[platform].get(note, [])
                if platform == "web":
                    in_tab += _shown_by_page(seen_in_tab.get(note, []))
            tally = chaos.tallies[platform]
            places = {c.where for c in got + notes + in_tab}
            repeated = len(got) > 1 or len(notes) > 1  # shown twice, or told twice
            if not places:
                tally.lost += 1
                before = sum(1 for e in inbound if e["platform"] == platform
                             and str(item.place.where) in e["session_key"].split(":")
                             and e["received_at"] < item.said_at)
                entries = [e for e in inbound if e["platform"] == platform
                           and item.marker in _MARKER.findall(e["event"])]
                journal = ", ".join(f"#{e['id']} {e['state']}" for e in entries) or "never"
                chaos.lost.append((platform, unit, item.place, item, before, journal))
            elif places != {item.place.where}:
                tally.misrouted += 1
                chaos.misrouted.append((platform, unit, item.place, got + notes + in_tab))
            elif repeated or _twice_in_tab(unit, in_tab):
                tally.twice += 1
                chaos.tab_twice += not repeated
                chaos.doubled.append(Doubled(
                    platform, unit, item.place,
                    sorted(got + notes if repeated else in_tab, key=lambda c: c.at),
                    _notices_of(unit, notices, jobs_of),
                    [e for e in inbound if item.marker in e["event"]]))
            elif got and notes:
                tally.noted += 1
                chaos.noted.append(Doubled(
                    platform, unit, item.place, sorted(got + notes, key=lambda c: c.at),
                    inbound=[e for e in inbound if item.marker in e["event"]]))
            else:
                tally.once += 1
                if unit.startswith("notice:") and platform != "web" and got:
                    delivered = [n["delivered_at"] for n in _notices_of(unit, notices, jobs_of)
                                 if n["kind"] == "completion" and n["delivered_at"]]
                    if delivered:
                        chaos.record_lag.setdefault(platform, []).append(
                            delivered[0] - got[0].at)
    chaos.read_back_as_dm = sum(1 for e in inbound if e["platform"] == "discord"
                                and e["session_key"].startswith("agent:main:discord:dm:"))
    lines = _log_lines(home)
    chaos.maybe_repeated = [line for line in lines if "maybe_repeated" in line]
    every_send = [c for p in chaos.platforms if p != "web" for c in copies[p]] + frames
    chaos.shown = sorted(every_send, key=lambda c: c.at)
    reconciled = {chaos.life_at(_epoch(r["timestamp"])): (r["marked_delivered"], r["requeued"])
                  for r in _records(lines) if r.get("event") == "outbox_reconciled"}
    for doubled in chaos.doubled + chaos.noted:
        doubled.logs = _log_records(lines, {n["id"] for n in doubled.notices},
                                    {e["id"] for e in doubled.inbound})
        first = doubled.copies[0]
        doubled.sends_before_here = sum(
            1 for c in every_send if first.at - DISCORD_PER <= c.at < first.at
            and c.where == first.where and c.platform == first.platform)
        life = chaos.life_at(first.at)
        if life <= len(chaos.kills):
            killed = chaos.kills[life - 1]
            after = [c for c in every_send if first.at < c.at <= killed + 0.05]
            doubled.sends_after = len(after)
            doubled.sends_after_here = sum(1 for c in after if c.where == first.where
                                           and c.platform == first.platform)
            doubled.reconciled = reconciled.get(life + 1)


def _expected(item: Item, jobs_of: dict[str, list[dict[str, Any]]]) -> Iterator[str]:
    """The units a message should bring back: its answer; its job's notice at the end
    (a job that never existed, a message told it may not have finished, brings none);
    a watch job's matching lines (none when it did not start)."""
    yield f"answer:{item.marker}"
    jobs = jobs_of.get(item.marker, [])
    if jobs:
        yield f"notice:{item.marker}"  # a watch job is reported at its end too
    if item.kind == "watch" and any(j["state"] != "failed" for j in jobs):
        for n in range(1, item.lines + 1):
            yield f"line:{item.marker}-{n}"


def _shown(platform: str, telegram: FakeTelegram, discord: FakeDiscord,
           slack: FakeSlack | None, transcript: list[dict[str, Any]]) -> Iterator[Copy]:
    """What the person was shown on ``platform`` (the web: its transcript)."""
    offset = time.time() - time.monotonic()  # (the fakes note monotonic times)
    if platform == "telegram":
        for s in telegram.sent:
            where = (s.message_thread_id or 0) if s.chat_id == FORUM else f"chat {s.chat_id}"
            yield Copy("telegram", where, s.text, s.at + offset, str(s.message_id))
    elif platform == "discord":
        for d in discord.sent:
            at = ((d.message_id >> 22) + DISCORD_EPOCH_MS) / 1000
            yield Copy("discord", d.channel_id, d.content or "", at, str(d.message_id),
                       key=None if d.nonce is None else str(d.nonce))
    elif platform == "slack":
        for number, post in enumerate(slack.posts if slack is not None else []):
            channel, thread = post.params.get("channel"), post.params.get("thread_ts")
            where = str(thread) if channel == GENERAL else f"chat {channel}"
            yield Copy("slack", where, unescape(str(post.params.get("text", ""))),
                       post.at + offset, str(number), key=post.params.get("client_msg_id"))
    else:
        for line in transcript:
            parts = line["session_key"].split(":")
            yield Copy("web", parts[4] if len(parts) > 4 else "?", line["text"],
                       line["created_at"], f"line-{line['id']}", source="transcript")


def _twice_in_tab(unit: str, shown: list[Copy]) -> bool:
    """Whether a page showed it twice: two of its answer's frames (or two notes), or a
    notice's or a line's frame twice (keys told apart as the page does)."""
    if unit.startswith("answer:"):
        answers = [c for c in shown if not c.text.startswith("(The gateway stopped")]
        return len(answers) > 1 or len(shown) - len(answers) > 1
    return len(shown) > 1


def _shown_by_page(frames: list[Copy]) -> list[Copy]:
    """The frames a page shows: one of each key (a send repeated after a crash with the
    same key is shown once), every keyless one."""
    shown, keys = [], set()
    for frame in frames:
        if frame.key is not None and frame.key in keys:
            continue
        if frame.key is not None:
            keys.add(frame.key)
        shown.append(frame)
    return shown


def _notices_of(unit: str, notices: list[dict[str, Any]],
                jobs_of: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    kind, _, what = unit.partition(":")
    if kind == "answer":
        return []
    marker = what.split("-")[0]
    job_ids = {j["id"] for j in jobs_of.get(marker, [])}
    rows = [n for n in notices if n["job_id"] in job_ids]
    if kind == "line":
        rows = [n for n in rows if f"hit-{what}" in n["text"]]
    return [{k: v for k, v in n.items() if k != "text"} for n in rows]


def _log_lines(home: Path) -> list[str]:
    lines: list[str] = []
    for log in sorted((home / "logs").glob("homing.log*"), reverse=True):
        lines += log.read_text(errors="replace").splitlines()
    return lines


def _records(lines: list[str]) -> Iterator[dict[str, Any]]:
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and "timestamp" in record:
            yield record


def _epoch(timestamp: str) -> float:
    return datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp()


def _log_records(lines: list[str], notification_ids: set[int], entry_ids: set[int]
                 ) -> list[dict[str, Any]]:
    """The daemon's log records naming one of these notifications or journal entries."""
    found = []
    for record in _records(lines):
        ids = {record.get("notification_id"), record.get("notice_id"),
               *(record.get("notification_ids") or [])}
        if ids & notification_ids or record.get("entry_id") in entry_ids:
            found.append(record)
    return found
