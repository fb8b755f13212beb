"""A throwaway PostgreSQL cluster for the tests, started on demand.

``initdb`` into a temporary directory (in /dev/shm where there is one), ``pg_ctl
start`` on a free 127.0.0.1 port with its socket inside that directory, no
durability (``fsync=off``: a crash loses a test run, not data), password-less on
127.0.0.1 only, and one database in it; stopped with ``pg_ctl stop -m fast`` and
removed at the end of the test session. PostgreSQL refuses to run as root, so when
the tests run as root the cluster belongs to the ``postgres`` user (``nobody`` when
there is none) and its programs run through ``runuser`` (else ``setpriv``, else
``su``).

Fixtures (tests/conftest.py imports them):

- ``pg_cluster``: the running :class:`PgCluster`, one per test session;
- ``pg_url``: ``postgresql://homing@127.0.0.1:PORT/homing``, shared by the session;
- ``pg_fresh_url``: a database of the test's own (``CREATE DATABASE … TEMPLATE
  template0``, about 20 ms; dropped after it), so nothing carries over, NOTIFY
  channels included.

Without PostgreSQL's programs the tests that ask for these skip, saying how to
install them; with ``HOMING_REQUIRE_POSTGRES=1`` (CI) they fail instead. The
programs are looked for on PATH, in ``pg_config --bindir`` and in
/usr/lib/postgresql/*/bin (Debian keeps them there, off PATH).

``python -m tests.pg_cluster`` starts one by hand and prints its URL until Ctrl-C.
"""

from __future__ import annotations

import itertools
import os
import pwd
import re
import shlex
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

MISSING = ("PostgreSQL is not installed: apt-get install postgresql "
           "(or set HOMING_REQUIRE_POSTGRES=1 to fail instead)")
SUPERUSER = "homing"
DATABASE = "homing"
#: a test cluster gives up durability for speed; it lives for one test session
SETTINGS = {
    "listen_addresses": "'127.0.0.1'",
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "wal_level": "minimal",
    "max_wal_senders": "0",
    "autovacuum": "off",
    "jit": "off",
    "shared_buffers": "'32MB'",
    "max_connections": "200",
    "log_min_messages": "warning",
    "log_min_error_statement": "panic",  # a test provoking an error is not news
}
#: nobody but this machine's loopback, and no password (the cluster is the test's)
HBA = "host all all 127.0.0.1/32 trust\n"
SETTINGS_FILE = "homing_test.conf"  # included by postgresql.conf
START_ATTEMPTS = 5  # another process may take the free port between choosing and binding


class PostgresMissing(RuntimeError):
    """PostgreSQL's server programs cannot be found (or cannot be run as a non-root user)."""


def find_bindir() -> Path | None:
    """The directory holding ``initdb``, ``pg_ctl`` and ``postgres``, or None."""
    candidates: list[Path] = []
    on_path = shutil.which("initdb")
    if on_path:  # /usr/local/bin/initdb may be a symlink into the real directory
        candidates += [Path(on_path).resolve().parent, Path(on_path).parent]
    pg_config = shutil.which("pg_config")
    if pg_config:
        try:
            out = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True,
                                 timeout=10, check=True).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            out = ""
        if out:
            candidates.append(Path(out))
    candidates += sorted(Path("/usr/lib/postgresql").glob("*/bin"),
                         key=lambda p: _version(p.parent.name), reverse=True)
    for directory in candidates:
        if all(os.access(directory / name, os.X_OK) for name in ("initdb", "pg_ctl", "postgres")):
            return directory
    return None


def _version(name: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", name)) or (0,)


class PgCluster:
    """One PostgreSQL server in a directory of its own; ``start`` and ``stop`` it, or
    use it as a context manager."""

    def __init__(self, bindir: Path | None = None) -> None:
        found = bindir or find_bindir()
        if found is None:
            raise PostgresMissing(MISSING)
        self.bindir = found
        self._as_owner = _runner()
        self.root: Path | None = None
        self.port = 0
        #: seconds the last start took (initdb and the server up); the tests print it
        self.start_seconds = 0.0

    @property
    def data(self) -> Path:
        assert self.root is not None, "the cluster is not started"
        return self.root / "data"

    @property
    def log_path(self) -> Path:
        assert self.root is not None, "the cluster is not started"
        return self.root / "server.log"

    def url(self, database: str = DATABASE) -> str:
        return f"postgresql://{SUPERUSER}@127.0.0.1:{self.port}/{database}"

    def start(self) -> None:
        began = time.monotonic()
        self.root = Path(tempfile.mkdtemp(prefix="homing-pg-", dir=_scratch()))
        try:
            self._as_owner.take(self.root)
            self._run("initdb", "-D", str(self.data), "-U", SUPERUSER, "-A", "trust",
                      "-E", "UTF8", "--locale=C", "--no-sync", "--no-instructions")
            (self.data / "pg_hba.conf").write_text(HBA)
            with (self.data / "postgresql.conf").open("a") as conf:
                conf.write(f"include = '{SETTINGS_FILE}'\n")
            self._listen()
            self._run("createdb", "-h", "127.0.0.1", "-p", str(self.port), "-U", SUPERUSER,
                      DATABASE, as_owner=False)
        except BaseException:
            self.stop()
            raise
        self.start_seconds = time.monotonic() - began

    def _listen(self) -> None:
        """Start the server on a free port; another port when that one was taken meanwhile."""
        assert self.root is not None
        for attempt in range(START_ATTEMPTS):
            self.port = _free_port()
            settings = {**SETTINGS, "port": str(self.port),
                        "unix_socket_directories": f"'{self.root}'"}
            with (self.data / SETTINGS_FILE).open("w") as conf:
                conf.writelines(f"{key} = {value}\n" for key, value in settings.items())
            try:
                self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log_path),
                          "-w", "-t", "60", "start")
                return
            except subprocess.CalledProcessError:
                log = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
                if "could not bind" not in log or attempt == START_ATTEMPTS - 1:
                    raise RuntimeError(f"PostgreSQL did not start (port {self.port}):\n"
                                       f"{log[-2000:]}") from None

    def restart(self) -> None:
        """Stop the server (its sessions are ended) and start it again on its port, as
        an upgrade of the package would: clients must connect again."""
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log_path), "-m", "fast",
                  "-w", "-t", "60", "restart")

    def halt(self) -> None:
        """Stop the server (its sessions are ended) and leave it down, data kept: an
        outage of the store, until :meth:`resume`."""
        self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "-t", "60", "stop")

    def resume(self) -> None:
        """Start a server :meth:`halt` stopped, on its port again."""
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log_path), "-w", "-t", "60",
                  "start")

    def stop(self) -> None:
        """Stop the server (fast: open sessions are ended) and remove its directory."""
        if self.root is None:
            return
        try:
            if (self.data / "postmaster.pid").exists():
                try:
                    self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "-t", "30",
                              "stop")
                except (subprocess.CalledProcessError, subprocess.TimeoutExpired):
                    self._kill_postmaster()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)
            self.root = None

    def _kill_postmaster(self) -> None:
        try:
            pid = int((self.data / "postmaster.pid").read_text().split()[0])
            os.kill(pid, signal.SIGKILL)  # its children follow the postmaster out
        except (OSError, ValueError, IndexError):
            pass  # already gone: there is nothing left to stop

    def _run(self, program: str, *args: str, as_owner: bool = True) -> None:
        argv = [str(self.bindir / program), *args]
        if as_owner:
            argv = self._as_owner.command(argv)
        # PG* variables from the caller's shell (PGHOST, PGDATA...) must not redirect these
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        env["LC_ALL"] = "C"
        subprocess.run(argv, cwd=self.root, env=env, check=True, timeout=120,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def __enter__(self) -> PgCluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class _Runner:
    """How to run the server's programs: as ourselves, or as a non-root user when root."""

    def __init__(self, user: pwd.struct_passwd | None, prefix: list[str] | None) -> None:
        self.user = user
        self._prefix = prefix

    def take(self, path: Path) -> None:
        if self.user is not None:
            os.chown(path, self.user.pw_uid, self.user.pw_gid)

    def command(self, argv: list[str]) -> list[str]:
        if self.user is None:
            return argv
        if self._prefix is None:  # su takes one shell command line
            return ["su", self.user.pw_name, "-s", "/bin/sh", "-c", shlex.join(argv)]
        return [*self._prefix, *argv]


def _runner() -> _Runner:
    if os.geteuid() != 0:
        return _Runner(None, None)
    for name in ("postgres", "nobody"):
        try:
            user = pwd.getpwnam(name)
        except KeyError:
            continue
        if shutil.which("runuser"):
            return _Runner(user, ["runuser", "-u", user.pw_name, "--"])
        if shutil.which("setpriv"):
            return _Runner(user, ["setpriv", f"--reuid={user.pw_uid}",
                                  f"--regid={user.pw_gid}", "--init-groups", "--"])
        if shutil.which("su"):
            return _Runner(user, None)
    raise PostgresMissing("PostgreSQL will not run as root, and there is no postgres user "
                          "or runuser/setpriv/su to run it as one")


def _scratch() -> str | None:
    """Memory when there is a tmpfs for it: with a busy disk, CREATE DATABASE takes 150 ms
    there instead of 10 (and the cluster is thrown away anyway)."""
    shm = Path("/dev/shm")
    return str(shm) if shm.is_dir() and os.access(shm, os.W_OK | os.X_OK) else None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# fixtures -------------------------------------------------------------------------------

_databases = itertools.count(1)


def start_cluster() -> PgCluster:
    """A started cluster; without PostgreSQL, skip the test asking for it (fail it when
    HOMING_REQUIRE_POSTGRES=1, as in CI)."""
    try:
        cluster = PgCluster()
    except PostgresMissing as exc:
        if os.environ.get("HOMING_REQUIRE_POSTGRES") == "1":
            pytest.fail(str(exc), pytrace=False)
        pytest.skip(str(exc))
    cluster.start()
    return cluster


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[PgCluster]:
    """A PostgreSQL server of this test session's own."""
    cluster = start_cluster()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def pg_url(pg_cluster: PgCluster) -> str:
    """The URL of the session's database (what one test leaves there, the next sees)."""
    return pg_cluster.url()


@pytest.fixture
def pg_fresh_url(pg_cluster: PgCluster) -> Iterator[str]:
    """The URL of an empty database of this test's own, dropped after it. (Not async,
    so a parametrized fixture can ask for it by name.)"""
    import psycopg

    name = f"t_{os.getpid()}_{next(_databases)}"
    with psycopg.connect(pg_cluster.url(), autocommit=True) as admin:
        # file_copy: one checkpoint instead of WAL for every page, half the time with fsync off
        admin.execute(f"CREATE DATABASE {name} TEMPLATE template0 STRATEGY file_copy")
    yield pg_cluster.url(name)
    with psycopg.connect(pg_cluster.url(), autocommit=True) as admin:
        # connections the test left open are ended: a leak shows in the test, not here
        admin.execute(f"DROP DATABASE {name} WITH (FORCE)")


if __name__ == "__main__":
    # SIGTERM (kill, a script's cleanup) stops the cluster as Ctrl-C does
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    with PgCluster() as running:
        print(running.url(), f"(started in {running.start_seconds:.2f} s; Ctrl-C stops it)",
              flush=True)
        try:
            signal.pause()
        except KeyboardInterrupt:
            pass
