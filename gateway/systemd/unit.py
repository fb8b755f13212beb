"""``homing service install|uninstall``: a systemd unit for this installation.

The unit is ``Type=notify`` with a watchdog (see ``gateway/systemd/notify.py``),
stops with more time than the daemon's drain, restarts on failure but not on a
bad config (exit 2), and kills only the daemon on stop (``KillMode=process``)
so background jobs keep running across a restart, as the jobs issue promises.
Its secrets come from ``$HOMING_HOME/homing.env`` (``EnvironmentFile=``): a
service has no shell environment to take ``${TELEGRAM_BOT_TOKEN}`` from.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from gateway.config.env_file import (
    env_file_path,
    missing_variables,
    read_env_file,
    required_variables,
    write_env_file,
)
from gateway.config.settings import Config
from gateway.errors import ConfigurationError

UNIT_NAME = "homing.service"
WATCHDOG_SECONDS = 30


class MissingVariables(ConfigurationError):
    """The config names variables that neither the environment file nor this shell has."""

    def __init__(self, names: list[str], env_file: Path) -> None:
        self.names = names
        super().__init__(
            f"the config references {', '.join(names)}, which neither {env_file} nor this "
            f"shell's environment holds; export them (or add NAME=value lines to {env_file}) "
            f"and install again")


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
        f"EnvironmentFile={_quote(_escape(str(env_file_path(config.home_path))))}",
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


def prepare_env_file(config: Config, config_file: Path | None, environ: Mapping[str, str],
                     confirm: Callable[[list[str]], bool]) -> list[str]:
    """Make sure the unit's environment file holds every variable the config needs.

    Those this shell has and the file lacks are copied into it once ``confirm``
    agrees; any that neither holds stop the install (raises MissingVariables),
    since the service would only exit with status 2 at its first start. Returns
    what to print.
    """
    path = env_file_path(config.home_path)
    text = config_file.read_text(encoding="utf-8") if config_file is not None else ""
    needed = required_variables(text)
    in_file = read_env_file(path)
    missing = missing_variables(needed, in_file, environ)
    if missing:
        raise MissingVariables(missing, path)
    to_copy = [name for name in needed if name not in in_file]
    if to_copy and not confirm(to_copy):
        raise PermissionError(f"not written: {path} would lack {', '.join(to_copy)}")
    if to_copy or not path.exists():
        write_env_file(path, {name: environ[name] for name in to_copy})
        copied = f" with {', '.join(to_copy)} from this shell" if to_copy else ""
        return [f"wrote {path} (mode 0600){copied}"]
    return [f"{path} holds {', '.join(needed) or 'no variables'} (mode 0600)"]


def install(service: ServicePlan, *, start: bool = True) -> list[str]:
    """Write the unit; enable it when systemd runs here, else say how. Returns what to print."""
    service.unit_path.parent.mkdir(parents=True, exist_ok=True)
    service.unit_path.write_text(service.unit_text)
    out = [f"wrote {service.unit_path}"]
    if start and systemd_running() and shutil.which("systemctl"):
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
    if stop and systemd_running() and shutil.which("systemctl"):
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


def systemd_running() -> bool:
    return Path("/run/systemd/system").is_dir()


def _escape(value: str) -> str:
    """systemd reads % as a specifier: a literal one is %%."""
    return value.replace("%", "%%")


def _exec_escape(value: str) -> str:
    """In ExecStart, $ also expands variables: a literal one is $$."""
    return _escape(value).replace("$", "$$")


def _quote(value: str) -> str:
    return f'"{value}"' if any(c.isspace() for c in value) else value
