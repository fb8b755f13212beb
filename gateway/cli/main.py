"""The ``homing`` command line."""

from __future__ import annotations

import argparse
import asyncio
import os
import sqlite3
import subprocess
import sys
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any

from gateway.cli.listings import (
    StoreUnreadable,
    approvals_command,
    existing_store,
    jobs_command,
    notifications_command,
    schedules_command,
    sessions_command,
    status_command,
    when,
    with_store,
)
from gateway.cli.setup_options import add_setup_arguments
from gateway.cli.trace import trace_command
from gateway.config.file import ignored_config_files
from gateway.config.home_check import home_problem
from gateway.config.settings import Config, ConfigError, find_config_file, load_config
from gateway.config.warnings import config_warnings
from gateway.delivery.notifications import STATES
from gateway.sessions.store import ARCHIVED_FILTERS, SessionStore

EXIT_CONFIG = 2


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        code = _dispatch(args)
        sys.stdout.flush()  # a closed pipe shows here, not at exit
        return code
    except BrokenPipeError:
        # the reader went away (`homing sessions | head -1`): that is not an error,
        # and the exit-time flush must not raise again
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def _dispatch(args: argparse.Namespace) -> int:
    if args.own_config:  # setup writes the config, doctor reports a bad one as a check
        return int(args.func(args) or 0)
    from gateway.config.env_file import with_env_file

    environ = with_env_file(os.environ, find_config_file(args.config, dict(os.environ)))
    try:
        config = load_config(args.config, environ)
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
    parser.add_argument("--version", action="version", version=f"homing {_version()}")
    parser.set_defaults(own_config=False)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = sub.add_parser("run", parents=[common], help="run the daemon in the foreground")
    run.add_argument("--host", help="the web chat's address (overrides platforms.web.host)")
    run.add_argument("--port", type=_port, help="the web chat's port (overrides "
                                                "platforms.web.port; 0 picks a free one)")
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
    sessions.add_argument("--limit", type=_positive, default=1000, metavar="N",
                          help="at most N, most recently active first (default: 1000); "
                               "stderr says when there are more")
    sessions.add_argument("--offset", type=_whole, default=0, metavar="N",
                          help="skip the first N (the next page starts at the offset "
                               "stderr gives)")
    sessions.set_defaults(func=sessions_command)

    jobs = sub.add_parser("jobs", parents=[common], help="list background jobs from the store")
    jobs.add_argument("--json", action="store_true", help="one JSON array on stdout")
    jobs.add_argument("--limit", type=_positive, metavar="N",
                      help="only the newest N (default: all); stderr says how many were "
                           "left out")
    jobs.set_defaults(func=jobs_command)

    notes = sub.add_parser("notifications", parents=[common],
                           help="list notifications in the outbox")
    notes.add_argument("--state", choices=STATES, help="only notifications in this state")
    notes.add_argument("--json", action="store_true", help="one JSON array on stdout")
    notes.set_defaults(func=notifications_command)

    approvals = sub.add_parser("approvals", parents=[common],
                               help="commands waiting for approval, and recent decisions")
    approvals.add_argument("--json", action="store_true", help="one JSON array on stdout")
    approvals.set_defaults(func=approvals_command)
    approvals_sub = approvals.add_subparsers(dest="approvals_action", metavar="ACTION")
    would_ask = approvals_sub.add_parser(
        "check", parents=[common],
        help="whether a command would be asked, and by which rule (exit 0 asked, 1 not); "
             "it is only read, never run")
    would_ask.add_argument("shell_command", metavar="CMD",
                           help="the command as the model would write it, one argument: "
                                "homing approvals check -- 'CMD'")
    would_ask.set_defaults(func=_approvals_check)

    schedules = sub.add_parser("schedules", parents=[common],
                               help="list schedules, or pause, resume or remove one")
    schedules.add_argument("action", nargs="?", choices=("pause", "resume", "remove"),
                           help="what to do with the schedule ID (default: list them all)")
    schedules.add_argument("schedule_id", nargs="?", metavar="ID")
    schedules.add_argument("--json", action="store_true", help="JSON on stdout")
    schedules.set_defaults(func=schedules_command)

    trace = sub.add_parser("trace", parents=[common],
                           help="the story of a job, notice or schedule: where it started, "
                                "whom its notices went to, each attempt, where it is now")
    trace.add_argument("what", metavar="ID",
                       help="a job id, a notice id, a schedule id or a delegation id")
    trace.add_argument("--json", action="store_true", help="one JSON object on stdout")
    trace.set_defaults(func=trace_command)

    status = sub.add_parser("status", parents=[common],
                            help="whether the daemon runs, its platforms, sessions, jobs, notices")
    status.add_argument("--json", action="store_true", help="one JSON object on stdout")
    status.set_defaults(func=status_command)

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
            cmd.add_argument("--yes", action="store_true",
                             help="copy the variables the config needs from this shell into "
                                  "$HOMING_HOME/homing.env without asking")
        cmd.set_defaults(func=_service, action=action, scope="user")

    pairing = sub.add_parser("pairing", parents=[common],
                             help="let unknown users in: list and approve pairing codes")
    pairing_sub = pairing.add_subparsers(dest="pairing_command", required=True, metavar="ACTION")
    approve = pairing_sub.add_parser("approve", parents=[common], help="approve a pairing code")
    approve.add_argument("platform", type=_pairing_platform,
                         help="the platform, or platform/account for one of several bots")
    approve.add_argument("code")
    approve.set_defaults(func=_pairing_approve)
    pending = pairing_sub.add_parser("list", parents=[common],
                                     help="pending pairing codes (--approved: paired users)")
    pending.add_argument("--approved", action="store_true",
                         help="list the users let in by pairing instead")
    pending.set_defaults(func=_pairing_list)
    revoke = pairing_sub.add_parser("revoke", parents=[common],
                                    help="take a paired user's access away")
    revoke.add_argument("platform", type=_pairing_platform,
                        help="the platform, or platform/account for one of several bots")
    revoke.add_argument("user", help="the user id")
    revoke.set_defaults(func=_pairing_revoke)
    return parser


def _pairing_platforms() -> list[str]:
    """The platforms whose unknown users may ask for a pairing code, by every CLI name."""
    from gateway.config.registry import platforms

    return [name for spec in platforms().specs if spec.pairing
            for name in (spec.name, *spec.cli_names)]


def _pairing_platform(given: str) -> str:
    """A pairing platform by any of its CLI names, with its account when one of several
    bots is meant (``telegram/team``), as its conversations name it."""
    from gateway.config.platform import ACCOUNT_NAME, DEFAULT_ACCOUNT, account_platform
    from gateway.config.registry import platforms

    name, _, account = given.partition("/")
    spec = platforms().get(name)
    if spec is None or not spec.pairing:
        raise argparse.ArgumentTypeError(
            f"{given!r}: choose from {', '.join(_pairing_platforms())} "
            f"(or platform/account)")
    if account and not ACCOUNT_NAME.fullmatch(account):
        raise argparse.ArgumentTypeError(f"{account!r} is not an account name")
    return account_platform(spec.name, account or DEFAULT_ACCOUNT)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("homing")
    except PackageNotFoundError:  # run from a checkout that was not installed
        from gateway import __version__
        return __version__


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of at least 1")
    return int(text)


def _whole(text: str) -> int:
    if not (text.isascii() and text.isdigit()):
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number (0 or more)")
    return int(text)


def _port(text: str) -> int:
    if not text.isdigit() or not 0 <= int(text) <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number (0-65535)")
    return int(text)


def _with_web_overrides(config: Config, args: argparse.Namespace) -> Config:
    """``run --host/--port``, checked by the same rules as the config file's values."""
    from gateway.config.settings import parse_config

    web = {k: v for k, v in (("host", args.host), ("port", args.port)) if v is not None}
    if not web:
        return config
    raw = config.model_dump(mode="python")
    raw["platforms"]["web"].update(web)
    _unwrap_secrets(raw)
    return parse_config(raw, {}, "the command line")


def _unwrap_secrets(value: Any) -> None:
    """A dump keeps SecretStr objects; a new config is parsed from their values."""
    from pydantic import SecretStr

    items = value.items() if isinstance(value, dict) else enumerate(value) \
        if isinstance(value, list) else ()
    for key, item in list(items):
        if isinstance(item, SecretStr):
            value[key] = item.get_secret_value()
        else:
            _unwrap_secrets(item)


def _run(config: Config, args: argparse.Namespace) -> int:
    import structlog

    from gateway.daemon.assembly import InstanceEnded, StartupError, run_daemon
    from gateway.daemon.event_loop import UnknownLoop, loop_factory
    from gateway.telemetry.logs import configure_logging, secrets_of

    try:
        config = _with_web_overrides(config, args)
    except ConfigError as exc:
        print(f"homing: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    if _unusable_home(config, args):
        return EXIT_CONFIG
    try:
        configure_logging(config.logging, log_dir=config.home_path / "logs",
                          secrets=secrets_of(config), final=True)
    except OSError as exc:  # e.g. a file named logs in the home
        print(f"homing: cannot start: the log folder cannot be opened: {exc}", file=sys.stderr)
        return 1
    for warning in ignored_config_files(args.config, dict(os.environ)):
        structlog.get_logger(__name__).warning("config_file_ignored", detail=warning)
    try:
        _name, factory = loop_factory()
    except UnknownLoop as exc:
        print(f"homing: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    try:
        with asyncio.Runner(loop_factory=factory) as runner:
            runner.run(run_daemon(config))
    except asyncio.CancelledError:
        print("homing: stopped without waiting for turns in flight", file=sys.stderr)
        return 130
    except StartupError as exc:
        print(f"homing: cannot start: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except InstanceEnded as exc:
        print(f"homing: stopped: {exc}", file=sys.stderr)
        return 1
    except (OSError, sqlite3.Error, RuntimeError) as exc:
        print(f"homing: cannot start: {exc}", file=sys.stderr)
        return 1
    return 0


def _setup(args: argparse.Namespace) -> int:
    from gateway.cli.setup import run_setup

    return run_setup(args, dict(os.environ))


def _doctor(args: argparse.Namespace) -> int:
    from gateway.cli.doctor import doctor_command

    return doctor_command(args.config, as_json=args.json)


def _check_config(config: Config, args: argparse.Namespace) -> int:
    from gateway.daemon.assembly import StartupError, build_adapters

    try:
        if not build_adapters(config):
            raise StartupError("platforms: no platform is enabled; enable platforms.web at least")
    except StartupError as exc:
        print(f"homing: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    if _unusable_home(config, args):
        return EXIT_CONFIG
    environ = dict(os.environ)
    for warning in [*ignored_config_files(args.config, environ), *config_warnings(config)]:
        print(f"homing: warning: {warning}", file=sys.stderr)
    file = find_config_file(args.config, environ)
    checked = str(file) if file is not None else "no config file, so the defaults"
    print(f"config OK: {checked} (state directory {config.home_path})")
    return 0


def _approvals_check(config: Config, args: argparse.Namespace) -> int:
    """Whether the config's approvals would ask about a ``terminal`` command, and why:
    exit 0 asked, 1 not asked. The command is only read, never run."""
    from gateway.approvals.rules import ApprovalPolicy

    command: str = args.shell_command
    if not command.strip():
        print("homing: approvals check: give the command to check as one quoted argument: "
              "homing approvals check -- 'CMD'", file=sys.stderr)
        return EXIT_CONFIG
    approvals = config.approvals
    policy = ApprovalPolicy(approvals.mode, approvals.patterns, approvals.allow)
    need = policy.check("terminal", command)
    if need is not None:
        print(f"asked: {need.grant} ({need.reason})")
        return 0
    if approvals.mode == "off":
        print("not asked: approvals.mode is off")
    elif (allowed := policy.allowed_by(command)) is not None:
        print(f"not asked: approvals.allow {allowed!r} exempts it")
    else:
        print(f"not asked: no rule matches (approvals.mode: {approvals.mode})")
    return 1


def _unusable_home(config: Config, args: argparse.Namespace) -> bool:
    """The state directory cannot be made or written: said as a config error naming
    ``home``, since that is where it is set (or $HOMING_HOME)."""
    problem = home_problem(config.home_path)
    if problem is None:
        return False
    environ = dict(os.environ)
    file = find_config_file(args.config, environ)
    field = "home ($HOMING_HOME)" if environ.get("HOMING_HOME") else "home"
    error = ConfigError(str(file) if file else "<defaults>", [(field, problem)])
    print(f"homing: {error}", file=sys.stderr)
    return True


def _service(config: Config, args: argparse.Namespace) -> int:
    import gateway.systemd.unit as service
    config_file = find_config_file(args.config, dict(os.environ))
    plan = service.plan(config, config_file, user=args.scope == "user", unit_dir=args.unit_dir)
    if getattr(args, "dry_run", False):
        print(plan.unit_text, end="")
        return 0
    try:
        if args.action == "install":
            lines = service.prepare_env_file(config, config_file, os.environ,
                                             partial(_may_copy, args.yes))
            lines += service.install(plan, start=not args.no_start)
        else:
            lines = service.uninstall(plan, stop=not args.no_start)
    except service.MissingVariables as exc:
        print(f"homing: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except (OSError, subprocess.CalledProcessError) as exc:
        print(f"homing: {exc}", file=sys.stderr)
        return 1
    print("\n".join(lines))
    return 0


def _may_copy(yes: bool, names: list[str]) -> bool:
    """Asked before secrets from the shell go into the environment file."""
    if yes:
        return True
    if not sys.stdin.isatty():
        print(f"homing: the service needs {', '.join(names)} in its environment file; run "
              f"again with --yes to copy them from this shell", file=sys.stderr)
        return False
    answer = input(f"copy {', '.join(names)} from this shell into the service's environment "
                   f"file (mode 0600)? [Y/n] ")
    return answer.strip().lower() in ("", "y", "yes")


def _pairing_approve(config: Config, args: argparse.Namespace) -> int:
    from gateway.messages.pairing import Pairing, PairingError, PairingRequest, tell_approved

    if not existing_store(config):
        return 1
    async def approve(store: SessionStore) -> tuple[PairingRequest, bool]:
        request = await Pairing(store.db).approve(args.platform, args.code)
        return request, await tell_approved(store, config, request)

    try:
        request, told = with_store(config, approve)
    except PairingError as exc:
        print(f"homing: {exc}", file=sys.stderr)
        return 1
    who = f"@{request.user_name}" if request.user_name else "the user"
    print(f"approved {who} (id {request.user_id}) on {request.platform}"
          + ("; they are told so in their chat" if told else ""))
    return 0


def _pairing_list(config: Config, args: argparse.Namespace) -> int:
    from gateway.messages.pairing import Pairing

    if not existing_store(config):
        return 1
    if args.approved:
        users = with_store(config, lambda store: Pairing(store.db).approved())
        if not users:
            print("no users paired")
        for platform, user_id, name, at in users:
            print(f"{platform:9}  {user_id:>14}  @{name or '-':20}  approved {when(at)}")
        return 0
    rows = with_store(config, lambda store: Pairing(store.db).pending())
    if not rows:
        print("no pending pairing codes")
    for r in rows:
        print(f"{r.code}  {r.platform:9}  {r.user_id:>14}  @{r.user_name or '-':20}  "
              f"expires {when(r.expires_at)}")
    return 0


def _pairing_revoke(config: Config, args: argparse.Namespace) -> int:
    from gateway.messages.pairing import Pairing

    if not existing_store(config):
        return 1
    if not with_store(config, lambda store: Pairing(store.db).revoke(args.platform,
                                                                       args.user)):
        print(f"homing: {args.user} was not paired on {args.platform}", file=sys.stderr)
        return 1
    print(f"revoked {args.user} on {args.platform}: their next message gets a pairing code")
    return 0

