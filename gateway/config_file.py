"""The config file: where it is found, how it is read, and ``${VAR}`` substitution.

What comes out is plain data for the models in ``gateway/config.py``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

DEFAULT_HOME = "~/.homing"


class ConfigError(Exception):
    """Invalid configuration; ``problems`` holds (dotted path, message) pairs."""

    def __init__(self, source: str, problems: list[tuple[str, str]]) -> None:
        self.source = source
        self.problems = problems
        lines = "\n".join(f"  {path}: {message}" for path, message in problems)
        super().__init__(f"invalid configuration in {source}:\n{lines}")


def find_config_file(explicit: str | Path | None, environ: dict[str, str]) -> Path | None:
    """``--config``, else ``$HOMING_CONFIG``, else ``$HOMING_HOME/config.yaml``."""
    if explicit:
        return Path(explicit).expanduser()
    if environ.get("HOMING_CONFIG"):
        return Path(environ["HOMING_CONFIG"]).expanduser()
    home = Path(environ.get("HOMING_HOME") or DEFAULT_HOME).expanduser()
    candidate = home / "config.yaml"
    return candidate if candidate.is_file() else None


def read_config_file(file: Path) -> Any:
    """The file's YAML document as plain data; ConfigError for anything in the way."""
    source = str(file)
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(source, [("<file>", f"cannot read: {exc.strerror or exc}")]) from exc
    return _parse_yaml(text, source)


def _parse_yaml(text: str, source: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "<file>"
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(source, [(f"<yaml {where}>", f"invalid YAML: {problem}")]) from None


_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def substitute(value: Any, env: dict[str, str], path: tuple[str | int, ...],
               problems: list[tuple[str, str]]) -> Any:
    """Replace ``${VAR}`` (or ``${VAR:-default}``) in every string value."""
    if isinstance(value, dict):
        return {k: substitute(v, env, (*path, k), problems) for k, v in value.items()}
    if isinstance(value, list):
        return [substitute(v, env, (*path, i), problems) for i, v in enumerate(value)]
    if not isinstance(value, str):
        return value

    def replace(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        if name in env:
            return env[name]
        if default is not None:
            return default
        problems.append((dotted(path), f"environment variable {name} is not set"))
        return ""

    return _VAR.sub(replace, value)


def dotted(path: tuple[Any, ...]) -> str:
    return ".".join(str(p) for p in path) or "<root>"
