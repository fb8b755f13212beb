"""``$HOMING_HOME/homing.env``: the secrets a config references, for systemd and setup.

The README keeps tokens out of ``config.yaml`` (``token: ${TELEGRAM_BOT_TOKEN}``).
A shell has them in its environment; a systemd service does not, so the unit
reads this file (``EnvironmentFile=``). It is written mode 0600 and holds plain
``NAME=value`` lines in the subset of the format that systemd and a shell's
``set -a; . homing.env`` read the same way.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

ENV_FILE_NAME = "homing.env"

#: ``${NAME}`` with no default: a variable the config cannot do without
_REQUIRED = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_PLAIN = re.compile(r"[A-Za-z0-9_:./@+=,-]*")
_LINE = re.compile(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=(.*)$")


def env_file_path(home: Path) -> Path:
    return home / ENV_FILE_NAME


def required_variables(config_text: str) -> list[str]:
    """The variables a config names without a default, in order of first use.

    Comment lines are left out: a ``# token: ${OLD}`` is not a requirement.
    """
    names: list[str] = []
    for line in config_text.splitlines():
        if line.lstrip().startswith("#"):
            continue
        for name in _REQUIRED.findall(line):
            if name not in names:
                names.append(name)
    return names


def read_env_file(path: Path) -> dict[str, str]:
    """The file's variables; an absent file has none. Unreadable lines are skipped
    (systemd does the same), so a hand edit cannot stop a start."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    values: dict[str, str] = {}
    for line in text.splitlines():
        match = _LINE.match(line)
        if match is None or line.lstrip().startswith("#"):
            continue
        values[match.group(1)] = _unquote(match.group(2).strip())
    return values


def write_env_file(path: Path, values: Mapping[str, str]) -> None:
    """Write ``values`` (merged over what the file holds) readable by its owner only.

    The file is created 0600 before anything is written to it, so a secret is
    never readable by others, not even for a moment.
    """
    merged = {**read_env_file(path), **values}
    for name, value in merged.items():
        if "\n" in value or "\r" in value or "\0" in value:
            raise ValueError(f"{name}: a value in {path.name} cannot span lines")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)  # an existing file keeps its mode through O_CREAT
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write("# secrets for homing (read by its systemd unit); keep this file 0600\n")
        for name, value in merged.items():
            out.write(f"{name}={_quote(value)}\n")


def with_env_file(environ: Mapping[str, str], config_file: Path | None) -> dict[str, str]:
    """``environ`` over the environment file's values, so that ``homing run`` in a shell
    reads the secrets ``homing setup`` wrote, as the service does. The file is looked
    for in ``$HOMING_HOME`` (default ``~/.homing``) and beside the config file."""
    home = Path(environ.get("HOMING_HOME") or "~/.homing").expanduser()
    places = [env_file_path(home)]
    if config_file is not None and env_file_path(config_file.parent) not in places:
        places.append(env_file_path(config_file.parent))
    merged: dict[str, str] = {}
    for place in reversed(places):
        try:
            merged.update(read_env_file(place))
        except (OSError, UnicodeDecodeError):
            continue  # unreadable: the config check names what is then missing
    return {**merged, **environ}


def missing_variables(names: list[str], *sources: Mapping[str, str]) -> list[str]:
    return [name for name in names if not any(name in source for source in sources)]


def _quote(value: str) -> str:
    if _PLAIN.fullmatch(value):
        return value
    if "'" not in value:
        return f"'{value}'"  # single quotes: literal to systemd and to a shell
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$") \
        .replace("`", "\\`")
    return f'"{escaped}"'


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] == "'":
        return value[1:-1]
    if len(value) >= 2 and value[0] == value[-1] == '"':
        return re.sub(r"\\(.)", r"\1", value[1:-1])
    return value
