"""``$HOMING_HOME/homing.env``: the secrets a config refers to as ``${VAR}``.

The README keeps tokens out of ``config.yaml`` (``token: ${TELEGRAM_BOT_TOKEN}``),
so the config can be shown to anyone. A shell has them in its environment; a
systemd service does not, so the unit reads this file (``EnvironmentFile=``),
and every ``homing`` command reads it too (the shell's values win). One
``NAME=value`` a line, ``#`` comments, mode 0600, in the subset of the format
that systemd and a shell's ``set -a; . homing.env`` read the same way.
``homing setup`` and ``homing service install`` write it; ``homing doctor``
checks it defines what the config needs.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

import yaml

from gateway.config.file import VARIABLE
from gateway.machine.private_files import FILE_MODE, private_dir, private_file

FILE_NAME = "homing.env"
_PLAIN = re.compile(r"[A-Za-z0-9_:./@+=,-]*")
_LINE = re.compile(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=(.*)$")


def env_file_path(home: Path) -> Path:
    return home / FILE_NAME


def read_env_file(path: Path) -> dict[str, str]:
    """The file's variables; an absent file has none. Lines that are not ``NAME=value``
    are skipped (systemd does the same), so a hand edit cannot stop a start."""
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
    """Set ``values`` in the file, keeping its other lines.

    The new file is made 0600 before anything is written to it and then put in
    place whole, so a secret is never readable by others and no reader sees half
    a file.
    """
    for name, value in values.items():
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) or any(
                c in value for c in "\n\r\0"):
            raise ValueError(f"{name}: not something an environment file can hold")
    kept: list[str] = []
    if path.exists():
        kept = [line for line in path.read_text(encoding="utf-8").splitlines()
                if (m := _LINE.match(line)) is None or line.lstrip().startswith("#")
                or m.group(1) not in values]
    else:
        kept = ["# secrets for homing (its systemd unit reads them); keep this file 0600"]
    lines = kept + [f"{name}={_quote(value)}" for name, value in values.items()]
    private_dir(path.parent)
    tmp = private_file(path.with_name(f".{path.name}.tmp"))
    tmp.write_text("\n".join(lines) + "\n", encoding="utf-8")
    os.chmod(tmp, FILE_MODE)
    tmp.replace(path)


def referenced_variables(config_text: str) -> dict[str, bool]:
    """The ``${VAR}`` a config's values refer to, each with whether every use has a
    default (``${VAR:-default}``); comments and keys do not count."""
    try:
        raw = yaml.safe_load(config_text)
    except yaml.YAMLError:
        return {}
    found: dict[str, bool] = {}

    def walk(value: object) -> None:
        if isinstance(value, dict):
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)
        elif isinstance(value, str):
            for match in VARIABLE.finditer(value):
                name = match.group(1)
                found[name] = found.get(name, True) and match.group(2) is not None

    walk(raw)
    return found


def required_variables(config_text: str) -> list[str]:
    """The variables a config cannot do without: those used without a default."""
    return [name for name, has_default in referenced_variables(config_text).items()
            if not has_default]


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
