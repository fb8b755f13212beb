"""The config file: where it is found, how it is read, and ``${VAR}`` substitution.

What comes out is plain data for the models in ``gateway/config/settings.py``. Everything a
file can get wrong before the models see it is refused here with the line or the
field it is at: a file that is too big or not UTF-8, a key given twice (YAML itself
keeps the last one silently), aliases that would expand a small file into gigabytes,
a ``${`` that is not a variable reference.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import yaml

from gateway.errors import ConfigurationError

DEFAULT_HOME = "~/.homing"
CONFIG_NAME = "config.yaml"
#: names a config is easily saved under in a home; none of them is read
LOOKALIKE_NAMES = ("config.yml", "config.json")
#: a config is a few kilobytes; anything this big is a wrong file
MAX_CONFIG_BYTES = 1024 * 1024
#: a config uses an alias or two to share a list; more is a document built to expand
MAX_ALIASES = 100
#: the nodes all alias uses together may add (a "billion laughs" document adds 10^9)
MAX_ALIAS_EXPANSION = 10_000


class ConfigError(ConfigurationError):
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
    candidate = _home_dir(environ) / CONFIG_NAME
    return candidate if candidate.is_file() else None


def ignored_config_files(explicit: str | Path | None, environ: dict[str, str]) -> list[str]:
    """Warnings about files in the home that look like its config but are not read:
    a ``config.yml`` holding a typo otherwise gives "config OK" for the defaults."""
    if explicit or environ.get("HOMING_CONFIG"):
        return []  # the home's config.yaml is not looked for, so neither are look-alikes
    home = _home_dir(environ)
    expected = home / CONFIG_NAME
    reading = (f"{expected} is read instead" if expected.is_file()
               else "no config.yaml is there, so the defaults are used")
    warnings = [f"{home / name} is ignored: only {CONFIG_NAME} is read from {home} "
                f"({reading}); rename it or pass --config"
                for name in LOOKALIKE_NAMES if (home / name).exists()]
    if expected.exists() and not expected.is_file():
        warnings.append(f"{expected} is not a file, so the defaults are used")
    return warnings


def _home_dir(environ: dict[str, str]) -> Path:
    return Path(environ.get("HOMING_HOME") or DEFAULT_HOME).expanduser()


def read_config_file(file: Path) -> Any:
    """The file's YAML document as plain data; ConfigError for anything in the way."""
    source = str(file)
    try:
        with file.open("rb") as stream:
            data = stream.read(MAX_CONFIG_BYTES + 1)
            size = max(len(data), os.fstat(stream.fileno()).st_size)
    except OSError as exc:
        raise ConfigError(source, [("<file>", f"cannot read: {exc.strerror or exc}")]) from exc
    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigError(source, [("<file>", f"the file is {size} bytes, over the limit of "
                                              f"{MAX_CONFIG_BYTES} bytes (1 MB) for a config; "
                                              f"is it the right file?")])
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        hint = " (it looks like UTF-16)" if data[:2] in (b"\xff\xfe", b"\xfe\xff") else ""
        raise ConfigError(source, [("<file>", f"not UTF-8: byte 0x{data[exc.start]:02x} at "
                                              f"offset {exc.start} (line {line}) cannot be "
                                              f"decoded{hint}; save the file as UTF-8")]) from None
    return _parse_yaml(text, source)


def _parse_yaml(text: str, source: str) -> Any:
    loader = _ConfigLoader(text)
    try:
        return loader.get_single_data()
    except _Refused as exc:
        raise ConfigError(source, [(f"<yaml line {exc.line}>", exc.message)]) from None
    except yaml.YAMLError as exc:
        raise ConfigError(source, [_yaml_problem(exc, text)]) from None
    except RecursionError:  # PyYAML parses nested collections by recursion
        raise ConfigError(source, [("<file>", "nested too deeply to be a config")]) from None
    finally:
        loader.dispose()


#: PyYAML's wording, and what it means in a config (the first that matches is said)
_YAML_PLAIN = (
    ("mapping values are not allowed",
     "a `:` where no key can start: a value holding `: ` needs quotes, or the line above "
     "is missing its own `:` or is indented differently"),
    ("expected <block end>",
     "this line is indented differently from the lines beside it: keys of one mapping, "
     "and the dashes of one list, line up"),
    ("could not find expected ':'", "a key without its `:` (or a quote or bracket above "
                                    "left open)"),
    ("'\\t' that cannot start", "a tab: YAML indents with spaces only"),
    ("that cannot start any token",
     "a value cannot begin with this character unquoted; put the value in quotes"),
    ("expected ',' or '}'", "a `{` mapping that is not closed with `}` (or a missing comma)"),
    ("expected ',' or ']'", "a `[` list that is not closed with `]` (or a missing comma)"),
    ("unexpected end of stream", "a quote opened here is never closed"),
    ("found undefined alias", "an alias (*name) with no anchor (&name) before it"),
    ("could not determine a constructor", "a YAML tag (!!…) that a config cannot hold"),
)


def _yaml_problem(exc: yaml.YAMLError, text: str) -> tuple[str, str]:
    """A syntax error in plain words, at its line and column, with the line shown and a
    caret under the place: PyYAML's own wording alone ("mapping values are not allowed
    here") does not say what to change."""
    problem = getattr(exc, "problem", None) or str(exc)
    context = getattr(exc, "context", None) or ""
    mark = getattr(exc, "problem_mark", None)
    if ("quoted scalar" in context or "flow" in context) and getattr(
            exc, "context_mark", None) is not None:
        mark = exc.context_mark  # where the quote or bracket was opened, not the file's end
    plain = next((words for wording, words in _YAML_PLAIN if wording in problem),
                 "this is not valid YAML")
    message = f"{plain} (YAML: {problem})"
    if mark is None:
        return "<file>", message
    lines = text.splitlines()
    if mark.line < len(lines):
        line = lines[mark.line]
        # tabs stay tabs under the line, so the caret sits under the place however shown
        pad = "".join("\t" if c == "\t" else " " for c in line[:mark.column])
        number = str(mark.line + 1)
        message += f"\n    {number} | {line}\n    {' ' * len(number)} | {pad}^"
    return f"<yaml line {mark.line + 1}, column {mark.column + 1}>", message


class _Refused(ConfigurationError):
    """YAML that parses but is refused in a config, at a line."""

    def __init__(self, line: int, message: str) -> None:
        super().__init__(message)
        self.line = line
        self.message = message


class _ConfigLoader(yaml.SafeLoader):  # type: ignore[misc]  # PyYAML has no type hints
    """``yaml.safe_load`` that refuses duplicate keys and bounds aliases.

    Aliases are counted while the document is composed, where an alias is one shared
    node; the expansion a "billion laughs" document is built for happens only later
    (substitution and validation copy every use), so it is stopped before it starts.
    """

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._aliases = 0
        self._expansion = 0
        self._sizes: dict[int, int] = {}  # id(node) -> nodes in it, aliases expanded
        self._open_anchors: list[str] = []
        self._checked: set[int] = set()

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent):
            line = event.start_mark.line + 1
            if event.anchor in self._open_anchors:
                raise _Refused(line, f"alias *{event.anchor} refers to the node it is in "
                                     f"(a document that contains itself)")
            node: yaml.Node = super().compose_node(parent, index)
            self._aliases += 1
            self._expansion += self._size(node)
            if self._aliases > MAX_ALIASES:
                raise _Refused(line, f"more than {MAX_ALIASES} aliases (*name); write the "
                                     f"values out instead")
            if self._expansion > MAX_ALIAS_EXPANSION:
                raise _Refused(line, f"aliases (*name) expand to more than "
                                     f"{MAX_ALIAS_EXPANSION} values; write them out instead")
            return node
        anchor = getattr(event, "anchor", None)
        if anchor is None:
            return super().compose_node(parent, index)
        self._open_anchors.append(anchor)
        try:
            return super().compose_node(parent, index)
        finally:
            self._open_anchors.pop()

    def _size(self, node: yaml.Node) -> int:
        """The values ``node`` stands for with every alias in it expanded (memoized:
        the same node is shared by every alias of it)."""
        known = self._sizes.get(id(node))
        if known is not None:
            return known
        size = 1
        if isinstance(node, yaml.SequenceNode):
            size += sum(self._size(item) for item in node.value)
        elif isinstance(node, yaml.MappingNode):
            size += sum(self._size(k) + self._size(v) for k, v in node.value)
        self._sizes[id(node)] = size
        return size

    def flatten_mapping(self, node: yaml.MappingNode) -> None:
        # checked here, before merge keys (``<<: *defaults``) are folded in: a key a
        # merge brings and the mapping overrides is meant, not duplicated; and a merged
        # node is flattened before its own turn to be constructed
        if id(node) not in self._checked:
            self._checked.add(id(node))
            self._refuse_duplicate_keys(node)
        super().flatten_mapping(node)

    def _refuse_duplicate_keys(self, node: yaml.MappingNode) -> None:
        first_lines: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            try:
                first = first_lines.get(key)
            except TypeError:
                continue  # an unhashable key: the constructor refuses it with its own error
            if first is not None:
                raise _Refused(line, f"duplicate key {key!r} (first at line {first})")
            first_lines[key] = line


#: ``${NAME}`` or ``${NAME:-default}`` in a string value
VARIABLE = _VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


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
        problems.append((dotted(path), unset_variable(name, env)))
        return ""

    stray = _stray_reference(value)
    if stray is not None:
        problems.append((dotted(path), stray))
        return value
    return _VAR.sub(replace, value)


#: how an unset variable's problem begins (``homing doctor`` gives its own fix after it)
UNSET = re.compile(r"environment variable ([A-Za-z_][A-Za-z0-9_]*) is not set")


def unset_variable(name: str, env: dict[str, str]) -> str:
    """The problem with an unset ``${NAME}``, with both places it can be set: the
    environment file is the one every ``homing`` command reads (gateway/config/env_file.py)."""
    env_file = _home_dir(env) / "homing.env"
    return (f"environment variable {name} is not set; export it in the shell, or define it "
            f"in {env_file} ($HOMING_HOME/homing.env) as {name}=value")


def _stray_reference(value: str) -> str | None:
    """What is wrong with a ``${`` that starts no ``${VAR}``: used literally it would
    become, say, the bot token. The text itself is not shown (it may be a secret)."""
    covered = [m.span() for m in _VAR.finditer(value)]
    for start in (m.start() for m in re.finditer(r"\$\{", value)):
        if any(begin <= start < end for begin, end in covered):
            continue
        at = f"at character {start + 1}"
        if "}" not in value[start:]:
            return f"unterminated ${{ {at}: no closing }}; write ${{VAR}} or ${{VAR:-default}}"
        return (f"${{ {at} is not ${{VAR}} or ${{VAR:-default}} (a name is letters, digits "
                f"and _, not starting with a digit)")
    return None


def dotted(path: tuple[Any, ...]) -> str:
    """``platforms.web.port``; a mapping's key is named as itself (pydantic adds
    ``[key]`` after a key that is wrong in itself)."""
    return ".".join(str(p) for p in path if p != "[key]") or "<root>"
