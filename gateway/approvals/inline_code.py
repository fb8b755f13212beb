"""What an interpreter one-liner (``python -c``, ``perl -e``, ``ruby -e``, ``node -e``)
does that the approval rules care about: the files it deletes or overwrites, the
processes it kills and the shell commands it runs, each handed back as the shell
command that would do the same, so that one set of rules judges both.

Python is read with its own parser (``ast``); the others by their string literals
next to the names of the calls that delete or run something. It is a net for the
obvious one-liner, not an interpreter: code it cannot follow is not guessed at.
"""

from __future__ import annotations

import ast
import bisect
import re
from dataclasses import dataclass
from typing import Literal

Language = Literal["python", "perl", "ruby", "node"]


@dataclass(frozen=True, slots=True)
class Effect:
    """One thing the code does, as the shell would say it (exactly one field is set)."""

    #: the words of the equivalent command (None: a word computed at run time)
    argv: tuple[str | None, ...] = ()
    #: a file it opens for writing, and whether it appends
    writes: tuple[str | None, bool] | None = None
    #: a shell script it hands to a shell (``os.system``, ``system``, backticks)
    script: str | None = None
    #: it runs code it computes (``exec(base64...)``), which cannot be read here
    runs_computed: bool = False


def effects(language: Language, code: str) -> list[Effect]:
    """What ``code`` does that the rules judge. Code it cannot follow is not guessed
    at and gives no effect; code it runs from a computed string is ``runs_computed``."""
    if language == "python":
        try:
            return _python(_parse(code), depth=0)
        except (SyntaxError, ValueError, RecursionError):
            pass  # Python 2, or not Python: read it like the other languages
    return _by_literals(code)


def _parse(source: str) -> ast.AST:
    """``ast.parse``, once more when CPython 3.11 says its AST state went astray
    (``SystemError: AST constructor recursion depth mismatch``, gh-106905: another
    ``ast.parse`` ran inside this one — a traceback formatted by a finalizer the
    collector ran meanwhile); the second reading stands."""
    try:
        return ast.parse(source)
    except SystemError:
        return ast.parse(source)


# Python --------------------------------------------------------------------------

_DELETE_TREE = frozenset({"rmtree", "removedirs"})
_DELETE = frozenset({"remove", "unlink", "rmdir"})
_SHELL = frozenset({"system", "popen", "getoutput", "getstatusoutput"})
_SPAWN = frozenset({"run", "call", "check_call", "check_output", "Popen", "spawn"})
_MOVE = frozenset({"move", "rename", "replace"})
#: calls that hand back their (first) argument as a path
_SAME_PATH = frozenset({"expanduser", "expandvars", "abspath", "realpath", "normpath",
                        "Path", "PurePath", "PosixPath", "str", "fspath", "resolve"})
_MAX_DEPTH = 8


def _python(tree: ast.AST, depth: int) -> list[Effect]:
    found: list[Effect] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            found.extend(_python_call(node, depth))
    return found


def _python_call(call: ast.Call, depth: int) -> list[Effect]:
    name = _last_name(call.func)
    first = call.args[0] if call.args else None
    # `Path('/x').unlink()`: the path is what the method is called on
    receiver = call.func.value if isinstance(call.func, ast.Attribute) else None
    target = _value(first) if first is not None else (
        _value(receiver) if receiver is not None else None)
    if name in ("exec", "eval") and first is not None:
        source = _value(first)
        if source is None or depth >= _MAX_DEPTH:
            return [Effect(runs_computed=True)]
        try:
            return _python(_parse(source), depth + 1)
        except (SyntaxError, ValueError, RecursionError):
            return []
    if name in _DELETE_TREE:
        return [Effect(argv=("rm", "-r", "--", target))]
    if name in _DELETE and (first is not None or receiver is not None):
        return [Effect(argv=("rm", "--", target))]
    if name in _SHELL and first is not None:
        return [_shell_or_argv(first)]
    if name in _SPAWN and first is not None and isinstance(first, ast.Constant | ast.List
                                                            | ast.Tuple | ast.JoinedStr):
        return [_shell_or_argv(first)]
    if name in ("kill", "killpg") and first is not None:
        return [Effect(argv=("kill", "-9", _value(first)))]
    if name in _MOVE:
        return _python_move(call, receiver)
    if name == "truncate" and first is not None:
        return [Effect(argv=("truncate", "-s", "0", target))]
    if name in ("open", "write_text", "write_bytes"):
        return _python_open(call, name, receiver)
    return []


def _python_open(call: ast.Call, name: str, receiver: ast.expr | None) -> list[Effect]:
    builtin = isinstance(call.func, ast.Name) or (
        isinstance(receiver, ast.Name) and receiver.id in ("io", "codecs", "builtins"))
    if name == "open" and builtin and call.args:  # open(path, mode)
        path = _value(call.args[0])
        mode_node = call.args[1] if len(call.args) > 1 else next(
            (k.value for k in call.keywords if k.arg == "mode"), None)
    else:  # Path(path).open(mode), Path(path).write_text(...)
        path = _value(receiver) if receiver is not None else None
        mode_node = call.args[0] if name == "open" and call.args else None
        if name != "open":
            return [Effect(writes=(path, False))]
    mode = _value(mode_node) if mode_node is not None else "r"
    if mode is None or any(flag in mode for flag in "wax+"):
        return [Effect(writes=(path, mode is not None and "a" in mode))]
    return []


def _python_move(call: ast.Call, receiver: ast.expr | None) -> list[Effect]:
    """``shutil.move(a, b)``, ``os.rename(a, b)``, ``Path(a).rename(b)``; not a string's
    ``text.replace(a, b)``."""
    of_module = receiver is None or (isinstance(receiver, ast.Name)
                                     and receiver.id in ("os", "shutil"))
    if of_module and len(call.args) >= 2:
        source, destination = call.args[0], call.args[1]
    elif not of_module and receiver is not None and len(call.args) == 1:
        source, destination = receiver, call.args[0]
    else:
        return []
    return [Effect(argv=("mv", "--", _value(source), _value(destination)))]


def _shell_or_argv(node: ast.expr) -> Effect:
    """``os.system('rm -rf ~')`` runs a script; ``subprocess.run(['rm', '-rf', '~'])`` a
    command."""
    if isinstance(node, ast.List | ast.Tuple):
        return Effect(argv=tuple(_value(item) for item in node.elts))
    text = _value(node)
    return Effect(script=text) if text is not None else Effect(runs_computed=True)


def _last_name(func: ast.expr) -> str:
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else ""


def _value(node: ast.expr | None) -> str | None:
    """The text an expression stands for where the code spells it out (a home is
    ``~``, the working directory ``.``); None where it is computed."""
    if isinstance(node, ast.Constant):
        return str(node.value) if isinstance(node.value, str | int) else None
    if isinstance(node, ast.JoinedStr):
        pieces = [_value(v) if isinstance(v, ast.Constant) else None for v in node.values]
        return None if None in pieces else "".join(p or "" for p in pieces)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):  # os.kill(-1, 9)
        inner = _value(node.operand)
        return None if inner is None else f"-{inner}"
    if isinstance(node, ast.Attribute):
        return {"sep": "/", "curdir": ".", "pardir": ".."}.get(node.attr)
    if isinstance(node, ast.Subscript):  # os.environ['HOME']
        return "~" if _value(node.slice) == "HOME" else None
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div | ast.Add):
        left, right = _value(node.left), _value(node.right)
        if left is None or right is None:
            return None
        return left + right if isinstance(node.op, ast.Add) else _join(left, right)
    if isinstance(node, ast.Call):
        return _call_value(node)
    return None


def _call_value(call: ast.Call) -> str | None:
    name = _last_name(call.func)
    args = [_value(a) for a in call.args]
    if name in ("home", "gethomedir"):
        return "~"
    if name in ("getcwd", "cwd"):
        return "."
    if name in ("getenv", "get") and args[:1] == ["HOME"]:
        return "~"
    if name == "join" and args and None not in args:
        joined = args[0] or ""
        for part in args[1:]:
            joined = _join(joined, part or "")
        return joined
    if name in _SAME_PATH:
        if args:
            return args[0]
        if isinstance(call.func, ast.Attribute):  # Path('~').expanduser()
            return _value(call.func.value)
    return None


def _join(left: str, right: str) -> str:
    if right.startswith("/"):
        return right
    return f"{left.rstrip('/')}/{right}" if left else right


# Perl, Ruby, Node (and Python that does not parse) ------------------------------

# a literal left open runs to the end: were its closing quote required, every later
# quote would start a fresh scan to the end (quadratic on a long line of `\"`)
_LITERAL = re.compile(r"'((?:[^'\\]|\\.)*+)'?|\"((?:[^\"\\]|\\.)*+)\"?|`((?:[^`\\]|\\.)*+)`?",
                      re.DOTALL)
_DELETES = re.compile(r"\b(?:rmtree|remove_tree|rm_rf|rm_r|remove_dir|remove_entry\w*|rmSync|"
                      r"rmdirSync|unlinkSync|rimraf|unlink|rmdir)\b|\bfs\.rm\b|"
                      r"\bFile\.delete\b|\bFileUtils\.rm\b")
#: a call that runs a command, up to its first argument (``system(``, ``exec ``)
_RUNS = re.compile(r"\b(?:system|exec|execSync|execFileSync|spawnSync|spawn|popen)\b[\s(]*")
#: Perl's ``qx{…}``, Ruby's ``%x(…)``: a command in the delimiters after it
_QUOTED_COMMAND = re.compile(r"(?:\bqx|%x)\s*([^\w\s])")
_CLOSERS = {"{": "}", "(": ")", "[": "]", "<": ">"}
#: what may stand between the literal arguments of one call (``"rm", ["-rf", "/"]``)
_BETWEEN_ARGUMENTS = re.compile(r"[\s,\[]*")
_HOME = re.compile(r"\$ENV\{\s*['\"]?HOME|ENV\[\s*['\"]HOME|process\.env\.HOME|homedir\(\)|"
                   r"Dir\.home|expand_path\(\s*['\"]~")


def _by_literals(code: str) -> list[Effect]:
    matches = list(_LITERAL.finditer(code))
    literals = [_literal(m) for m in matches]
    found: list[Effect] = []
    if _DELETES.search(code):
        targets = [*literals, *(["~"] if _HOME.search(code) else [])]
        found += [Effect(argv=("rm", "-r", "--", target)) for target in targets]
    # backticks run their text in a shell; any other literal is only read as a command
    # where a call that runs one is handed it
    found += [Effect(script=_literal(m)) for m in matches if m.group(3) is not None]
    found += [Effect(script=text) for text in _quoted_commands(code)]
    starts = [m.start() for m in matches]
    for call in _RUNS.finditer(code):
        before = bisect.bisect_right(starts, call.start()) - 1
        if before >= 0 and matches[before].end() > call.start():
            continue  # the word is in a string ("exec (x"); each literal is read once
        arguments = _call_literals(code, call.end())
        if len(arguments) == 1:  # system("rm -rf ~"): a shell runs it
            found.append(Effect(script=arguments[0]))
        elif arguments:  # system("rm", "-rf", "/"), spawn("rm", ["-rf", "/"]): the words
            found.append(Effect(argv=tuple(arguments)))
    return found


def _literal(match: re.Match[str]) -> str:
    return next(g for g in match.groups() if g is not None)


def _call_literals(code: str, at: int) -> list[str]:
    """The literal arguments a call starts with at ``at``, up to the first that is not."""
    found: list[str] = []
    while True:
        between = _BETWEEN_ARGUMENTS.match(code, at)
        literal = _LITERAL.match(code, between.end() if between else at)
        if literal is None:
            return found
        found.append(_literal(literal))
        at = literal.end()


def _quoted_commands(code: str) -> list[str]:
    """The text of Perl's ``qx{…}`` and Ruby's ``%x(…)``, which a shell runs."""
    found = []
    for opening in _QUOTED_COMMAND.finditer(code):
        start = opening.end()
        end = code.find(_CLOSERS.get(opening.group(1), opening.group(1)), start)
        found.append(code[start:] if end < 0 else code[start:end])
    return found
