"""``homing service install|uninstall``: a systemd unit for this installation.

The unit is ``Type=notify`` with a watchdog (see ``gateway/sd_notify.py``),
stops with more time than the daemon's drain, restarts on failure but not on a
bad config (exit 2), and kills only the daemon on stop (``KillMode=process``)
so background jobs keep running across a restart, as the jobs issue promises.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from .config import Config

UNIT_NAME = "homing.service"
WATCHDOG_SECONDS = 30


@dataclass(frozen=True, slots=True)
class ServicePlan:
    unit_path: Path
    unit_text: str
    commands: list[list[str]]


def plan(config: Config, config_path: Path | None, *, user: bool,
         unit_dir: Path | None = None) -> ServicePlan:
    directory = unit_dir or (Path.home() / ".config/systemd/user" if user
                             else Path("/etc/systemd/system"))
    systemctl = ["systemctl", "--user"] if user else ["systemctl"]
    return ServicePlan(
        unit_path=directory / UNIT_NAME,
        unit_text=render_unit(config, config_path, user=user),
        commands=[[*systemctl, "daemon-reload"], [*systemctl, "enable", "--now", UNIT_NAME]],
    )


def render_unit(config: Config, config_path: Path | None, *, user: bool) -> str:
    run = [*_homing_command(), "run"]
    if config_path is not None:
        run += ["--config", str(config_path.resolve())]
    return "\n".join([
        "[Unit]",
        "Description=Homing chat gateway",
        *([] if user else ["Wants=network-online.target", "After=network-online.target"]),
        "",
        "[Service]",
        "Type=notify",
        "NotifyAccess=main",
        f"ExecStart={' '.join(_quote(_exec_escape(part)) for part in run)}",
        f"Environment=\"HOMING_HOME={_escape(str(config.home_path))}\"",
        "Restart=on-failure",
        "RestartSec=5",
        "RestartPreventExitStatus=2",
        f"WatchdogSec={WATCHDOG_SECONDS}",
        f"TimeoutStopSec={int(config.shutdown.drain_timeout_seconds) + 30}",
        "KillMode=process",
        "StandardOutput=journal",
        "StandardError=journal",
        "SyslogIdentifier=homing",
        "",
        "[Install]",
        f"WantedBy={'default.target' if user else 'multi-user.target'}",
        "",
    ])


def install(service: ServicePlan, *, start: bool = True) -> list[str]:
    """Write the unit; enable it when systemd runs here, else say how. Returns what to print."""
    service.unit_path.parent.mkdir(parents=True, exist_ok=True)
    service.unit_path.write_text(service.unit_text)
    out = [f"wrote {service.unit_path}"]
    if start and _systemd_running() and shutil.which("systemctl"):
        for command in service.commands:
            subprocess.run(command, check=True)
            out.append("ran: " + " ".join(command))
    else:
        out.append("to start the service run:")
        out += ["  " + " ".join(command) for command in service.commands]
    return out


def uninstall(service: ServicePlan, *, stop: bool = True) -> list[str]:
    systemctl = service.commands[0][:-1]
    out = []
    if stop and _systemd_running() and shutil.which("systemctl"):
        subprocess.run([*systemctl, "disable", "--now", UNIT_NAME], check=False)
        out.append("ran: " + " ".join([*systemctl, "disable", "--now", UNIT_NAME]))
    if service.unit_path.exists():
        service.unit_path.unlink()
        out.append(f"removed {service.unit_path}")
    else:
        out.append(f"no unit at {service.unit_path}")
    return out


def _homing_command() -> list[str]:
    """This installation's ``homing``: the console script beside the interpreter."""
    script = Path(sys.executable).parent / "homing"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "gateway.cli"]


def _systemd_running() -> bool:
    return Path("/run/systemd/system").is_dir()


def _escape(value: str) -> str:
    """systemd reads % as a specifier: a literal one is %%."""
    return value.replace("%", "%%")


def _exec_escape(value: str) -> str:
    """In ExecStart, $ also expands variables: a literal one is $$."""
    return _escape(value).replace("$", "$$")


def _quote(value: str) -> str:
    return f'"{value}"' if any(c.isspace() for c in value) else value
