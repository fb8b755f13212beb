"""Telegram with the state on PostgreSQL: one poller per bot token, under a lease.

The real daemon (``homing run``) is killed with SIGKILL and started again under
its name. The new life may not poll until the dead one's lease has run out — on
a shared store the old process could still be running on another host — and
then carries on: what was said meanwhile is answered, and nothing twice.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

from tests.fakes.telegram_server import FakeTelegram
from tests.helpers import eventually
from tests.real_daemon import home_env, run_cli, start_daemon

ALICE = 1


def daemon_env(home: Path, fake: FakeTelegram, url: str) -> dict[str, str]:
    home.mkdir()
    (home / "config.yaml").write_text(
        f"store: {{url: '{url}'}}\n"
        "instance: {name: vps1}\n"
        # a lease of seconds, not one: a busy CI machine may stall a process for a second,
        # and a stalled life fences itself (tests/test_fencing.py) — not this test's subject
        "cluster: {lease_seconds: 3, failover_seconds: 3}\n"
        "platforms:\n  web: {port: 0}\n"
        f"  telegram: {{enabled: true, token: '{fake.token}', base_url: '{fake.base_url}', "
        f"base_file_url: '{fake.base_file_url}', allowed_users: ['{ALICE}']}}\n")
    return home_env(home)


def answers(fake: FakeTelegram) -> list[str]:
    return [s.text.split("\n")[0] for s in fake.sent if s.text.startswith("Received:")]


async def test_after_a_kill_9_the_next_life_polls_once_the_lease_runs_out_and_misses_nothing(
        tmp_path: Path, pg_fresh_url: str) -> None:
    async with FakeTelegram() as fake:
        env = daemon_env(tmp_path / "home", fake, pg_fresh_url)
        first, _ = await start_daemon(env)
        second = None
        try:
            fake.user_message(chat_id=ALICE, text="before")
            await eventually(lambda: answers(fake) == ["Received: before"], timeout=20,
                             what="the first answer")
            code, out, err = await run_cli("status", "--json", env=env)
            assert code == 0, err
            (lease,) = json.loads(out)["leases"]
            assert lease["name"] == "telegram:123456789" and lease["holder"] == "vps1"
            first.send_signal(signal.SIGKILL)
            await first.wait()
            for i in range(3):  # said while no instance polls
                fake.user_message(chat_id=ALICE, text=f"while down {i}")
            second, _ = await start_daemon(env)
            await eventually(lambda: len(answers(fake)) >= 4, timeout=30,
                             what=f"the answers after the restart: {answers(fake)}")
            await eventually(lambda: not fake.pending_updates, timeout=20,
                             what="every update acknowledged")
            assert sorted(answers(fake)) == sorted(
                ["Received: before"] + [f"Received: while down {i}" for i in range(3)])
            code, out, err = await run_cli("status", "--json", env=env)
            (lease,) = json.loads(out)["leases"]
            assert lease["holder"] == "vps1" and lease["epoch"] == 2  # a new holder: the new life
        finally:
            for proc in (first, second):
                if proc is not None and proc.returncode is None:
                    proc.terminate()
                    await proc.wait()
