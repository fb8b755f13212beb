"""``homing doctor``: live checks of this installation, one line each —
``ok   <what>: <detail>``, ``warn …``, ``FAIL <what>: <problem> — fix: <one line>`` or
``skip …`` — and exit 1 when any failed, so it can gate a deploy.

It reads the config as the service would, with the variables of
``$HOMING_HOME/homing.env`` (an invalid config is one failed check, not a
traceback), then asks the enabled platforms (``doctor_platforms``) and looks at this
machine: the web port, the state database, disk, systemd and the environment file
(``doctor_local``). A plain program: the platform checks run in one ``asyncio.run``,
the local ones outside any event loop, every subprocess and call with a timeout.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from gateway.config.env_file import env_file_path, read_env_file
from gateway.config.file import UNSET
from gateway.config.settings import DEFAULT_HOME, Config, ConfigError, find_config_file, load_config
from gateway.platforms.checks import Check, fail, ok, warn


def doctor_command(explicit_config: str | None, *, as_json: bool) -> int:
    """The CLI's ``homing doctor``: print the checks; 1 when any failed."""
    checks = diagnose(explicit_config, dict(os.environ))
    if as_json:
        print(json.dumps([c.to_dict() for c in checks], indent=2))
    else:
        for check in checks:
            print(check.line())
    return 1 if any(c.status == "fail" for c in checks) else 0


def diagnose(explicit_config: str | None, environ: Mapping[str, str]) -> list[Check]:
    """Every check, in the order an operator fixes things: config, secrets, platforms,
    then this machine."""
    from gateway.cli.doctor_local import env_file_check, local_checks
    from gateway.cli.doctor_platforms import platform_checks
    from gateway.store.status_file import read_status

    loaded = _load_config(explicit_config, environ)
    checks = loaded.checks
    config = loaded.config
    if config is None:
        return checks
    checks.append(env_file_check(loaded.env_file, loaded.config_text, environ))
    daemon = read_status(config.home_path) or {}
    daemon_pid = int(daemon["pid"]) if daemon.get("running") else None
    checks += asyncio.run(platform_checks(config, daemon_pid))
    checks += local_checks(config, loaded.config_file)
    return checks


@dataclass
class _Loaded:
    config_file: Path | None
    env_file: Path
    checks: list[Check] = field(default_factory=list)
    config: Config | None = None
    config_text: str = ""


def _load_config(explicit: str | None, environ: Mapping[str, str]) -> _Loaded:
    """The config as the service reads it: this environment plus homing.env."""
    env = dict(environ)
    home = Path(env.get("HOMING_HOME") or DEFAULT_HOME).expanduser()
    loaded = _Loaded(find_config_file(explicit, env), env_file_path(home))
    if loaded.config_file is None:
        loaded.checks.append(warn("config file", f"none at {home / 'config.yaml'}; the "
                                                 f"defaults are used",
                                  "`homing setup` writes one"))
    elif not loaded.config_file.is_file():
        loaded.checks.append(fail("config file", f"{loaded.config_file} does not exist",
                                  "check --config and HOMING_CONFIG, or run `homing setup`"))
        return loaded
    else:
        loaded.checks.append(ok("config file", str(loaded.config_file)))
        try:
            loaded.config_text = loaded.config_file.read_text(encoding="utf-8")
        except OSError:
            pass  # load_config says why, as the config check
    try:
        config = load_config(explicit, {**env, **_variables(loaded.env_file)})
        if env_file_path(config.home_path) != loaded.env_file:  # the config's own home:
            loaded.env_file = env_file_path(config.home_path)
            config = load_config(explicit, {**env, **_variables(loaded.env_file)})
    except ConfigError as exc:
        loaded.checks.append(fail("config", "; ".join(f"{p}: {_in_one_line(m)}"
                                                      for p, m in exc.problems),
                                  _config_fix(exc, loaded)))
        return loaded
    loaded.config = config
    if not config.platforms.enabled():
        loaded.checks.append(fail("config", "no platform is enabled",
                                  "enable platforms.web at least (or run `homing setup`)"))
        return loaded
    from gateway.config.warnings import config_warnings

    loaded.checks.append(ok("config", f"valid (state directory {config.home_path})"))
    loaded.checks += [warn("config", w) for w in config_warnings(config)]
    return loaded


def _variables(env_file: Path) -> dict[str, str]:
    try:
        return read_env_file(env_file) if env_file.is_file() else {}
    except (OSError, UnicodeDecodeError):
        return {}  # the environment file check says why


def _in_one_line(message: str) -> str:
    """A problem as one check's line: an unset variable's without where to set it (the fix
    says that), a YAML error's without the line shown under it."""
    match = UNSET.match(message)
    return match.group(0) if match else message.split("\n", 1)[0]


def _config_fix(exc: ConfigError, loaded: _Loaded) -> str:
    unset = [match.group(1) for _, m in exc.problems if (match := UNSET.match(m))]
    if unset:
        return (f"define {', '.join(dict.fromkeys(unset))} in {loaded.env_file} "
                f"(NAME=value, chmod 600), or export it")
    where = loaded.config_file or "the config file"
    return f"edit {where} (see config.example.yaml), then run `homing check-config`"
