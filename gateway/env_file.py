"""The environment file: ``$HOMING_HOME/homing.env``, where the secrets the config refers
to as ``${VAR}`` live, so config.yaml can be shown to anyone. systemd reads it
(``EnvironmentFile=``); in a terminal, ``set -a; . ~/.homing/homing.env; set +a``.

One ``NAME=value`` a line, ``#`` comments, mode 0600 like the rest of the state
directory. ``homing setup`` writes it, ``homing doctor`` checks it defines what the
config needs.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import yaml

from .config import _VAR as CONFIG_VARIABLE
from .private_files import FILE_MODE, private_dir, private_file

FILE_NAME = "homing.env"
_LINE = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=(.*)")


def env_file_path(home: Path) -> Path:
    return home / FILE_NAME


def read_env_file(path: Path) -> dict[str, str]:
    """The variables a file defines, read as systemd reads them (the simple cases:
    ``NAME=value``, optionally quoted; comments and blank lines skipped)."""
    values: dict[str, str] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        match = _LINE.fullmatch(line.strip())
        if match is None:
            continue
        value = match.group(2).strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        values[match.group(1)] = value
    return values


def write_env_file(path: Path, values: dict[str, str]) -> None:
    """Set ``values`` in the file, keeping its other lines; made 0600 before anything
    is written to it, and replaced whole, so no reader sees half a file."""
    for name, value in values.items():
        if not _LINE.fullmatch(f"{name}={value}") or "\n" in value:
            raise ValueError(f"{name}: not something an environment file can hold")
    kept = []
    if path.exists():
        kept = [line for line in path.read_text(encoding="utf-8").splitlines()
                if (m := _LINE.fullmatch(line.strip())) is None or m.group(1) not in values]
    lines = kept + [f"{name}={value}" for name, value in values.items()]
    private_dir(path.parent)
    tmp = private_file(path.with_name(f".{path.name}.tmp"))
    tmp.write_text("\n".join(lines) + "\n", encoding="utf-8")
    os.chmod(tmp, FILE_MODE)
    tmp.replace(path)


def referenced_variables(config_text: str) -> dict[str, bool]:
    """The ``${VAR}`` a config's values refer to, each with whether it has a default
    (``${VAR:-default}``); comments and keys do not count."""
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
            for match in CONFIG_VARIABLE.finditer(value):
                found[match.group(1)] = found.get(match.group(1), True) and \
                    match.group(2) is not None

    walk(raw)
    return found
