"""``homing service``: a unit that systemd accepts, written and removed."""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path

import pytest

from .test_cli import _env, run_cli

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
