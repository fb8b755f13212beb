"""A store that says when it is broken, and a state directory only its owner can read."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import sqlite3
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

import aiohttp
import pytest
import structlog

from gateway.daemon.assembly import running_gateway, watch_store
from gateway.sessions.store import SessionStore
from tests.conftest import make_config
from tests.helpers import eventually_async
from tests.real_daemon import HOMING, home_env, run_cli, start_daemon, web_home
from tests.test_web import open_tab


def drop_a_table(db: Path) -> None:
    with contextlib.closing(sqlite3.connect(db)) as conn:
        conn.execute("DROP TABLE inbound")
        conn.commit()


def corrupt_pages(db: Path) -> None:
    with contextlib.closing(sqlite3.connect(db)) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # everything in the main file
    page = 4096
    with db.open("r+b") as file:
        size = file.seek(0, os.SEEK_END)
        assert size >= 4 * page
        for at in range(page, size, page):  # every page but the header's
            file.seek(at)
            file.write(b"\xde\xad\xbe\xef" * 64)


def delete(db: Path) -> None:
    for path in (db, db.with_name(db.name + "-wal"), db.with_name(db.name + "-shm")):
        path.unlink(missing_ok=True)


def replace(db: Path) -> None:
    copy = db.with_name("copy.db")
    shutil.copy(db, copy)
    os.replace(copy, db)


DAMAGE: dict[str, tuple[Callable[[Path], None], str]] = {
    "dropped table": (drop_a_table, "tables are missing from the state database: inbound"),
    "corrupted pages": (corrupt_pages, "damaged"),
    "deleted": (delete, "was deleted while the daemon ran"),
    "replaced": (replace, "was replaced while the daemon ran"),
}


@pytest.mark.parametrize("case", list(DAMAGE))
async def test_readyz_is_503_and_names_the_problem_when_the_store_is_damaged(
        tmp_path: Path, case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    damage, problem = DAMAGE[case]
    # the page check's verdict is reused for 10 s (readyz is polled); here, not at all
    monkeypatch.setattr("gateway.store.sqlite.DEEP_CHECK_SECONDS", 0.0)
    config = make_config(tmp_path / "home")
    async with running_gateway(config) as gw, aiohttp.ClientSession() as http:
        base = f"http://127.0.0.1:{gw.runner.adapters['web'].port}"
        tab = await open_tab(http, base)
        await tab.say("/status")  # the store in use, with rows in it
        await tab.frame()
        async with http.get(f"{base}/readyz") as resp:
            assert resp.status == 200
            assert (await resp.json())["store"] == "ok"
        damage(config.state_db)
        async with http.get(f"{base}/readyz") as resp:
            assert resp.status == 503
            body = await resp.json()
        assert body["ready"] is False
        assert problem in body["store"]
        async with http.get(f"{base}/healthz") as resp:
            assert resp.status == 200  # alive: the operator can still look


async def test_a_broken_store_is_logged_as_an_error_each_check_until_it_is_fixed(
        tmp_path: Path) -> None:
    db_path = tmp_path / "state.db"
    async with SessionStore(db_path) as store:
        with structlog.testing.capture_logs() as logs:
            watcher = asyncio.create_task(watch_store(store.db, interval=0.02))
            with contextlib.closing(sqlite3.connect(db_path)) as conn:
                conn.execute("ALTER TABLE inbound RENAME TO inbound_gone")
                conn.commit()

            async def errors() -> int:
                n = sum(1 for e in logs if e["event"] == "state_database_broken")
                return n if n >= 3 else 0

            await eventually_async(errors, what="the error logged again and again")
            with contextlib.closing(sqlite3.connect(db_path)) as conn:
                conn.execute("ALTER TABLE inbound_gone RENAME TO inbound")
                conn.commit()

            async def fixed() -> bool:
                return any(e["event"] == "state_database_usable_again" for e in logs)

            await eventually_async(fixed, what="the store said usable again")
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
    broken = [e for e in logs if e["event"] == "state_database_broken"]
    assert broken[0]["log_level"] == "error"
    assert "inbound" in broken[0]["problem"]


def foreign(db: Path) -> None:
    with contextlib.closing(sqlite3.connect(db)) as conn:
        conn.execute("CREATE TABLE recipes (name TEXT)")
        conn.commit()


def garbage(db: Path) -> None:
    db.write_bytes(b"this is not a database at all\n" * 200)


@pytest.mark.parametrize("spoil,said", [(foreign, "not a Homing state database"),
                                        (garbage, "file is not a database")])
@pytest.mark.parametrize("command", ["status", "jobs", "notifications", "schedules"])
async def test_listing_commands_print_one_line_on_a_damaged_or_foreign_database(
        tmp_path: Path, spoil: Callable[[Path], None], said: str, command: str) -> None:
    home = tmp_path / "home"
    home.mkdir()
    spoil(home / "state.db")
    before = (home / "state.db").read_bytes()
    code, out, err = await run_cli(command, env=home_env(home))
    assert code == 1
    assert out == ""
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("homing: ") and said in lines[0]
    assert (home / "state.db").read_bytes() == before  # the file is left as it was


@contextlib.contextmanager
def umask(mask: int) -> Iterator[None]:
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


def wide_modes(home: Path) -> list[str]:
    """Everything under ``home`` that someone other than its owner may open."""
    found = []
    for root, dirs, files in os.walk(home):
        for name in [*dirs, *files]:
            path = Path(root, name)
            mode = stat.S_IMODE(path.lstat().st_mode)
            want = 0o700 if path.is_dir() else 0o600
            if mode & ~want:
                found.append(f"{path.relative_to(home)} {oct(mode)}")
    if stat.S_IMODE(home.stat().st_mode) != 0o700:
        found.append(f". {oct(stat.S_IMODE(home.stat().st_mode))}")
    return found


async def run_a_job(url: str) -> str:
    """``umask`` as a background job; its completion notice. A file is uploaded first,
    so the home has its ``files/`` too."""
    async with aiohttp.ClientSession() as http:
        tab = await open_tab(http, url.rstrip("/"))
        form = aiohttp.FormData()
        form.add_field("file", b"notes", filename="notes.txt", content_type="text/plain")
        async with http.post(f"{url.rstrip('/')}/api/sessions/{tab.ready['session_id']}/files",
                             data=form) as response:
            assert response.status == 200
        await tab.frame()  # the upload's answer
        await tab.say("/bg umask")
        await tab.frame()
        while (frame := await tab.frame()).get("kind") != "notification":
            pass
        return frame["text"]


async def test_the_state_directory_is_private_under_umask_022_and_tightened_at_start(
        tmp_path: Path) -> None:
    home = tmp_path / "home"
    with umask(0o022):
        env = web_home(home)
        os.chmod(home, 0o755)  # as `mkdir` made it: the daemon narrows its own home
        proc, url = await start_daemon(env)
        try:
            notice = await run_a_job(url)
            assert "0022" in notice  # the job's own files are made as the user expects
            names = {p.name for p in home.rglob("*")}
            assert {"state.db", "state.db-wal", "homing.log", "output.log", "files"} <= names
            assert wide_modes(home) == []
        finally:
            proc.send_signal(signal.SIGTERM)
            await proc.wait()
        assert wide_modes(home) == []  # the status file written at stop too

        # an older home, or one copied by hand: world-readable everywhere
        for root, dirs, files in os.walk(home):
            for name in dirs:
                os.chmod(Path(root, name), 0o755)
            for name in files:
                os.chmod(Path(root, name), 0o644)
        os.chmod(home, 0o755)
        theirs = home / "notes.txt"  # not Homing's: left as its owner made it
        theirs.write_text("shared")
        os.chmod(theirs, 0o755)
        proc = await asyncio.create_subprocess_exec(
            *HOMING, "run", env=env,
            stderr=asyncio.subprocess.PIPE)
        assert proc.stderr is not None
        seen = []
        try:
            while True:
                line = (await asyncio.wait_for(proc.stderr.readline(), 20)).decode()
                assert line, "the daemon exited before listening"
                seen.append(line)
                if "web_chat_listening" in line:
                    break
            assert wide_modes(home) == ["notes.txt 0o755"]
        finally:
            proc.send_signal(signal.SIGTERM)
            await proc.communicate()
    tightened = [line for line in seen if "state_directory_tightened" in line]
    assert len(tightened) == 1
    assert '"changed": ' in tightened[0]
