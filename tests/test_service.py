"""``homing service``: a unit that systemd accepts, written and removed."""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path

import pytest

from tests.test_cli import _env, run_cli

ANALYZE = shutil.which("systemd-analyze")


async def dry_run(tmp_path: Path, *flags: str) -> str:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    (home / "config.yaml").write_text("platforms: {web: {port: 8765}}\n")
    code, out, err = await run_cli("service", "install", *flags, "--dry-run", env=_env(home))
    assert code == 0, err
    return out


@pytest.mark.parametrize("scope", ["--user", "--system"])
async def test_the_unit_is_type_notify_with_a_watchdog_and_a_long_enough_stop(
        tmp_path: Path, scope: str) -> None:
    unit = await dry_run(tmp_path, scope)
    lines = unit.splitlines()
    assert "Type=notify" in lines and "Restart=on-failure" in lines
    assert any(line.startswith("WatchdogSec=") for line in lines)
    stop = next(int(line.split("=")[1]) for line in lines if line.startswith("TimeoutStopSec="))
    assert stop > 30  # longer than the daemon's drain timeout (30 s by default)
    exec_start = next(line for line in lines if line.startswith("ExecStart="))
    assert exec_start.endswith(f"run --config {tmp_path / 'home' / 'config.yaml'}")
    assert f'Environment="HOMING_HOME={tmp_path / "home"}"' in lines
    assert "KillMode=process" in lines  # jobs outlive a restart
    target = "default.target" if scope == "--user" else "multi-user.target"
    assert f"WantedBy={target}" in lines


async def test_systemd_analyze_verifies_the_unit(tmp_path: Path) -> None:
    if ANALYZE is None:
        if os.environ.get("HOMING_REQUIRE_SYSTEMD") == "1":
            raise AssertionError("systemd-analyze is missing (apt-get install systemd)")
        pytest.skip("systemd-analyze is not installed (apt-get install systemd)")
    unit_file = tmp_path / "homing.service"
    unit_file.write_text(await dry_run(tmp_path, "--user"))
    proc = await asyncio.create_subprocess_exec(
        ANALYZE, "verify", str(unit_file), stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE)
    out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    assert b"homing.service" not in err  # no complaint about our unit


async def test_install_writes_the_unit_and_uninstall_removes_it(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    units = tmp_path / "units"
    env = _env(home)
    code, out, _ = await run_cli("service", "install", "--unit-dir", str(units), "--no-start",
                                 env=env)
    assert code == 0
    assert (units / "homing.service").read_text().startswith("[Unit]")
    assert "systemctl --user daemon-reload" in out
    assert "systemctl --user enable --now homing.service" in out
    code, out, _ = await run_cli("service", "uninstall", "--unit-dir", str(units),
                                 "--no-start", env=env)
    assert code == 0 and not (units / "homing.service").exists()


async def test_percent_signs_in_paths_are_not_read_as_specifiers(tmp_path: Path) -> None:
    if ANALYZE is None:
        pytest.skip("systemd-analyze is not installed (apt-get install systemd)")
    home = tmp_path / "50%off"
    home.mkdir()
    code, unit, err = await run_cli("service", "install", "--dry-run", env=_env(home))
    assert code == 0, err
    assert 'Environment="HOMING_HOME=' in unit and "50%%off" in unit
    unit_file = tmp_path / "homing.service"
    unit_file.write_text(unit)
    proc = await asyncio.create_subprocess_exec(ANALYZE, "verify", str(unit_file),
                                                stderr=asyncio.subprocess.PIPE)
    _, err_bytes = await proc.communicate()
    assert proc.returncode == 0, err_bytes.decode()


# the environment file: what a service has instead of a shell's exports --------------

TOKEN_CONFIG = ("platforms:\n  web: {port: 8765, token: '${WEB_CHAT_TOKEN:-}'}\n"
                "  telegram:\n    enabled: true\n"
                "    token: ${TELEGRAM_BOT_TOKEN}\n    allowed_users: ['1']\n"
                "# old: ${NOT_NEEDED}\n")
BOT_TOKEN = "123456789:AAE" + "b" * 32


def token_home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.yaml").write_text(TOKEN_CONFIG)
    return home


async def test_the_unit_reads_the_environment_file_in_the_home(tmp_path: Path) -> None:
    unit = await dry_run(tmp_path, "--user")
    assert f"EnvironmentFile={tmp_path / 'home' / 'homing.env'}" in unit.splitlines()


async def test_install_copies_the_tokens_the_config_needs_into_a_0600_file(
        tmp_path: Path) -> None:
    home = token_home(tmp_path)
    env = {**_env(home), "TELEGRAM_BOT_TOKEN": BOT_TOKEN}
    code, out, err = await run_cli("service", "install", "--unit-dir", str(tmp_path / "u"),
                                   "--no-start", "--yes", env=env)
    assert code == 0, err
    env_file = home / "homing.env"
    assert env_file.stat().st_mode & 0o777 == 0o600
    assert "TELEGRAM_BOT_TOKEN" in out and "NOT_NEEDED" not in env_file.read_text()
    assert "WEB_CHAT_TOKEN" not in env_file.read_text()  # it has a default: not needed
    # read back the way a shell reads it (systemd's quoting rules are the same subset)
    proc = await asyncio.create_subprocess_exec(
        "sh", "-c", f'set -a; . "{env_file}"; printf %s "$TELEGRAM_BOT_TOKEN"',
        stdout=asyncio.subprocess.PIPE)
    value, _ = await proc.communicate()
    assert value.decode() == BOT_TOKEN
    # the token is in the env file, never in the unit
    assert BOT_TOKEN not in (tmp_path / "u" / "homing.service").read_text()


@pytest.mark.parametrize("value", ["plain-value_1", "with space", "it's \"quoted\" $HOME `x`",
                                   "back\\slash 'single'"])
def test_env_file_values_read_back_as_written_by_a_shell(tmp_path: Path, value: str) -> None:
    import subprocess

    from gateway.config.env_file import read_env_file, write_env_file

    env_file = tmp_path / "homing.env"
    write_env_file(env_file, {"SECRET": value})
    assert read_env_file(env_file) == {"SECRET": value}
    shown = subprocess.run(["sh", "-c", f'set -a; . "{env_file}"; printf %s "$SECRET"'],
                           capture_output=True, text=True, check=True).stdout
    assert shown == value


async def test_install_without_a_terminal_asks_for_yes_and_writes_nothing(
        tmp_path: Path) -> None:
    home = token_home(tmp_path)
    env = {**_env(home), "TELEGRAM_BOT_TOKEN": BOT_TOKEN}
    code, _, err = await run_cli("service", "install", "--unit-dir", str(tmp_path / "u"),
                                 "--no-start", env=env)
    assert code != 0 and "--yes" in err and "TELEGRAM_BOT_TOKEN" in err
    assert not (home / "homing.env").exists()
    assert not (tmp_path / "u" / "homing.service").exists()


async def test_install_refuses_when_neither_the_file_nor_the_shell_has_a_variable(
        tmp_path: Path) -> None:
    home = token_home(tmp_path)
    code, _, err = await run_cli("service", "install", "--unit-dir", str(tmp_path / "u"),
                                 "--no-start", "--yes", env=_env(home))
    assert code == 2 and "TELEGRAM_BOT_TOKEN" in err
    assert not (tmp_path / "u" / "homing.service").exists()


async def test_a_token_already_in_the_environment_file_is_enough(tmp_path: Path) -> None:
    home = token_home(tmp_path)
    (home / "homing.env").write_text(f"TELEGRAM_BOT_TOKEN={BOT_TOKEN}\n")
    code, out, err = await run_cli("service", "install", "--unit-dir", str(tmp_path / "u"),
                                   "--no-start", env=_env(home))
    assert code == 0, err
    assert (home / "homing.env").read_text() == f"TELEGRAM_BOT_TOKEN={BOT_TOKEN}\n"
    assert "holds TELEGRAM_BOT_TOKEN" in out


async def test_commands_in_a_shell_read_the_environment_file_too(tmp_path: Path) -> None:
    """What `homing setup` wrote works for `homing run` in a shell, not only under systemd;
    a variable the shell exports wins over the file's."""
    home = token_home(tmp_path)
    (home / "homing.env").write_text(f"TELEGRAM_BOT_TOKEN={BOT_TOKEN}\n")
    code, out, err = await run_cli("check-config", env=_env(home))
    assert code == 0, err
    code, _, err = await run_cli("check-config", env={**_env(home), "TELEGRAM_BOT_TOKEN": ""})
    assert code == 2 and "platforms.telegram.token" in err  # empty in the shell: it wins …
    (home / "homing.env").unlink()
    code, _, err = await run_cli("check-config", env=_env(home))
    assert code == 2 and "TELEGRAM_BOT_TOKEN is not set" in err  # … and without either
