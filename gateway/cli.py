"""The ``homing`` command line."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from .config import Config, ConfigError, load_config
from .notifications import STATES
from .setup_options import add_setup_arguments
from .store import ARCHIVED_FILTERS, SessionStore

EXIT_CONFIG = 2
T = TypeVar("T")


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.own_config:  # setup writes the config, doctor reports a bad one as a check
        return int(args.func(args) or 0)
    try:
        config = load_config(args.config)
    except ConfigError as exc:
        print(f"homing: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    try:
        return int(args.func(config, args) or 0)
    except StoreUnreadable as exc:
        print(f"homing: {exc}", file=sys.stderr)
        return 1


def _parser() -> argparse.ArgumentParser:
    config_help = "config file (default: $HOMING_CONFIG, then $HOMING_HOME/config.yaml)"
    # --config may come before or after the command; the subcommand's copy
    # must not overwrite the top-level value with its default
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", metavar="PATH", default=argparse.SUPPRESS, help=config_help)
    parser = argparse.ArgumentParser(prog="homing",
                                     description="Chat gateway whose background work reports back.")
    parser.add_argument("--config", metavar="PATH", default=None, help=config_help)
    parser.set_defaults(own_config=False)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = sub.add_parser("run", parents=[common], help="run the daemon in the foreground")
    run.set_defaults(func=_run)

    check = sub.add_parser("check-config", parents=[common], help="validate the config and exit")
    check.set_defaults(func=_check_config)

    first_run = sub.add_parser("setup", parents=[common],
                               help="first run: choose platforms, check tokens, write the "
                                    "config and homing.env")
    add_setup_arguments(first_run)
    first_run.set_defaults(func=_setup, own_config=True)

    doctor = sub.add_parser("doctor", parents=[common],
                            help="check the installation live: config, tokens, platforms, "
                                 "store, service")
    doctor.add_argument("--json", action="store_true", help="one JSON array on stdout")
    doctor.set_defaults(func=_doctor, own_config=True)

    sessions = sub.add_parser("sessions", parents=[common], help="list sessions from the store")
    sessions.add_argument("--archived", choices=ARCHIVED_FILTERS, default="exclude")
    sessions.add_argument("--json", action="store_true", help="one JSON array on stdout")
    sessions.set_defaults(func=_sessions)

    jobs = sub.add_parser("jobs", parents=[common], help="list background jobs from the store")
    jobs.add_argument("--json", action="store_true", help="one JSON array on stdout")
    jobs.set_defaults(func=_jobs)

    notes = sub.add_parser("notifications", parents=[common],
                           help="list notifications in the outbox")
    notes.add_argument("--state", choices=STATES, help="only notifications in this state")
    notes.add_argument("--json", action="store_true", help="one JSON array on stdout")
    notes.set_defaults(func=_notifications)

    approvals = sub.add_parser("approvals", parents=[common],
                               help="commands waiting for approval, and recent decisions")
    approvals.add_argument("--json", action="store_true", help="one JSON array on stdout")
    approvals.set_defaults(func=_approvals)

    schedules = sub.add_parser("schedules", parents=[common],
                               help="list schedules, or pause, resume or remove one")
    schedules.add_argument("action", nargs="?", choices=("pause", "resume", "remove"),
                           help="what to do with the schedule ID (default: list them all)")
    schedules.add_argument("schedule_id", nargs="?", metavar="ID")
    schedules.add_argument("--json", action="store_true", help="JSON on stdout")
    schedules.set_defaults(func=_schedules)

    status = sub.add_parser("status", parents=[common],
                            help="whether the daemon runs, its platforms, sessions, jobs, notices")
    status.add_argument("--json", action="store_true", help="one JSON object on stdout")
    status.set_defaults(func=_status)

    service = sub.add_parser("service", parents=[common], help="run homing under systemd")
    service_sub = service.add_subparsers(dest="service_command", required=True, metavar="ACTION")
    for action, what in (("install", "write (and enable) a systemd unit"),
                         ("uninstall", "disable and remove the systemd unit")):
        cmd = service_sub.add_parser(action, parents=[common], help=what)
        scope = cmd.add_mutually_exclusive_group()
        scope.add_argument("--user", dest="scope", action="store_const", const="user",
                           help="a user unit in ~/.config/systemd/user (the default)")
        scope.add_argument("--system", dest="scope", action="store_const", const="system",
                           help="a system unit in /etc/systemd/system (as root)")
        cmd.add_argument("--unit-dir", type=Path, help="write the unit here instead")
        cmd.add_argument("--no-start", action="store_true",
                         help="do not run systemctl; print the commands instead")
        if action == "install":
            cmd.add_argument("--dry-run", action="store_true", help="print the unit and exit")
        cmd.set_defaults(func=_service, action=action, scope="user")

    pairing = sub.add_parser("pairing", parents=[common],
                             help="let unknown users in: list and approve pairing codes")
    pairing_sub = pairing.add_subparsers(dest="pairing_command", required=True, metavar="ACTION")
    approve = pairing_sub.add_parser("approve", parents=[common], help="approve a pairing code")
    approve.add_argument("platform", choices=["telegram", "discord"])
    approve.add_argument("code")
    approve.set_defaults(func=_pairing_approve)
    pending = pairing_sub.add_parser("list", parents=[common],
                                     help="pending pairing codes (--approved: paired users)")
    pending.add_argument("--approved", action="store_true",
                         help="list the users let in by pairing instead")
    pending.set_defaults(func=_pairing_list)
    revoke = pairing_sub.add_parser("revoke", parents=[common],
                                    help="take a paired user's access away")
    revoke.add_argument("platform", choices=["telegram", "discord"])
    revoke.add_argument("user", help="the user id")
    revoke.set_defaults(func=_pairing_revoke)
    return parser


def _run(config: Config, args: argparse.Namespace) -> int:
    from .daemon import StartupError, run_daemon
    from .logs import configure_logging, secrets_of

    configure_logging(config.logging, log_dir=config.home_path / "logs",
                      secrets=secrets_of(config))
    try:
        asyncio.run(run_daemon(config))
    except asyncio.CancelledError:
        print("homing: stopped without waiting for turns in flight", file=sys.stderr)
        return 130
    except StartupError as exc:
        print(f"homing: cannot start: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except (OSError, sqlite3.Error, RuntimeError) as exc:
        print(f"homing: cannot start: {exc}", file=sys.stderr)
        return 1
    return 0


def _setup(args: argparse.Namespace) -> int:
    from .setup import run_setup

    return run_setup(args, dict(os.environ))


def _doctor(args: argparse.Namespace) -> int:
    from .doctor import doctor_command

    return doctor_command(args.config, as_json=args.json)


def _check_config(config: Config, args: argparse.Namespace) -> int:
    from .daemon import StartupError, build_adapters

    try:
        if not build_adapters(config):
            raise StartupError("platforms: no platform is enabled; enable platforms.web at least")
    except StartupError as exc:
        print(f"homing: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    for warning in config_warnings(config):
        print(f"homing: warning: {warning}", file=sys.stderr)
    print(f"config OK (state directory {config.home_path})")
    return 0


def config_warnings(config: Config) -> list[str]:
    """What is valid but deserves a second look."""
    warnings = []
    for name in ("telegram", "discord"):
        platform = getattr(config.platforms, name)
        names = [u for u in platform.allowed_users if u.startswith("@")]
        if platform.enabled and names:
            warnings.append(
                f"platforms.{name}.allowed_users: {', '.join(names)} — usernames can change "
                f"hands; each is pinned to the first user id seen with it (give the ids, "
                f"which /start shows, to be sure)")
    return warnings


def _existing_store(config: Config) -> bool:
    """Read-only commands look at an existing state database and never make one."""
    if config.state_db.exists():
        return True
    print(f"homing: no state database at {config.state_db} (is HOMING_HOME or the config's "
          f"'home' set as for the daemon?)", file=sys.stderr)
    return False


class StoreUnreadable(Exception):
    """The state database cannot be used; the message says why, in one line."""


def _with_store(config: Config, use: Callable[[SessionStore], Awaitable[T]]) -> T:
    async def run() -> T:
        async with SessionStore(config.state_db) as store:
            return await use(store)
    try:
        return asyncio.run(run())
    except (sqlite3.DatabaseError, RuntimeError) as exc:  # damaged, foreign, or too new
        raise StoreUnreadable(f"the state database at {config.state_db} cannot be read: "
                              f"{exc}") from None


def _listing(config: Config, args: argparse.Namespace, what: str,
             fetch: Callable[[SessionStore], Awaitable[list[dict[str, Any]]]],
             header: str, line: Callable[[dict[str, Any]], str]) -> int:
    """The shape every listing command shares: JSON, or a table, or "no ..."."""
    if not _existing_store(config):
        return 1
    rows = _with_store(config, fetch)
    if args.json:
        print(json.dumps(rows, indent=2))
    elif not rows:
        print(f"no {what}")
    else:
        print(header)
        for row in rows:
            print(line(row))
    return 0


def _sessions(config: Config, args: argparse.Namespace) -> int:
    async def fetch(store: SessionStore) -> list[dict[str, Any]]:
        return [s.to_dict() for s in await store.list_sessions(args.archived)]

    def line(row: dict[str, Any]) -> str:
        state = "archived" if row["archived"] else ("ended" if row["ended_at"] else "live")
        title = (row["title"] or "-")[:20]
        return (f"{row['id']:32}  {state:9}  {_when(row['last_active_at']):19}  {title:20}  "
                f"{row['session_key']}")

    return _listing(config, args, "sessions", fetch,
                    f"{'SESSION ID':32}  {'STATE':9}  {'LAST ACTIVE':19}  {'TITLE':20}  "
                    "SESSION KEY", line)


def _jobs(config: Config, args: argparse.Namespace) -> int:
    from tools.job_record import JOB_COLUMNS, JobRecord

    async def fetch(store: SessionStore) -> list[dict[str, Any]]:
        rows = await store.db.fetchall(
            f"SELECT {JOB_COLUMNS} FROM jobs ORDER BY started_at DESC LIMIT 500")
        return [JobRecord.from_row(r).to_dict() for r in rows]

    def line(r: dict[str, Any]) -> str:
        code = "" if r["exit_code"] is None else str(r["exit_code"])
        return (f"{r['id']:11}  {r['state']:8}  {code:>5}  {_when(r['started_at']):19}  "
                f"{r['session_key'][:40]:40}  {' '.join(r['command'].split())[:60]}")

    return _listing(config, args, "jobs", fetch,
                    f"{'JOB':11}  {'STATE':8}  {'EXIT':>5}  {'STARTED':19}  "
                    f"{'SESSION KEY':40}  COMMAND", line)


def _notifications(config: Config, args: argparse.Namespace) -> int:
    from .outbox import Outbox

    async def fetch(store: SessionStore) -> list[dict[str, Any]]:
        return [n.to_dict() for n in await Outbox(store.db).list(args.state)]

    def line(r: dict[str, Any]) -> str:
        why = r["reason"] or r["last_error"] or ""
        return (f"{r['id']:>6}  {r['kind']:16}  {r['state']:9}  {why[:24]:24}  "
                f"{_when(r['created_at']):19}  {r['session_key']}")

    return _listing(config, args, "notifications", fetch,
                    f"{'ID':>6}  {'KIND':16}  {'STATE':9}  {'REASON / ERROR':24}  "
                    f"{'CREATED':19}  SESSION KEY", line)


def _approvals(config: Config, args: argparse.Namespace) -> int:
    from .approvals import recent_approvals

    async def fetch(store: SessionStore) -> list[dict[str, Any]]:
        return [r.to_dict() for r in await recent_approvals(store.db)]

    def line(r: dict[str, Any]) -> str:
        decided = f"{r['decision'] or ''} {r['decided_by'] or ''}".strip()
        return (f"{r['id']:9}  {r['state']:9}  {decided[:20]:20}  {_when(r['created_at']):19}  "
                f"{r['platform']:8}  {' '.join(r['command'].split())[:60]}")

    return _listing(config, args, "approvals", fetch,
                    f"{'ID':9}  {'STATE':9}  {'DECIDED':20}  {'ASKED':19}  {'PLATFORM':8}  "
                    f"COMMAND", line)


def _schedules(config: Config, args: argparse.Namespace) -> int:
    from tools import schedules
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
    if not _existing_store(config):
        return 1

    async def change(store: SessionStore) -> schedules.ScheduleRecord:
        if args.action == "remove":
            return await schedules.remove(store.db, args.schedule_id)
        return await schedules.set_paused(store.db, args.schedule_id, args.action == "pause")

    try:
        record = _with_store(config, change)
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


def _status(config: Config, args: argparse.Namespace) -> int:
    from .status_file import read_status

    daemon = read_status(config.home_path) or {"running": False}
    report: dict[str, Any] = {"daemon": daemon, "state_db": str(config.state_db)}
    if config.state_db.exists():
        async def counts(store: SessionStore) -> dict[str, Any]:
            db = store.db
            (live,) = await db.fetchone("SELECT COUNT(*) FROM sessions WHERE ended_at IS NULL")
            (jobs,) = await db.fetchone("SELECT COUNT(*) FROM jobs WHERE state = 'running'")
            states = dict(await db.fetchall(
                "SELECT state, COUNT(*) FROM notifications GROUP BY state"))
            parked = dict(await db.fetchall(
                "SELECT reason, COUNT(*) FROM notifications WHERE state = 'parked' "
                "GROUP BY reason"))
            return {"live_sessions": live, "running_jobs": jobs,
                    "pending_notifications": states.get("pending", 0) + states.get("claimed", 0),
                    "parked_notifications": parked}
        report.update(_with_store(config, counts))
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    if daemon["running"]:
        print(f"daemon: running (pid {daemon['pid']}, up since {_when(daemon['started_at'])})")
        for name, up in daemon.get("platforms", {}).items():
            print(f"  {name}: {'connected' if up else 'not connected'}")
    else:
        last = daemon.get("updated_at")
        print("daemon: not running" + (f" (last seen {_when(last)})" if last else ""))
    if "live_sessions" not in report:
        print(f"no state database at {config.state_db}")
        return 0
    parked = report["parked_notifications"]
    print(f"live sessions: {report['live_sessions']}")
    print(f"running jobs: {report['running_jobs']}")
    print(f"pending notifications: {report['pending_notifications']}")
    print(f"parked notifications: {sum(parked.values())}" + (
        " (" + ", ".join(f"{r}: {n}" for r, n in sorted(parked.items())) + ")" if parked else ""))
    return 0


def _service(config: Config, args: argparse.Namespace) -> int:
    from . import service
    from .config import find_config_file

    config_file = find_config_file(args.config, dict(os.environ))
    plan = service.plan(config, config_file, user=args.scope == "user", unit_dir=args.unit_dir)
    if getattr(args, "dry_run", False):
        print(plan.unit_text, end="")
        return 0
    try:
        if args.action == "install":
            lines = service.install(plan, start=not args.no_start)
        else:
            lines = service.uninstall(plan, stop=not args.no_start)
    except (OSError, subprocess.CalledProcessError) as exc:
        print(f"homing: {exc}", file=sys.stderr)
        return 1
    print("\n".join(lines))
    return 0


def _pairing_approve(config: Config, args: argparse.Namespace) -> int:
    from .pairing import Pairing, PairingError, PairingRequest, tell_approved

    if not _existing_store(config):
        return 1
    async def approve(store: SessionStore) -> tuple[PairingRequest, bool]:
        request = await Pairing(store.db).approve(args.platform, args.code)
        return request, await tell_approved(store, config, request)

    try:
        request, told = _with_store(config, approve)
    except PairingError as exc:
        print(f"homing: {exc}", file=sys.stderr)
        return 1
    who = f"@{request.user_name}" if request.user_name else "the user"
    print(f"approved {who} (id {request.user_id}) on {request.platform}"
          + ("; they are told so in their chat" if told else ""))
    return 0


def _pairing_list(config: Config, args: argparse.Namespace) -> int:
    from .pairing import Pairing

    if not _existing_store(config):
        return 1
    if args.approved:
        users = _with_store(config, lambda store: Pairing(store.db).approved())
        if not users:
            print("no users paired")
        for platform, user_id, name, at in users:
            print(f"{platform:9}  {user_id:>14}  @{name or '-':20}  approved {_when(at)}")
        return 0
    rows = _with_store(config, lambda store: Pairing(store.db).pending())
    if not rows:
        print("no pending pairing codes")
    for r in rows:
        print(f"{r.code}  {r.platform:9}  {r.user_id:>14}  @{r.user_name or '-':20}  "
              f"expires {_when(r.expires_at)}")
    return 0


def _pairing_revoke(config: Config, args: argparse.Namespace) -> int:
    from .pairing import Pairing

    if not _existing_store(config):
        return 1
    if not _with_store(config, lambda store: Pairing(store.db).revoke(args.platform,
                                                                       args.user)):
        print(f"homing: {args.user} was not paired on {args.platform}", file=sys.stderr)
        return 1
    print(f"revoked {args.user} on {args.platform}: their next message gets a pairing code")
    return 0


def _when(timestamp: float | None) -> str:
    if timestamp is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(timestamp))


if __name__ == "__main__":
    sys.exit(main())
