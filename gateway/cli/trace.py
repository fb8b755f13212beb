"""``homing trace <job id | notice id | schedule id | delegation id>``: the story of one piece of
background work, told from the state database alone — no collector needed.

When it started, from which message and in which conversation; when it ended and how;
each notice it produced, whom the ownership rule gave it to (the live session, the
ended one's chat as a labelled late notice, or nobody: parked with the reason), each
delivery attempt that did not deliver and why, the one that did; and where each notice
is now — delivered, being delivered, waiting for a retry or behind another notice, or
parked. A schedule's story is its runs, each a job's story. ``--json`` gives the same
as one object.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from gateway.cli.listings import StoreUnreadable, existing_store, with_store
from gateway.config.settings import Config
from gateway.delivery.notifications import NOTIFICATION_COLUMNS, Notification, NotificationState
from gateway.delivery.outbox import FLOOD_LIMITED
from gateway.inbound.journal import EntryState, event_from_json
from gateway.sessions.store import SessionStore
from tools.delegation import get_delegation
from tools.job_record import JOB_COLUMNS, JobRecord
from tools.schedule_runs import failed_key, prompt_key
from tools.schedules import get as get_schedule

TEXT_CHARS = 80
#: the largest row id a store holds (a 64-bit integer); a longer number is no notice
_MAX_ID = 2**63 - 1


def trace_command(config: Config, args: argparse.Namespace) -> int:
    if not existing_store(config):
        return 1
    try:
        story = with_store(config, lambda store: tell(store, args.what))
    except StoreUnreadable as exc:
        print(f"homing: {exc}", file=sys.stderr)
        return 1
    if story is None:
        print(f"homing: no job, notice, schedule or delegation {args.what!r} in the state "
              f"database at "
              f"{config.state_shown}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(story, indent=2, ensure_ascii=False))
    else:
        print("\n".join(lines(story)))
    return 0


async def tell(store: SessionStore, what: str) -> dict[str, Any] | None:
    """The story of ``what``: a notice (a number), a job, or a schedule."""
    what = what.strip()
    if what.isascii() and what.isdigit() and int(what) <= _MAX_ID:
        row = await store.db.fetchone(
            f"SELECT {NOTIFICATION_COLUMNS} FROM notifications WHERE id = ?", (int(what),))
        if row is None:
            return None
        notice = Notification(*row)
        if notice.job_id is not None and (story := await _work(store, notice.job_id)):
            return {**story, "asked_about": {"notice": notice.id}}
        return {"notices": [await _notice(store, notice)], "asked_about": {"notice": notice.id}}
    if (story := await _work(store, what)) is not None:
        return story
    return await _schedule(store, what)


async def _work(store: SessionStore, work_id: str) -> dict[str, Any] | None:
    """A job's story, or a delegation's (its notices name it as their job)."""
    return await _job(store, work_id) or await _delegation(store, work_id)


async def _job(store: SessionStore, job_id: str) -> dict[str, Any] | None:
    row = await store.db.fetchone(f"SELECT {JOB_COLUMNS} FROM jobs WHERE id = ?", (job_id,))
    if row is None:
        return None
    job = JobRecord.from_row(row)
    route = job.address.route
    story: dict[str, Any] = {
        "job": {"id": job.id, "command": job.command, "state": job.state,
                "started_at": job.started_at, "ended_at": job.ended_at,
                "exit_code": job.exit_code, "killed": job.killed,
                "session_key": job.session_key, "session_id": job.session_id,
                "route": route.to_dict(), "trace_parent": job.trace_parent},
        "started_by": await _origin(store, job.origin or {}),
    }
    story["notices"] = [await _notice(store, n) for n in await _notices_of(store, job.id)]
    return story


async def _delegation(store: SessionStore, delegation_id: str) -> dict[str, Any] | None:
    d = await get_delegation(store.db, delegation_id)
    if d is None:
        return None
    story: dict[str, Any] = {
        "delegation": {"id": d.id, "task": _cut(d.task), "state": d.state,
                       "created_at": d.created_at, "started_at": d.started_at,
                       "finished_at": d.finished_at, "session_key": d.session_key,
                       "session_id": d.session_id, "route": d.address.route.to_dict(),
                       "trace_parent": d.trace_parent}}
    story["notices"] = [await _notice(store, n) for n in await _notices_of(store, d.id)]
    return story


async def _notices_of(store: SessionStore, work_id: str) -> list[Notification]:
    rows = await store.db.fetchall(
        f"SELECT {NOTIFICATION_COLUMNS} FROM notifications WHERE job_id = ? ORDER BY id",
        (work_id,))
    return [Notification(*r) for r in rows]


async def _origin(store: SessionStore, origin: dict[str, Any]) -> dict[str, Any] | None:
    if "schedule_id" in origin:
        return {"schedule_id": origin["schedule_id"],
                "scheduled_for": origin.get("scheduled_for")}
    entry_id = origin.get("inbound_id")
    if entry_id is None:
        return None
    row = await store.db.fetchone(
        "SELECT id, platform, platform_id, event, received_at FROM inbound WHERE id = ?",
        (entry_id,))
    if row is None:
        return {"inbound_id": entry_id}
    event = event_from_json(row[3])
    return {"inbound_id": row[0], "platform": row[1], "platform_id": row[2],
            "received_at": row[4], "text": _cut(event.text),
            "message_id": event.route.message_id}


async def _notice(store: SessionStore, n: Notification) -> dict[str, Any]:
    attempts = [{"at": at, "claimer": claimer, "outcome": outcome, "detail": detail,
                 "retry_in": retry_in, "repeats": repeats, "last_at": last_at}
                for at, claimer, outcome, detail, retry_in, repeats, last_at
                in await store.db.fetchall(
                    "SELECT at, claimer, outcome, detail, retry_in, repeats, last_at "
                    "FROM delivery_attempts WHERE notification_id = ? ORDER BY id", (n.id,))]
    owner = await _owner(store, n)
    busy = (await _turn_under_way(store, n.session_key)
            if n.state in (NotificationState.PENDING, NotificationState.CLAIMED) else None)
    return {"id": n.id, "kind": n.kind, "state": n.state, "created_at": n.created_at,
            "delivered_at": n.delivered_at, "attempts": n.attempts,
            "claimed_by": n.claimed_by, "sent_message_id": n.sent_message_id,
            "reason": n.reason, "last_error": n.last_error, "not_before": n.not_before,
            "session_id": n.session_id, "owner": owner, "not_delivered": attempts,
            "now": _now(n, attempts, busy), "trace_parent": n.trace_parent}


async def _owner(store: SessionStore, n: Notification) -> str | None:
    """Whom the ownership rule gave it to, as the store shows: for a delivered notice,
    its session live then (``live``) or ended before it (``late``: a labelled notice
    in that session's chat); for a parked one, nobody."""
    if n.state == NotificationState.PARKED:
        return "nobody"
    if n.state != NotificationState.DELIVERED or n.reason == "consumed":
        return None
    session = await store.get(n.session_id)
    if session is None or n.delivered_at is None:
        return None
    ended = session.ended_at is not None and session.ended_at <= n.delivered_at
    if ended and session.end_reason == "compression":
        return "live_successor"  # the session that carries on the compressed one
    return "late" if ended else "live"


async def _turn_under_way(store: SessionStore, session_key: str) -> int | None:
    """The message whose turn runs in the conversation now, as the inbound journal
    says (a notice for its session waits for that turn to end)."""
    row = await store.db.fetchone(
        f"SELECT MIN(id) FROM inbound WHERE session_key = ? AND state IN "
        f"('{EntryState.STARTED}', '{EntryState.ACTED}', '{EntryState.REPLIED}')",
        (session_key,))
    return row[0] if row else None


def _now(n: Notification, attempts: list[dict[str, Any]], busy: int | None) -> str:
    if n.state == NotificationState.DELIVERED:
        if n.reason == "consumed":
            return "delivered: taken by the agent's process wait"
        return "delivered"
    if n.state == NotificationState.PARKED:
        return f"parked: {n.reason}" + (f" — {n.last_error}" if n.last_error else "")
    error = n.last_error or ""
    if n.state == NotificationState.PENDING and n.not_before is not None \
            and n.not_before > time.time():
        flood = bool(attempts) and attempts[-1]["outcome"] == FLOOD_LIMITED
        waiting = "waiting on the platform's flood limits" if flood else "waiting for a retry"
        return f"{waiting} until {_when(n.not_before)}" + (f" (last: {error})" if error else "")
    if busy is not None:
        return (f"waiting on a busy owner: the turn for message {busy} is under way in its "
                f"conversation" + (f" (claimed by {n.claimed_by})" if n.claimed_by else ""))
    if n.state == NotificationState.CLAIMED:
        return f"being delivered by {n.claimed_by}"
    if error.startswith("waits behind"):
        return f"waiting: it {error}"
    return "due: the router takes it next"


async def _schedule(store: SessionStore, schedule_id: str) -> dict[str, Any] | None:
    s = await get_schedule(store.db, schedule_id)
    if s is None:
        return None
    sid = s.id
    runs = []
    for scheduled_for, state, reason, job_id, started, finished, result in \
            await store.db.fetchall(
                "SELECT scheduled_for, state, reason, job_id, started_at, finished_at, result "
                "FROM schedule_runs WHERE schedule_id = ? ORDER BY scheduled_for", (sid,)):
        told = await store.db.fetchall(
            f"SELECT {NOTIFICATION_COLUMNS} FROM notifications WHERE idempotency_key IN (?, ?) "
            "ORDER BY id", (prompt_key(sid, scheduled_for), failed_key(sid, scheduled_for)))
        runs.append({"scheduled_for": scheduled_for, "state": state, "reason": reason,
                     "started_at": started, "finished_at": finished, "result": result,
                     "job": await _job(store, job_id) if job_id else None,
                     "notices": [await _notice(store, Notification(*r)) for r in told]})
    return {"schedule": {"id": sid, "session_key": s.session_key, "kind": s.spec.kind,
                         "spec": s.spec.text, "command": s.command,
                         "prompt": _cut(s.prompt) if s.prompt else None,
                         "created_at": s.created_at, "next_run_at": s.next_run_at,
                         "paused": s.paused}, "runs": runs}


def lines(story: dict[str, Any]) -> list[str]:
    """The story as a person reads it."""
    out: list[str] = []
    if "schedule" in story:
        s = story["schedule"]
        out.append(f"schedule {s['id']} ({s['kind']} {s['spec']}) in {s['session_key']}: "
                   f"{s['command'] or s['prompt']}")
        out.append(f"  made {_when(s['created_at'])}; next run "
                   f"{_when(s['next_run_at']) if s['next_run_at'] else 'none'}"
                   + (" (paused)" if s["paused"] else ""))
        for run in story["runs"]:
            out.append(f"  run for {_when(run['scheduled_for'])}: {run['state']}"
                       + (f" ({run['reason']})" if run["reason"] else ""))
            if run["job"]:
                out += ["    " + line for line in lines(run["job"])]
            if run["notices"]:  # its prompt for the agent, or the note it could not start
                out += ["  " + line for line in lines({"notices": run["notices"]})]
        return out
    if "delegation" in story:
        d = story["delegation"]
        out.append(f"delegation {d['id']}: {d['task']}")
        out.append(f"  handed over {_when(d['created_at'])}")
        out.append(f"  in {_where(d['route'])} — {d['session_key']}, session {d['session_id']}")
        out.append(f"  {d['state']} {_when(d['finished_at'])}" if d["finished_at"] is not None
                   else f"  still {d['state']}")
    if "job" in story:
        job = story["job"]
        out.append(f"job {job['id']}: {job['command']}")
        origin = story["started_by"]
        if origin is None:
            began = "not from a message"
        elif "schedule_id" in origin:
            began = f"by schedule {origin['schedule_id']}"
        else:
            began = (f"from message {origin.get('inbound_id')} ({origin.get('platform')} "
                     f"{origin.get('platform_id')}: “{origin.get('text', '')}”)")
        out.append(f"  started {_when(job['started_at'])} {began}")
        out.append(f"  in {_where(job['route'])} — {job['session_key']}, "
                   f"session {job['session_id']}")
        if job["ended_at"] is not None:
            how = (f"exit code {job['exit_code']}" if job["exit_code"] is not None
                   else job["state"])
            out.append(f"  ended {_when(job['ended_at'])}: {how}"
                       + (" (killed)" if job["killed"] else ""))
        else:
            out.append(f"  still {job['state']}")
    for n in story["notices"]:
        out.append(f"  notice {n['id']} ({n['kind']}), made {_when(n['created_at'])}")
        owner = n["owner"]
        if owner == "live":
            out.append(f"    owner: the live session {n['session_id']}")
        elif owner == "live_successor":
            out.append(f"    owner: the live session that carries on session "
                       f"{n['session_id']} (compressed meanwhile)")
        elif owner == "late":
            out.append(f"    owner: session {n['session_id']} had ended: posted in its chat, "
                       f"labelled as late")
        elif owner == "nobody":
            out.append("    owner: none could be proven")
        for attempt in n["not_delivered"]:
            repeats = attempt["repeats"]
            out.append(f"    attempt at {_when(attempt['at'])} by {attempt['claimer']}: "
                       f"{attempt['outcome']}"
                       + (f" — {attempt['detail']}" if attempt["detail"] else "")
                       + (f" (again in {attempt['retry_in']:g} s)" if attempt["retry_in"]
                          else "")
                       + (f"; the same {repeats - 1} more time{'s' if repeats > 2 else ''}"
                          f", the last at {_when(attempt['last_at'])}" if repeats > 1 else ""))
        if n["state"] == NotificationState.DELIVERED and n["delivered_at"] is not None:
            out.append(f"    sent {_when(n['delivered_at'])} by {n['claimed_by']}, message "
                       f"{n['sent_message_id']} (attempt {n['attempts']})")
        out.append(f"    now: {n['now']}")
    return out


def _where(route: dict[str, Any]) -> str:
    return (f"{route['platform']} {route['chat_type']} {route['chat_id']}"
            + (f", thread {route['thread_id']}" if route.get("thread_id") else ""))


def _when(at: float | None) -> str:
    if at is None:
        return "-"
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(at))
    return f"{stamp}.{int((at % 1) * 1000):03d}"


def _cut(text: str) -> str:
    one = " ".join(text.split())
    return one if len(one) <= TEXT_CHARS else one[:TEXT_CHARS - 1] + "…"
