"""The scheduler: runs each schedule at its times, each scheduled time exactly once.

A run is keyed by (schedule, scheduled time) and claimed in the transaction
that advances the schedule to its next time, so no crash can run a time twice
or lose it. Starting a claimed run is itself conditional: the transaction that
registers its job (or hands its prompt to the outbox) first moves the run from
claimed to started, and registers nothing when someone else already did. The
return address is taken at that moment, from the conversation's live session,
so after ``/new`` or a compression the runs report into the conversation as it
is now; from there a run is ordinary background work under the one ownership
rule.

Times that passed while the daemon was down follow ``schedules.missed``, and
the conversation always hears once what was missed and what was done. A time
that comes due while the schedule's previous run still runs is skipped and
counted, and that run's notice says so.
"""

from __future__ import annotations

import asyncio
import builtins
import sqlite3
import time
import uuid
from collections.abc import Callable

import structlog

import tools.schedule_runs as runs
import tools.schedule_spec as schedule_spec
import tools.schedules as schedules
from gateway.cluster.lives import LifeOver
from gateway.config.settings import SchedulesConfig
from gateway.delivery.notifications import NewNotification, Notification
from gateway.delivery.outbox import Outbox
from gateway.inbound.journal import acted_ops
from gateway.sessions.store import SessionStore
from gateway.store.row_locks import lock_key, locking
from gateway.store.state import StateDatabase
from gateway.tracing import tracing
from gateway.words.return_address import ReturnAddress
from tools.job_notices import describe_exit
from tools.job_process import check_command
from tools.job_record import JobRecord
from tools.jobs import EndNote, JobError, JobManager
from tools.schedule_runs import RunTaken
from tools.schedule_spec import Due, ScheduleError, zone_name
from tools.schedules import (
    SCHEDULE_COLUMNS,
    RunState,
    ScheduleNotFound,
    ScheduleRecord,
    run_header,
    select_schedule,
)

log = structlog.get_logger(__name__)

#: a run this late is just late; later than this, its time counts as missed
MISSED_GRACE_SECONDS = 60.0
#: changes made by another process (``homing schedules pause``) are seen this soon
RESCAN_SECONDS = 30.0
#: a schedule whose runs cannot be started this many times in a row is paused
MAX_START_FAILURES = 3


class Scheduler:
    def __init__(self, db: StateDatabase, outbox: Outbox, store: SessionStore, jobs: JobManager,
                 settings: SchedulesConfig, *, clock: Callable[[], float] = time.time,
                 prompts: bool = False) -> None:
        self.db = db
        self.outbox = outbox
        self.store = store
        self.jobs = jobs
        self.settings = settings
        self.timezone = settings.timezone or schedule_spec.local_zone_name()
        self.clock = clock
        #: prompt schedules need an agent that can answer them (the model agent)
        self.prompts = prompts
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        #: one tick at a time in this process (the claims themselves hold across processes)
        self._ticking = asyncio.Lock()
        self._start_failures: dict[str, int] = {}
        jobs.observer = self
        outbox.settle_listeners.append(self._settled)

    # creating and changing -----------------------------------------------------

    async def create(self, address: ReturnAddress, *, every: str | None = None,
                     cron: str | None = None, at: str | None = None,
                     command: str | None = None, prompt: str | None = None,
                     timezone: str | None = None) -> ScheduleRecord:
        """A new schedule for ``address``'s conversation; ScheduleError says what is wrong."""
        if sum(x is not None for x in (every, cron, at)) != 1:
            raise ScheduleError("give exactly one of every, cron or at")
        if (command is None) == (prompt is None):
            raise ScheduleError("give exactly one of command (a shell run) or prompt "
                                "(an agent turn)")
        if prompt is not None and not self.prompts:
            raise ScheduleError("prompt schedules need the model agent (agent.backend: openai)")
        if not ((command if command is not None else prompt) or "").strip():
            raise ScheduleError("the scheduled command or prompt is empty")
        if command is not None:
            try:
                check_command(command)
            except ValueError as exc:
                raise ScheduleError(str(exc)) from None
        zone = zone_name(timezone or self.timezone)
        now = self.clock()
        spec = (schedule_spec.every(every, zone, now, self.settings.min_interval_seconds)
                if every is not None else schedule_spec.cron(cron, zone, now)
                if cron is not None else schedule_spec.at(at or "", zone, now))
        record = ScheduleRecord(
            id="s" + uuid.uuid4().hex[:7], session_key=address.session_key,
            route=address.route, spec=spec, command=command, prompt=prompt, created_at=now,
            next_run_at=spec.next_after(now), paused=False, pause_reason=None,
            last_run_for=None, last_result=None, skipped=0)
        limit = self.settings.max_per_conversation
        acted = acted_ops()

        def insert(conn: sqlite3.Connection) -> None:
            # the conversation's count decides, and no row stands for it: held until this
            # commits, so two schedules made at once do not both fit in the last place
            lock_key(conn, f"schedules:{record.session_key}")
            (count,) = conn.execute("SELECT COUNT(*) FROM schedules WHERE session_key = ?",
                                    (record.session_key,)).fetchone()
            if count >= limit:
                raise ScheduleError(f"this conversation already has {count} schedules, the most "
                                    f"it may have (schedules.max_per_conversation); remove one "
                                    f"first")
            conn.execute(f"INSERT INTO schedules ({SCHEDULE_COLUMNS}) VALUES "
                         f"({','.join('?' * 16)})", record.insert_params())
            for op in acted:  # the message that made it must not make it twice
                conn.execute(*op)

        await self.db.write(insert)
        log.info("schedule_created", schedule_id=record.id, session_key=record.session_key,
                 spec=spec.describe(), next_run_at=record.next_run_at)
        self.wake()
        return record

    async def list(self, session_key: str | None = None) -> list[ScheduleRecord]:
        return await schedules.list_schedules(self.db, session_key)

    async def own(self, schedule_id: str, session_key: str) -> ScheduleRecord:
        """``schedule_id`` when this conversation made it; ScheduleNotFound otherwise."""
        record = await schedules.get(self.db, schedule_id.strip())
        if record is None or record.session_key != session_key:
            raise ScheduleNotFound(f"No schedule {schedule_id!r} in this conversation; "
                                   f"/schedules lists them.")
        return record

    async def pause(self, schedule_id: str, reason: str | None = None) -> ScheduleRecord:
        return await schedules.set_paused(self.db, schedule_id, True, reason=reason,
                                          now=self.clock())

    async def resume(self, schedule_id: str) -> ScheduleRecord:
        record = await schedules.set_paused(self.db, schedule_id, False, now=self.clock())
        self._start_failures.pop(schedule_id, None)
        self.wake()
        return record

    async def remove(self, schedule_id: str) -> ScheduleRecord:
        return await schedules.remove(self.db, schedule_id)

    async def run_now(self, schedule_id: str) -> ScheduleRecord:
        """Run a schedule once now, out of turn (its next time stays as it is)."""
        now = self.clock()

        def claim(conn: sqlite3.Connection) -> ScheduleRecord:
            record = select_schedule(conn, schedule_id)
            if runs.busy(conn, schedule_id):
                raise ScheduleError(f"schedule {schedule_id} has a run under way or waiting; "
                                    f"try again when it has ended")
            runs.insert_run(conn, schedule_id, runs.Claim(now, "manual"), "claimed", now)
            return record

        record = await self.db.write(claim)
        self.wake()
        return record

    # the loop ------------------------------------------------------------------

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="scheduler")

    async def stop(self) -> None:
        """Claim and start nothing more, at once (a tick under way ends at its next
        schedule): what comes due is the next life's, or another instance's."""
        self._stopping = True
        self.wake()
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    def wake(self) -> None:
        self._wake.set()

    async def _run(self) -> None:
        while not self._stopping:
            self._wake.clear()
            try:
                delay = await self.tick()
            except Exception:
                log.exception("scheduler_cycle_failed")
                delay = RESCAN_SECONDS
            if self._stopping:
                return
            try:
                async with asyncio.timeout(delay):
                    await self._wake.wait()
            except TimeoutError:
                pass

    async def tick(self) -> float:
        """Fire what is due, start what is claimed; seconds until the next time is due."""
        async with self._ticking:
            return await self._tick()

    async def _tick(self) -> float:
        now = self.clock()
        rows = await self.db.fetchall(
            f"SELECT {SCHEDULE_COLUMNS} FROM schedules WHERE paused = 0 "
            f"AND next_run_at IS NOT NULL AND next_run_at <= ? ORDER BY next_run_at", (now,))
        for row in rows:
            if self._stopping:
                return RESCAN_SECONDS
            try:  # one schedule's trouble must not stop the others
                await self._fire(ScheduleRecord.from_row(row), now)
            except Exception:
                log.exception("schedule_not_fired", schedule_id=row[0])
        await self._start_claimed()
        row = await self.db.fetchone(
            "SELECT MIN(next_run_at) FROM schedules WHERE paused = 0 AND next_run_at IS NOT NULL")
        if row is None or row[0] is None:
            return RESCAN_SECONDS
        due: float = row[0]
        return min(RESCAN_SECONDS, max(0.0, due - self.clock()))

    async def _fire(self, s: ScheduleRecord, now: float) -> None:
        """Claim the due time(s) of ``s`` and advance it, in one transaction."""
        assert s.next_run_at is not None
        # walking a cron expression over a long downtime is work: off the event loop
        due = await asyncio.to_thread(s.spec.due, s.next_run_at, now,
                                      now - self.settings.max_missed_age_seconds)
        following = s.spec.next_after(now)
        missed = due.count > 1 or now - due.first > MISSED_GRACE_SECONDS
        claims = self._missed_claims(due) if missed else [runs.Claim(due.first, "due")]
        notes: dict[bool, NewNotification] = {}
        if missed:
            address = await self.address(s)
            notes = {busy: NewNotification(
                idempotency_key=f"{s.id}:missed:{due.first}", kind="schedule_note",
                address=address, text=_missed_text(s, due, claims, self.settings, following,
                                                   busy=busy), outcome="info")
                for busy in (False, True)}

        def claim(conn: sqlite3.Connection) -> bool:
            # held until this commits: an instance firing it too waits, then finds it moved
            current = conn.execute("SELECT next_run_at, paused FROM schedules "
                                   f"WHERE id = ?{locking(conn)}", (s.id,)).fetchone()
            if current is None or current[0] != s.next_run_at or current[1]:
                return False  # changed meanwhile (removed, paused, or fired elsewhere)
            conn.execute("UPDATE schedules SET next_run_at = ? WHERE id = ?", (following, s.id))
            busy = runs.busy(conn, s.id)
            for c in claims:
                if busy and c.reason == "due":
                    # never two runs of one schedule at once: skipped, and counted
                    runs.insert_run(conn, s.id, c, "skipped", now, reason="overlap")
                    conn.execute("UPDATE schedules SET skipped = skipped + 1 WHERE id = ?",
                                 (s.id,))
                else:  # missed times wait their turn behind a run under way
                    runs.insert_run(conn, s.id, c, "claimed", now)
            if notes:
                conn.execute(*Outbox.insert_op(notes[busy]))
            return True

        if await self.db.write(claim):
            log.info("schedule_fired", schedule_id=s.id, due=due.count,
                     claimed=[c.scheduled_for for c in claims], next_run_at=following)
            if notes:
                self.outbox.wake()

    def _missed_claims(self, due: Due) -> builtins.list[runs.Claim]:
        policy = self.settings.missed
        if policy == "skip":
            return []
        if policy == "once":
            return [runs.Claim(due.last, "missed")]
        return [runs.Claim(t, "missed") for t in due.kept]

    async def _start_claimed(self) -> None:
        """Start the oldest claimed run of every schedule that has none under way."""
        rows = await self.db.fetchall(
            f"SELECT r.schedule_id, r.scheduled_for, r.reason FROM schedule_runs r "
            f"WHERE r.state = '{RunState.CLAIMED}' AND NOT EXISTS (SELECT 1 FROM schedule_runs o "
            f"WHERE o.schedule_id = r.schedule_id AND {runs.UNDER_WAY}) ORDER BY r.scheduled_for")
        started: set[str] = set()
        for schedule_id, scheduled_for, reason in rows:
            if self._stopping:  # left claimed, for the next life
                return
            if schedule_id in started:
                continue
            started.add(schedule_id)
            record = await schedules.get(self.db, schedule_id)
            if record is None or record.paused:  # removed or paused: nothing more runs
                await self.db.write([schedules.cancel_claimed_op(schedule_id)])
                continue
            run = runs.Claim(scheduled_for, reason)
            try:
                if await self._start_run(record, run):
                    self._start_failures.pop(schedule_id, None)
            except RunTaken:
                continue
            except LifeOver:  # left claimed: a live instance (or the next life) starts it
                return

    async def _start_run(self, s: ScheduleRecord, run: runs.Claim) -> bool:
        """A run is a trace of its own: its job (a child of this span) or its prompt, or
        the note that it could not start. False when it could not."""
        with tracing.span("schedule.run", expected=(RunTaken, LifeOver), schedule_id=s.id,
                          scheduled_for=run.scheduled_for, reason=run.reason,
                          session_key=s.session_key) as span:
            try:
                await self._start_traced(s, run, span.traceparent)
            except (RunTaken, LifeOver):
                raise
            except Exception as exc:
                span.set(outcome="not_started", error=type(exc).__name__)
                await self._start_failed(s, run, exc, span.traceparent)
                return False
        return True

    async def _start_traced(self, s: ScheduleRecord, run: runs.Claim,
                            trace_parent: str | None) -> None:
        address = await self.address(s)
        now = self.clock()
        if s.prompt is not None:
            notice = NewNotification(
                idempotency_key=runs.prompt_key(s.id, run.scheduled_for), kind="schedule_prompt",
                address=address, text=self._prompt_text(s, run), trace_parent=trace_parent)

            def hand_over(conn: sqlite3.Connection) -> None:
                runs.mark_started(conn, s.id, run.scheduled_for, None, now)
                conn.execute(*Outbox.insert_op(notice))

            await self.db.write(hand_over)
            self.outbox.wake()
            return

        def started(conn: sqlite3.Connection, job_id: str) -> None:
            runs.mark_started(conn, s.id, run.scheduled_for, job_id, now)

        assert s.command is not None
        try:
            await self.jobs.start(s.command, address, in_registration=started,
                                  origin={"schedule_id": s.id, "scheduled_for": run.scheduled_for})
        except JobError as exc:  # told, once, and the schedule goes on
            await self._tell_not_started(s, run, address, str(exc), trace_parent)

    async def _start_failed(self, s: ScheduleRecord, run: runs.Claim, exc: Exception,
                            trace_parent: str | None) -> None:
        """A run that cannot be started is told and finished, so it cannot hold its
        schedule up; after a few in a row the schedule pauses, saying why."""
        log.exception("schedule_run_not_started", schedule_id=s.id,
                      scheduled_for=run.scheduled_for)
        failures = self._start_failures.get(s.id, 0) + 1
        self._start_failures[s.id] = failures
        why = f"{type(exc).__name__}: {exc}"
        if failures >= MAX_START_FAILURES:
            await self.pause(s.id, reason=f"runs could not be started ({why})")
            why += f"; the schedule is paused after {failures} such failures"
        try:
            await self._tell_not_started(s, run, await self.address(s), why, trace_parent)
        except Exception:
            log.exception("schedule_failure_not_told", schedule_id=s.id)

    async def _tell_not_started(self, s: ScheduleRecord, run: runs.Claim,
                                address: ReturnAddress, why: str,
                                trace_parent: str | None) -> None:
        text = f"{run_header(s, run.scheduled_for)} could not start: {why}"
        await self.outbox.produce(
            [NewNotification(runs.failed_key(s.id, run.scheduled_for), "schedule_note", address,
                             text, outcome="failed", trace_parent=trace_parent)],
            with_ops=runs.finish_ops(s, run.scheduled_for, f"could not start: {why}",
                                     self.clock()))

    def _prompt_text(self, s: ScheduleRecord, run: runs.Claim) -> str:
        return (f"Scheduled task: {run_header(s, run.scheduled_for)}; not a message from the "
                f"user:\n{s.prompt}")

    async def address(self, s: ScheduleRecord) -> ReturnAddress:
        """Where a run reports: the conversation's live session now, in the schedule's place
        and under the message that created it."""
        session = await self.store.live_session(s.session_key)
        if session is None:
            session = await self.store.get_or_create(s.session_key, s.route)
        return ReturnAddress(s.session_key, session.id, s.route)

    # what jobs and the outbox tell -----------------------------------------------

    async def job_ending(self, record: JobRecord, notified: bool) -> EndNote | None:
        """A scheduled run's job ends: its notice names the schedule, the run's time and
        the next run, and says how many times were skipped while it ran."""
        origin = record.origin or {}
        if "schedule_id" not in origin:
            return None
        schedule_id, scheduled_for = origin["schedule_id"], origin["scheduled_for"]
        s = await schedules.get(self.db, schedule_id)
        if s is None:
            return EndNote(header=f"Schedule {schedule_id} (removed since): the run of "
                                  f"{_plain_time(scheduled_for)}.",
                           ops=[runs.finish_run_op(schedule_id, scheduled_for, _result(record),
                                               self.clock())])
        ops = runs.finish_ops(s, scheduled_for, _result(record), self.clock())
        footer = []
        if s.skipped and notified:  # counted down only once it is told
            were = "times were" if s.skipped != 1 else "time was"
            footer.append(f"{s.skipped} later scheduled {were} skipped: this run was still "
                          f"going.")
            ops.append(("UPDATE schedules SET skipped = CASE WHEN skipped > ? "
                        "THEN skipped - ? ELSE 0 END WHERE id = ?",
                        (s.skipped, s.skipped, s.id)))
        footer.append(_next_line(s))
        return EndNote(header=f"{run_header(s, scheduled_for)}.", footer=" ".join(footer),
                       ops=ops)

    def job_ended(self, record: JobRecord) -> None:
        if record.origin and "schedule_id" in record.origin:
            self.wake()  # the schedule's next claimed run may start now

    def _settled(self, n: Notification, state: str, reason: str | None,
                 detail: str | None) -> None:
        if n.kind == "schedule_prompt" and n.idempotency_key.count(":") == 2:
            # a prompt run ends when its turn was given (or its notice parked)
            schedule_id, _, when = n.idempotency_key.split(":")
            result = "answered in a turn" if state == "delivered" else f"parked: {reason}"
            self.db.write_behind([
                runs.finish_run_op(schedule_id, float(when), result, self.clock()),
                runs.last_result_op(schedule_id, float(when), result),
                runs.one_shot_done_op(schedule_id)])
            self.wake()
        if state == "parked" and reason == "route_gone":
            # the conversation's place is gone: its schedules pause, saying why, instead
            # of failing at every run
            why = f"route_gone: {detail}" if detail else "route_gone"
            self.db.write_behind([
                ("UPDATE schedules SET paused = 1, pause_reason = ? "
                 "WHERE session_key = ? AND paused = 0", (why, n.session_key)),
                (f"UPDATE schedule_runs SET state = '{RunState.CANCELLED}' "
                 f"WHERE state = '{RunState.CLAIMED}' "
                 "AND schedule_id IN (SELECT id FROM schedules WHERE session_key = ?)",
                 (n.session_key,))])
            log.warning("schedules_paused", session_key=n.session_key, reason=why)


def _result(record: JobRecord) -> str:
    if record.state == "failed":
        return "did not start"
    if record.state == "lost":
        return "lost (no exit code)"
    if record.killed:
        return "killed"
    return describe_exit(record.exit_code)


def _next_line(s: ScheduleRecord) -> str:
    if s.paused:
        return f"The schedule is paused{f' ({s.pause_reason})' if s.pause_reason else ''}."
    if s.next_run_at is None:
        return "No runs are left."
    return f"Next run: {s.when(s.next_run_at)}."


def _missed_text(s: ScheduleRecord, due: Due, claims: list[runs.Claim], settings: SchedulesConfig,
                 following: float | None, *, busy: bool) -> str:
    n = f"at least {due.count:,}" if due.capped else f"{due.count:,}"
    span = (f"at {s.when(due.first)}" if due.count == 1
            else f"from {s.when(due.first)} to {s.when(due.last)}")
    plural = "s" if due.count != 1 else ""
    head = (f"Schedule {s.id} ({s.spec.describe()}): {n} scheduled time{plural} passed while "
            f"the gateway was down ({span}).")
    after = " after the run still under way" if busy else ""
    if settings.missed == "skip":
        done = "None was run (schedules.missed: skip)."
    elif settings.missed == "once":
        done = f"It runs once now{after}, for {s.when(due.last)} (schedules.missed: once)."
    elif not claims:
        done = (f"None was run: all were older than schedules.max_missed_age_seconds "
                f"({settings.max_missed_age_seconds:g} s) (schedules.missed: all).")
    else:
        dropped = due.count - len(claims)
        count = ("Each runs" if not dropped else "The latest one runs" if len(claims) == 1
                 else f"The latest {len(claims):,} run")
        done = (f"{count} now{after}, oldest first, one after another (schedules.missed: all)"
                + (f"; {'at least ' if due.capped else ''}{dropped:,} older than "
                   f"schedules.max_missed_age_seconds {'were' if dropped != 1 else 'was'} "
                   f"not run." if dropped else "."))
    nxt = f" Next run: {s.when(following)}." if following is not None else ""
    return f"{head} {done}{nxt}"


def _plain_time(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(t))

