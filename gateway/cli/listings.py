"""The CLI's read-only views of the state database: sessions, jobs, notifications,
approvals, schedules and status, as tables or ``--json``.

Each command opens the store only when it exists (a listing must not create an
empty database), and a listing piped into ``head`` ends quietly.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sqlite3
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from gateway.config.settings import Config
from gateway.delivery.notifications import NotificationState
from gateway.errors import StoreError
from gateway.sessions.store import SessionStore
from tools.job_record import JobState

T = TypeVar("T")
EXIT_CONFIG = 2


def existing_store(config: Config, *, quiet: bool = False) -> bool:
    """Read-only commands look at an existing state database and never make one (a
    PostgreSQL store is there whenever its server is)."""
    if config.store.url is not None or config.state_db.exists():
        return True
    if not quiet:
        print(f"homing: no state database at {config.state_db} (is HOMING_HOME or the "
              f"config's 'home' set as for the daemon?)", file=sys.stderr)
    return False


class StoreUnreadable(StoreError):
    """The state database cannot be used; the message says why, in one line."""


def with_store(config: Config, use: Callable[[SessionStore], Awaitable[T]]) -> T:
    async def run() -> T:
        async with SessionStore(config.state_location) as store:
            return await use(store)
    try:
        return asyncio.run(run())
    except _store_errors(config) as exc:  # damaged, foreign, too new; refused, unreachable
        raise StoreUnreadable(f"the state database at {config.state_shown} cannot be read: "
                              f"{exc}") from None


def _store_errors(config: Config) -> tuple[type[Exception], ...]:
    errors: tuple[type[Exception], ...] = (sqlite3.DatabaseError, RuntimeError)
    if config.store.url is not None:
        import psycopg

        errors += (psycopg.Error,)
    return errors


def _listing(config: Config, args: argparse.Namespace, what: str,
             fetch: Callable[[SessionStore], Awaitable[list[dict[str, Any]]]],
             header: str, line: Callable[[dict[str, Any]], str]) -> int:
    """The shape every listing command shares: JSON, or a table, or "no ..."."""
    if not existing_store(config):
        return 1
    rows = with_store(config, fetch)
    if args.json:
        print(json.dumps(rows, indent=2))
    elif not rows:
        print(f"no {what}")
    else:
        print(header)
        for row in rows:
            print(line(row))
    return 0


def sessions_command(config: Config, args: argparse.Namespace) -> int:
    """Sessions, most recently active first: ``--limit`` of them (1000 unless told) from
    ``--offset``. When that is not all of them stderr says so and where the next page
    starts, so a script reading the JSON array is never cut short without a word."""
    offset: int = args.offset
    shown = total = 0

    async def fetch(store: SessionStore) -> list[dict[str, Any]]:
        nonlocal shown, total
        page = await store.list_sessions(args.archived, limit=args.limit, offset=offset)
        total = await store.count_sessions(args.archived)
        shown = len(page)
        return [s.to_dict() for s in page]

    def line(row: dict[str, Any]) -> str:
        state = "archived" if row["archived"] else ("ended" if row["ended_at"] else "live")
        title = (row["title"] or "-")[:20]
        return (f"{row['id']:32}  {state:9}  {when(row['last_active_at']):19}  {title:20}  "
                f"{row['session_key']}")

    code = _listing(config, args, "sessions", fetch,
                    f"{'SESSION ID':32}  {'STATE':9}  {'LAST ACTIVE':19}  {'TITLE':20}  "
                    "SESSION KEY", line)
    if code == 0 and shown < total:
        print(f"homing: {_page_notice(shown, total, offset, 'sessions')}", file=sys.stderr)
    return code


def _page_notice(shown: int, total: int, offset: int, what: str) -> str:
    """"showing 1000 of 1234 sessions; --offset 1000 for the next" (where this page
    starts when it is not the first; nothing about a next page after the last)."""
    where = f" from --offset {offset}" if offset else ""
    notice = f"showing {shown} of {total} {what}{where}"
    if offset + shown < total:
        notice += f"; --offset {offset + shown} for the next"
    return notice


def jobs_command(config: Config, args: argparse.Namespace) -> int:
    """Background jobs, watches, scheduled runs and delegations, newest first: all of
    them, or the newest ``--limit`` (then stderr says how many were left out, so a
    script reading the JSON array is never cut short without a word)."""
    from tools.delegation import recent_delegations
    from tools.job_record import JOB_COLUMNS, JobRecord

    limit: int | None = args.limit
    total = 0

    async def fetch(store: SessionStore) -> list[dict[str, Any]]:
        nonlocal total
        bounded = "" if limit is None else " LIMIT ?"
        rows = await store.db.fetchall(
            f"SELECT {JOB_COLUMNS} FROM jobs ORDER BY started_at DESC{bounded}",
            () if limit is None else (limit,))
        work = [JobRecord.from_row(r).to_dict() for r in rows]
        work += [d.to_dict() for d in await recent_delegations(store.db, limit)]
        (jobs,) = await store.db.fetchone("SELECT COUNT(*) FROM jobs")
        (delegations,) = await store.db.fetchone("SELECT COUNT(*) FROM delegations")
        total = jobs + delegations
        return sorted(work, key=lambda r: r["started_at"], reverse=True)[:limit]

    def line(r: dict[str, Any]) -> str:
        code = "" if r["exit_code"] is None else str(r["exit_code"])
        patterns = " | ".join(r["watch_patterns"])
        return (f"{r['id']:11}  {r['kind']:10}  {r['state']:11}  {code:>5}  "
                f"{when(r['started_at']):19}  {r['session_key'][:40]:40}  "
                f"{_one_line(r['command'], 50):50}  {_one_line(patterns, 30)}")

    code = _listing(config, args, "jobs", fetch,
                    f"{'JOB':11}  {'KIND':10}  {'STATE':11}  {'EXIT':>5}  {'STARTED':19}  "
                    f"{'SESSION KEY':40}  {'COMMAND / TASK':50}  PATTERN", line)
    if limit is not None and total > limit:
        print(f"homing: the newest {limit} of {total} jobs shown (--limit {limit}); leave "
              f"--limit out for all", file=sys.stderr)
    return code


def notifications_command(config: Config, args: argparse.Namespace) -> int:
    from gateway.delivery.outbox import Outbox

    async def fetch(store: SessionStore) -> list[dict[str, Any]]:
        return [n.to_dict() for n in await Outbox(store.db).list(args.state)]

    def line(r: dict[str, Any]) -> str:
        why = r["reason"] or r["last_error"] or ""
        first = r["text"].strip().splitlines()[0] if r["text"].strip() else ""
        return (f"{r['id']:>6}  {r['kind']:16}  {r['state']:9}  {why[:24]:24}  "
                f"{when(r['created_at']):19}  {r['session_key'][:40]:40}  "
                f"{_one_line(first, 60)}")

    return _listing(config, args, "notifications", fetch,
                    f"{'ID':>6}  {'KIND':16}  {'STATE':9}  {'REASON / ERROR':24}  "
                    f"{'CREATED':19}  {'SESSION KEY':40}  TEXT", line)


def approvals_command(config: Config, args: argparse.Namespace) -> int:
    from gateway.approvals.decisions import recent_approvals

    async def fetch(store: SessionStore) -> list[dict[str, Any]]:
        return [r.to_dict() for r in await recent_approvals(store.db)]

    def line(r: dict[str, Any]) -> str:
        decided = f"{r['decision'] or ''} {r['decided_by'] or ''}".strip()
        return (f"{r['id']:9}  {r['state']:9}  {decided[:20]:20}  {when(r['created_at']):19}  "
                f"{r['platform']:8}  {_one_line(r['command'], 60)}")

    return _listing(config, args, "approvals", fetch,
                    f"{'ID':9}  {'STATE':9}  {'DECIDED':20}  {'ASKED':19}  {'PLATFORM':8}  "
                    f"COMMAND", line)


def schedules_command(config: Config, args: argparse.Namespace) -> int:
    import tools.schedules as schedules
    from tools.schedule_spec import ScheduleError

    if args.action is None:
        async def fetch(store: SessionStore) -> list[dict[str, Any]]:
            return [r.to_dict() | {"line": r.line()}
                    for r in await schedules.list_schedules(store.db)]

        return _listing(config, args, "schedules", fetch,
                        "ID  WHEN  NEXT OR STATE  LAST  TASK  (session key below)",
                        lambda r: f"{r['line']}\n    {r['session_key']}")
    if not args.schedule_id:
        print(f"homing: schedules {args.action} needs a schedule id", file=sys.stderr)
        return EXIT_CONFIG
    if not existing_store(config):
        return 1

    async def change(store: SessionStore) -> schedules.ScheduleRecord:
        if args.action == "remove":
            return await schedules.remove(store.db, args.schedule_id)
        return await schedules.set_paused(store.db, args.schedule_id, args.action == "pause")

    try:
        record = with_store(config, change)
    except ScheduleError as exc:
        print(f"homing: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(record.to_dict(), indent=2))
    else:
        done = {"pause": "paused", "resume": "resumed", "remove": "removed"}[args.action]
        print(f"schedule {record.id} {done}" + (
            f"; next run {record.when(record.next_run_at)}" if args.action == "resume" else ""))
    return 0


def status_command(config: Config, args: argparse.Namespace) -> int:
    import gateway.cluster.rows as cluster
    from gateway.delivery.outbox import waiting_notices
    from gateway.store.status_file import read_status

    daemon = read_status(config.home_path) or {"running": False}
    report: dict[str, Any] = {"daemon": daemon, "state_db": config.state_shown}
    if existing_store(config, quiet=True):
        async def counts(store: SessionStore) -> dict[str, Any]:
            db = store.db
            (live,) = await db.fetchone("SELECT COUNT(*) FROM sessions WHERE ended_at IS NULL")
            (jobs,) = await db.fetchone(
                f"SELECT COUNT(*) FROM jobs WHERE state = '{JobState.RUNNING}'")
            states = dict(await db.fetchall(
                "SELECT state, COUNT(*) FROM notifications GROUP BY state"))
            parked = dict(await db.fetchall(
                "SELECT reason, COUNT(*) FROM notifications "
                f"WHERE state = '{NotificationState.PARKED}' GROUP BY reason"))
            # the instances sharing this store (gateway/cluster/instances.py) and what each holds
            now = await cluster.store_now(db)
            leases = await cluster.list_leases(db)
            jobs_on = dict(await db.fetchall(
                f"SELECT instance, COUNT(*) FROM jobs WHERE state = '{JobState.RUNNING}' "
                "AND instance IS NOT NULL GROUP BY instance"))
            instances = [i.to_dict(now) | {
                "running_jobs": jobs_on.get(i.name, 0),
                "lease_age_seconds": round(now - i.renewed_at, 1),
                "expires_in_seconds": round(i.lease_expires_at - now, 1),
                "leases": [lease.name for lease in leases if lease.held(now)
                           and (lease.holder, lease.holder_epoch) == (i.name, i.epoch)]}
                for i in await cluster.list_instances(db)]
            waiting = [w.to_dict(time.time()) for w in await waiting_notices(db)]
            return {"live_sessions": live, "running_jobs": jobs,
                    "pending_notifications": states.get("pending", 0) + states.get("claimed", 0),
                    "waiting_notices": waiting,
                    "parked_notifications": parked, "instances": instances,
                    "leases": [lease.to_dict(now) | {
                        "expires_in_seconds": round(lease.expires_at - now, 1)}
                        for lease in leases]}
        report.update(with_store(config, counts))
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    if daemon["running"]:
        print(f"daemon: running (pid {daemon['pid']}, up since {when(daemon['started_at'])})")
        for name, up in daemon.get("platforms", {}).items():
            print(f"  {name}: {'connected' if up else 'not connected'}")
    else:
        last = daemon.get("updated_at")
        print("daemon: not running" + (f" (last seen {when(last)})" if last else ""))
    if "live_sessions" not in report:
        print(f"no state database at {config.state_shown}")
        return 0
    parked = report["parked_notifications"]
    print(f"live sessions: {report['live_sessions']}")
    print(f"running jobs: {report['running_jobs']}")
    print(f"pending notifications: {report['pending_notifications']}")
    for w in report["waiting_notices"]:
        print(f"  {w['session_key']}: {w['count']} waiting, the oldest for "
              f"{w['oldest_wait_seconds']:g} s")
    print(f"parked notifications: {sum(parked.values())}" + (
        " (" + ", ".join(f"{r}: {n}" for r, n in sorted(parked.items())) + ")" if parked else ""))
    if report["instances"]:
        print("instances:")
    for i in report["instances"]:
        lease = (f"expires in {i['expires_in_seconds']} s" if i["state"] == "live"
                 else f"since {when(i['stopped_at'] or i['lease_expires_at'])}")
        print(f"  {i['name']}  epoch {i['epoch']}  {i['state']} ({lease}; renewed "
              f"{i['lease_age_seconds']} s ago)  host {i['host'] or '-'} pid {i['pid'] or '-'}"
              f"  {i['running_jobs']} running jobs"
              + (f"  holds {', '.join(i['leases'])}" if i["leases"] else ""))
    if report["leases"]:
        print("leases:")
    for lease in report["leases"]:
        holder = (f"{lease['holder']} (epoch {lease['holder_epoch']}), expires in "
                  f"{lease['expires_in_seconds']} s" if lease["held"] else "free")
        print(f"  {lease['name']}  lease epoch {lease['epoch']}  {holder}")
    return 0


def when(timestamp: float | None) -> str:
    if timestamp is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(timestamp))


def _one_line(text: str, width: int) -> str:
    """``text`` on one line of at most ``width`` characters, cut with an ellipsis."""
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[:width - 1] + "…"
