"""The checks ``homing doctor`` makes on this machine: the state database (intact,
ours, private), free disk, the systemd unit and linger, and the environment file the
unit reads the secrets from. (The web chat's port and token are checked by its own
package, as every platform's probes are.)

Plain blocking code, run outside any event loop; every subprocess has a timeout.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sqlite3
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from contextlib import closing
from pathlib import Path

import gateway.systemd.unit as service
from gateway.config.env_file import read_env_file, referenced_variables
from gateway.config.settings import Config
from gateway.platforms.checks import Check, fail, ok, skip, warn
from gateway.store.migrations import MIGRATIONS

#: under this much free disk the database cannot be trusted to commit; under the
#: second, it is time to look
DISK_FAIL_BYTES = 100 * 1024 * 1024
DISK_WARN_BYTES = 1024 * 1024 * 1024
SUBPROCESS_TIMEOUT = 5.0


def local_checks(config: Config, config_file: Path | None) -> list[Check]:
    return [state_database_check(config),
            state_modes_check(config), disk_check(config), *service_checks(config, config_file)]


# ---------------------------------------------------------------------- state

def state_database_check(config: Config) -> Check:
    name = "state database"
    if config.store.url is not None:
        return postgres_check(config)
    db = config.state_db
    if not db.exists():
        return ok(name, f"none yet at {db}; it is made at the first start")
    moved = f"{db}.damaged"
    # no -wal file: nobody has it open, and reading it as immutable leaves no -wal and
    # -shm behind (a read-only open of a WAL database would make both)
    idle = not db.with_name(db.name + "-wal").exists()
    try:
        uri = f"file:{urllib.parse.quote(str(db))}?mode=ro" + ("&immutable=1" if idle else "")
        with closing(sqlite3.connect(uri, uri=True, timeout=5)) as conn:
            verdict = [row[0] for row in conn.execute("PRAGMA quick_check").fetchall()]
            (version,) = conn.execute("PRAGMA user_version").fetchone()
            tables = conn.execute("SELECT count(*) FROM sqlite_master WHERE type = 'table' "
                                  "AND name NOT LIKE 'sqlite_%'").fetchone()[0]
    except sqlite3.DatabaseError as exc:
        return fail(name, f"{db} cannot be read: {exc}",
                    f"restore it from a backup, or move it aside (mv {shlex.quote(str(db))} "
                    f"{shlex.quote(moved)}) and let homing start a new one")
    if verdict != ["ok"]:
        return fail(name, f"{db} is damaged: {'; '.join(verdict[:3])}",
                    f"restore it from a backup, or move it aside (mv {shlex.quote(str(db))} "
                    f"{shlex.quote(moved)}) and let homing start a new one")
    if version > len(MIGRATIONS):
        return fail(name, f"{db} is at schema version {version}, newer than this homing "
                          f"({len(MIGRATIONS)})", "upgrade homing")
    if version == 0 and tables:
        return fail(name, f"{db} is another program's database",
                    "point HOMING_HOME (or the config's home) elsewhere")
    return ok(name, f"{db} is intact (schema version {version})")


def postgres_check(config: Config) -> Check:
    """A PostgreSQL store: reachable, and Homing's (or empty) at a version this homing
    knows. Read only: the daemon migrates it, not the doctor."""
    import psycopg

    name, where = "state database", config.state_shown
    try:
        with psycopg.connect(str(config.state_location), connect_timeout=5) as conn:
            known = conn.execute("SELECT to_regclass('homing_schema') IS NOT NULL").fetchone()
            row = conn.execute("SELECT version FROM homing_schema").fetchone() \
                if known and known[0] else None
            tables = conn.execute("SELECT count(*) FROM information_schema.tables "
                                  "WHERE table_schema = current_schema()").fetchone()
    except psycopg.Error as exc:
        return fail(name, f"{where} cannot be used: {' '.join(str(exc).split())}",
                    "check store.url, that the server runs and that this user may connect")
    version = int(row[0]) if row else 0
    if version > len(MIGRATIONS):
        return fail(name, f"{where} is at schema version {version}, newer than this homing "
                          f"({len(MIGRATIONS)})", "upgrade homing")
    if version == 0 and tables and tables[0]:
        return fail(name, f"{where} holds another program's tables",
                    "give homing a database of its own in store.url")
    return ok(name, f"PostgreSQL at {where} (schema version {version})")


def state_modes_check(config: Config) -> Check:
    """The state directory holds tokens, conversations and job output: the operator's
    alone (0700 and 0600 — what homing makes, and narrows to at start)."""
    name = "state file modes"
    home = config.home_path
    if not home.exists():
        return ok(name, f"{home} does not exist yet; it is made 0700")
    wide = []
    for path in (home, config.state_db, home / "state.db-wal", home / "state.db-shm"):
        try:
            mode = path.stat().st_mode & 0o777
        except OSError:
            continue
        if mode & 0o077:
            wide.append((path, mode))
    if not wide:
        return ok(name, f"{home} and its database are private to their owner")
    listed = ", ".join(f"{path} is {mode:04o}" for path, mode in wide)
    fix = " && ".join(f"chmod {'700' if p.is_dir() else '600'} {shlex.quote(str(p))}"
                      for p, _ in wide) + " (homing also narrows them at its next start)"
    if any(mode & 0o004 and not path.is_dir() for path, mode in wide):
        return fail(name, f"others can read the database: {listed}", fix)
    return warn(name, f"wider than private: {listed}", fix)


def disk_check(config: Config) -> Check:
    name = "free disk"
    place = config.home_path
    while not place.exists() and place != place.parent:
        place = place.parent
    free = shutil.disk_usage(place).free
    detail = f"{_size(free)} free at {place}"
    if free < DISK_FAIL_BYTES:
        return fail(name, detail + ": too little for the database to commit safely",
                    "free some space on that file system")
    if free < DISK_WARN_BYTES:
        return warn(name, detail, "free some space on that file system soon")
    return ok(name, detail)


def _size(count: int) -> str:
    return f"{count / 1024 ** 3:.1f} GB" if count >= 1024 ** 3 else f"{count // 1024 ** 2} MB"


# ---------------------------------------------------------------------- systemd

def service_checks(config: Config, config_file: Path | None) -> list[Check]:
    """The unit where ``homing service install`` puts it, enabled and active; for a
    user unit, linger (without it the service stops at logout)."""
    name = "systemd unit"
    found = [(p.unit_path, user) for user in (True, False)
             if (p := service.plan(config, config_file, user=user)).unit_path.exists()]
    systemd = service.systemd_running() and shutil.which("systemctl") is not None
    if not found:
        if not systemd:
            return [skip(name, "systemd is not running here")]
        user_unit = service.plan(config, config_file, user=True).unit_path
        return [warn(name, f"not installed (no {user_unit})", "homing service install")]
    unit, user = found[0]
    expected = service.plan(config, config_file, user=user).unit_text
    stale = "; it differs from what `homing service install` writes now" \
        if unit.read_text(encoding="utf-8", errors="replace") != expected else ""
    if not systemd:
        return [warn(name, f"{unit} is installed{stale}, but systemd is not running here",
                     "start homing another way (homing run), or on a machine with systemd")]
    systemctl = ["systemctl", "--user"] if user else ["systemctl"]
    enabled = _run([*systemctl, "is-enabled", service.UNIT_NAME])
    active = _run([*systemctl, "is-active", service.UNIT_NAME])
    checks = []
    if enabled != "enabled":
        checks.append(fail(name, f"{unit} is installed but not enabled ({enabled})",
                           f"{' '.join(systemctl)} enable --now {service.UNIT_NAME}"))
    elif active != "active":
        checks.append(fail(name, f"{unit} is enabled but not running ({active})",
                           f"{' '.join(systemctl)} start {service.UNIT_NAME}; see "
                           f"journalctl {'--user ' if user else ''}-u homing -e"))
    elif stale:
        checks.append(warn(name, f"{unit} is enabled and running{stale}",
                           "homing service install"))
    else:
        checks.append(ok(name, f"{unit} is enabled and running"))
    if user:
        checks.append(_linger_check())
    return checks


def _linger_check() -> Check:
    name = "linger"
    user = os.environ.get("USER") or os.environ.get("LOGNAME") or str(os.getuid())
    answer = _run(["loginctl", "show-user", user, "-p", "Linger"])
    if answer == "Linger=yes":
        return ok(name, f"on for {user}: the user service runs without a login")
    if answer.startswith("Linger="):
        return warn(name, f"off for {user}: the user service stops when you log out",
                    f"loginctl enable-linger {user}")
    return warn(name, f"loginctl could not tell ({answer})", f"loginctl enable-linger {user}")


def _run(command: list[str]) -> str:
    """A one-line answer of a query command (its exit status is part of the answer)."""
    try:
        done = subprocess.run(command, capture_output=True, text=True,
                              timeout=SUBPROCESS_TIMEOUT, check=False)
    except subprocess.TimeoutExpired:
        return f"{command[0]} did not answer within {SUBPROCESS_TIMEOUT:g} s"
    except OSError as exc:
        return f"cannot run {command[0]}: {exc.strerror or exc}"
    return (done.stdout.strip() or done.stderr.strip() or f"exit {done.returncode}")


# ---------------------------------------------------------------------- secrets

def env_file_check(path: Path, config_text: str, environ: Mapping[str, str]) -> Check:
    """The file the unit reads the config's ``${VAR}`` from: there, 0600, defining them."""
    name = "environment file"
    needed = sorted(n for n, has_default in referenced_variables(config_text).items()
                    if not has_default)
    if not path.exists():
        if not needed:
            return ok(name, f"none at {path}, and the config refers to no variable")
        return warn(name, f"none at {path}: {', '.join(needed)} come from this shell only, "
                          f"which the service does not see",
                    f"put them in {path} (NAME=value, chmod 600)")
    try:
        mode = path.stat().st_mode & 0o777
        defined = read_env_file(path)
    except (OSError, UnicodeDecodeError) as exc:
        return fail(name, f"{path} cannot be read: {exc}", f"chmod 600 {path} and check it")
    if mode & 0o077:
        return fail(name, f"{path} is {mode:04o}: others can read the tokens in it",
                    f"chmod 600 {shlex.quote(str(path))}")
    missing = [n for n in needed if n not in defined]
    if missing:
        shell_only = all(n in environ for n in missing)
        problem = (f"{path} does not define {', '.join(missing)}"
                   + (" (only this shell does; the service does not see it)" if shell_only
                      else ""))
        fix = f"add {'=…, '.join(missing)}=… to {path}"
        return warn(name, problem, fix) if shell_only else fail(name, problem, fix)
    return ok(name, f"{path} (0600) defines {', '.join(needed) or 'no variable the config uses'}")
