"""What the ``homing`` command prints: its version, the listings, a closed pipe."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

from gateway.daemon.assembly import running_gateway
from gateway.words.return_address import ReturnAddress
from gateway.words.route import Route
from tests.conftest import make_config
from tests.helpers import eventually_async
from tests.real_daemon import HOMING, home_env, listening_url, run_cli, web_home
from tools.job_record import JobRecord


async def test_version_is_printed(tmp_path: Path) -> None:
    code, out, _ = await run_cli("--version", env=home_env(tmp_path))
    assert code == 0 and out.startswith("homing ") and out.split()[1][0].isdigit()


async def test_run_host_and_port_override_the_config(tmp_path: Path) -> None:
    home = tmp_path / "home"
    env = web_home(home)
    (home / "config.yaml").write_text("platforms: {web: {port: 8765}}\n")
    proc = await asyncio.create_subprocess_exec(*HOMING, "run", "--port", "0", "--host",
                                                "127.0.0.1", env=env,
                                                stderr=asyncio.subprocess.PIPE)
    try:
        assert proc.stderr is not None
        url = await listening_url(proc.stderr)
        assert url.startswith("http://127.0.0.1:") and ":8765/" not in url
    finally:
        proc.terminate()
        await proc.wait()
    # the override meets the config's rules: a public address needs a token
    code, _, err = await run_cli("run", "--host", "0.0.0.0", env=env)
    assert code == 2 and "platforms.web.token" in err
    code, _, err = await run_cli("run", "--port", "70000", env=env)
    assert code == 2 and "not a port number" in err


async def test_the_quickstart_says_how_to_choose_a_port_and_reach_a_server(
        tmp_path: Path) -> None:
    """The README's Quickstart: its two commands as they are, then the flag and the setting
    it names for another port (the ones ``homing run --help`` lists) and an SSH tunnel."""
    readme = (Path(__file__).parent.parent / "README.md").read_text(encoding="utf-8")
    quickstart = readme.split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    assert quickstart.count("```sh\n") == 2
    assert ("python3 -m venv .venv && .venv/bin/pip install . && .venv/bin/homing run\n"
            in quickstart)
    test_command = ("python3 -m venv .venv && .venv/bin/pip install '.[test]' "
                    "./tests/example_platform && .venv/bin/python -m pytest -q\n")
    assert test_command in quickstart
    ci = (Path(__file__).parent.parent / ".ci" / "run").read_text(encoding="utf-8")
    assert test_command in ci  # CI runs the very command the README gives
    assert "homing run --port 9000" in quickstart and "`platforms.web.port`" in quickstart
    assert "ssh -L 8765:127.0.0.1:8765 server" in quickstart
    assert "`platforms.web.host`" in quickstart
    code, out, _ = await run_cli("run", "--help", env=home_env(tmp_path))
    assert code == 0 and "--port" in out and "platforms.web.port" in out


async def test_a_listing_into_a_closed_pipe_ends_quietly(tmp_path: Path) -> None:
    home = tmp_path / "home"
    async with running_gateway(make_config(home)) as gw:
        for n in range(3):
            route = Route("memory", "dm", str(n), user_id=str(n))
            await gw.store.get_or_create(gw.runner.session_key_for(route), route)
    read_end, write_end = os.pipe()
    os.close(read_end)  # as `homing sessions | head -1` once head has its line
    try:
        proc = await asyncio.create_subprocess_exec(
            *HOMING, "sessions", env=home_env(home), stdout=write_end,
            stderr=asyncio.subprocess.PIPE)
    finally:
        os.close(write_end)
    _, err = await proc.communicate()
    assert proc.returncode == 0
    assert err.decode() == ""  # no BrokenPipeError traceback


async def test_jobs_show_their_kind_and_pattern_and_notifications_their_first_line(
        tmp_path: Path) -> None:
    home = tmp_path / "home"
    route = Route("memory", "dm", "7", user_id="7")
    async with running_gateway(make_config(home)) as gw:
        key = gw.runner.session_key_for(route)
        session = await gw.store.get_or_create(key, route)
        address = ReturnAddress(key, session.id, route)
        plain = await gw.jobs.start("echo first line; echo second line", address)
        watch = await gw.jobs.start("echo READY", address, notify_on_complete=False,
                                    watch_patterns=["READY"])

        async def ended() -> bool:
            rows = [await gw.jobs.get(j.id) for j in (plain, watch)]
            return all(r is not None and r.state != "running" for r in rows)

        await eventually_async(ended, what="both jobs ended")
        await gw.router.settle()
    env = home_env(home)
    rows = json.loads((await run_cli("jobs", "--json", env=env))[1])
    kinds = {r["id"]: r["kind"] for r in rows}
    assert kinds == {plain.id: "bg", watch.id: "watch"}
    code, out, _ = await run_cli("jobs", env=env)
    assert code == 0
    watch_line = next(line for line in out.splitlines() if line.startswith(watch.id))
    assert " watch " in watch_line and watch_line.rstrip().endswith("READY")
    code, out, _ = await run_cli("notifications", env=env)
    completion = next(line for line in out.splitlines() if plain.id in line)
    assert "second line" not in completion  # the first line only, on one line


async def test_jobs_json_lists_every_job_and_a_limit_says_how_many_it_left_out(
        tmp_path: Path) -> None:
    home = tmp_path / "home"
    route = Route("memory", "dm", "7", user_id="7")
    async with running_gateway(make_config(home)) as gw:
        key = gw.runner.session_key_for(route)
        session = await gw.store.get_or_create(key, route)
        address = ReturnAddress(key, session.id, route)
        jobs = [JobRecord(f"j{n:04}", f"echo {n}", "/", "exited", None, None, 1000.0 + n,
                          1001.0 + n, 0, False, True, [], 0, False, key, session.id, address,
                          home / "jobs" / f"j{n:04}" / "output.log",
                          home / "jobs" / f"j{n:04}" / "exit")
                for n in range(600)]
        await gw.store.db.write([job.insert_op() for job in jobs])
    env = home_env(home)
    code, out, err = await run_cli("jobs", "--json", env=env)
    assert code == 0 and err == ""
    rows = json.loads(out)
    assert len(rows) == 600  # not cut at 500 without a word
    assert rows[0]["id"] == "j0599" and rows[-1]["id"] == "j0000"
    code, out, err = await run_cli("jobs", "--json", "--limit", "20", env=env)
    assert code == 0
    assert [r["id"] for r in json.loads(out)] == [f"j{n:04}" for n in range(599, 579, -1)]
    assert "the newest 20 of 600 jobs shown (--limit 20)" in err
    code, out, err = await run_cli("jobs", "--limit", "600", env=env)
    assert code == 0 and err == "" and len(out.splitlines()) == 601  # header and all
    code, _, err = await run_cli("jobs", "--limit", "0", env=env)
    assert code == 2 and "at least 1" in err


async def test_sessions_stop_at_the_limit_with_a_word_and_page_on_with_offset(
        tmp_path: Path) -> None:
    home = tmp_path / "home"
    async with running_gateway(make_config(home)) as gw:
        routes = [Route("memory", "dm", str(n), user_id=str(n)) for n in range(1234)]
        created = await asyncio.gather(*(gw.store.get_or_create(
            gw.runner.session_key_for(r), r) for r in routes))
    env = home_env(home)
    code, out, err = await run_cli("sessions", "--json", env=env)
    assert code == 0
    first = json.loads(out)  # stdout stays one JSON array; the word goes to stderr
    assert len(first) == 1000
    assert "showing 1000 of 1234 sessions; --offset 1000 for the next" in err
    code, out, err = await run_cli("sessions", "--json", "--offset", "1000", env=env)
    assert code == 0
    rest = json.loads(out)
    assert len(rest) == 234 and "showing 234 of 1234 sessions from --offset 1000" in err
    assert "for the next" not in err
    # the two pages are every session once: none repeated, none skipped
    assert sorted(s["id"] for s in first + rest) == sorted(s.id for s in created)

    code, out, err = await run_cli("sessions", "--limit", "10", "--offset", "20", env=env)
    assert code == 0 and len(out.splitlines()) == 11  # header and ten
    assert "showing 10 of 1234 sessions from --offset 20; --offset 30 for the next" in err
    code, out, err = await run_cli("sessions", "--limit", "5000", env=env)
    assert code == 0 and err == "" and len(out.splitlines()) == 1235
    for flag, value in (("--limit", "0"), ("--limit", "x"), ("--offset", "-1"),
                        ("--offset", "1.5")):
        code, _, err = await run_cli("sessions", flag, value, env=env)
        assert code == 2 and f"argument {flag}:" in err, (flag, value)

