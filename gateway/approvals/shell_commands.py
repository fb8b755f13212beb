"""The commands a line of shell would run, read with a real shell parser
(tree-sitter-bash): each simple command's words with the quoting removed and
braces expanded, its redirections, and whether it runs code the line does not
show.

It follows what runs inside what: pipes, lists, loops, functions, command and
process substitutions; the programs that run another command (``sudo``,
``env``, ``nohup``, ``timeout``, ``chroot``, ``xargs``, ``find -exec``, ``ssh``,
``su -c``, ``watch``…); scripts handed to a shell (``sh -c``, ``eval``, a literal
piped into ``bash`` or ``sudo -s``) and one-liners handed to an interpreter
(``python3 -c``, ``perl -e``…, see gateway/approvals/inline_code.py), which are read in turn.

It reads a command before it runs, to judge it, so it fails closed: text the
parser cannot read raises :class:`Unreadable`, and a word the shell computes
(``$(…)``, ``$VAR``, ``${IFS}``) keeps an ``UNKNOWN`` mark instead of a guess.
"""

from __future__ import annotations

import codecs
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

from gateway.approvals.inline_code import Language as CodeLanguage
from gateway.approvals.inline_code import effects
from gateway.approvals.shell_paths import UNKNOWN
from gateway.errors import RefusedInput

if TYPE_CHECKING:
    from tree_sitter import Language, Node


@lru_cache(maxsize=1)
def _bash() -> Language:
    """The Bash grammar, loaded with the first command read: a daemon whose agent runs
    nothing asked about never holds the parser (bench/idle_rss.py)."""
    import tree_sitter_bash
    from tree_sitter import Language

    return Language(tree_sitter_bash.language())


#: scripts inside scripts (``sh -c "sh -c '…'"``) deeper than this are not read
MAX_DEPTH = 8

#: how a computed part of an inner script is spelt for the parser (read back as UNKNOWN)
_SHOWN_UNKNOWN = "${__homing_unknown}"
_WRITES = frozenset({">", ">>", ">|", "&>", "&>>", "<>", ">&"})


class Unreadable(RefusedInput):
    """The shell parser cannot read the text (or it nests too deep): it is judged
    unseen, never as harmless."""


@dataclass(frozen=True, slots=True)
class Redirect:
    op: str
    target: str

    @property
    def writes(self) -> bool:
        return self.op in _WRITES

    @property
    def appending(self) -> bool:
        return self.op in (">>", "&>>")


@dataclass(frozen=True, slots=True)
class Command:
    """One program the line runs, as its words arrive (quoting removed)."""

    argv: tuple[str, ...]
    redirects: tuple[Redirect, ...] = ()
    #: the program's name is computed at run time ($(…), a variable, ${IFS})
    computed_name: bool = False
    #: a shell or interpreter fed code the line does not show: a download, a decoded
    #: string, a substitution
    runs_unseen: bool = False

    @property
    def program(self) -> str:
        return os.path.basename(self.argv[0]) if self.argv else ""

    @property
    def args(self) -> tuple[str, ...]:
        return self.argv[1:]


def read_commands(script: str) -> list[Command]:
    """Every command ``script`` would run, in the order they appear; raises
    Unreadable when the parser cannot read it."""
    reader = _Reader()
    try:
        reader.script(script, 0)
    except RecursionError:  # `$($($(…)))` thousands deep: the tree is walked recursively
        raise Unreadable("nested too deep to read") from None
    return reader.found


@dataclass(frozen=True, slots=True)
class _Input:
    """What a command reads on its standard input, as far as the line shows it."""

    #: the text (None: computed or downloaded, so unknown)
    text: str | None
    #: paths it lists (``find /``'s roots, ``echo a b``'s words), for ``xargs``
    paths: tuple[str, ...] = ()
    #: a file (``< script.sh``): like naming a script, it is not shown either way
    from_file: bool = False
    #: ``paths`` are ``find``'s roots: the input lists everything under them
    under: bool = False


_UNSEEN = _Input(None)

_SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "rbash", "fish"})
_INTERPRETERS: tuple[tuple[re.Pattern[str], CodeLanguage], ...] = (
    (re.compile(r"python[\d.]*|pypy[\d.]*"), "python"),
    (re.compile(r"perl[\d.]*"), "perl"),
    (re.compile(r"ruby[\d.]*"), "ruby"),
    (re.compile(r"node|nodejs"), "node"),
)


@dataclass(frozen=True, slots=True)
class _Wrapper:
    """A program that runs the command in its arguments: how to skip its own options."""

    #: short options that take a value (``sudo -u root``)
    values: str = ""
    #: long options that take the next word as their value
    long_values: frozenset[str] = frozenset()
    #: words to skip after the options (``timeout``'s duration)
    positional: int = 0
    #: ``NAME=value`` words before the command are settings (``sudo``, ``env``)
    assignments: bool = False


_WRAPPERS: dict[str, _Wrapper] = {
    "sudo": _Wrapper("ughpCDrtTU", frozenset({"--user", "--group", "--host", "--prompt",
                                              "--chdir", "--role", "--type", "--other-user",
                                              "--close-from", "--command-timeout"}),
                     assignments=True),
    "doas": _Wrapper("uC"),
    "env": _Wrapper("uC", frozenset({"--unset", "--chdir"}), assignments=True),
    "nohup": _Wrapper(),
    "timeout": _Wrapper("sk", frozenset({"--signal", "--kill-after"}), positional=1),
    "nice": _Wrapper("n", frozenset({"--adjustment"})),
    "ionice": _Wrapper("cnpPu", frozenset({"--class", "--classdata"})),
    "time": _Wrapper("fo", frozenset({"--format", "--output"})),
    "command": _Wrapper(),
    "builtin": _Wrapper(),
    "exec": _Wrapper("a"),
    "stdbuf": _Wrapper("ioe", frozenset({"--input", "--output", "--error"})),
    "setsid": _Wrapper(),
    "chronic": _Wrapper(),
    "unbuffer": _Wrapper(),
    "busybox": _Wrapper(),
    "chroot": _Wrapper("", frozenset({"--userspec", "--groups"}), positional=1),
    "flock": _Wrapper("wE", frozenset({"--timeout", "--conflict-exit-code"}), positional=1),
    "strace": _Wrapper("abeEIoOpPsSuX"),
    "taskset": _Wrapper(positional=1),
    "unshare": _Wrapper(),
    "xargs": _Wrapper("IiLlnPsdEea", frozenset({"--arg-file", "--delimiter", "--max-args",
                                               "--max-procs", "--max-chars", "--max-lines",
                                               "--replace", "--eof"})),
    "pkexec": _Wrapper("", frozenset({"--user"})),
    # `runuser -u ann -- CMD`; its su-like form (`runuser -l ann -c CODE`) is read as su's
    "runuser": _Wrapper("ugGws", frozenset({"--user", "--group", "--supp-group", "--shell",
                                            "--whitelist-environment"})),
}
#: ssh options that take a value
_SSH_VALUES = "BbcDEeFIiJLlmOoPpQRSWw"


class _Reader:
    """Walks a script's syntax tree and collects, in ``found``, every command it would
    run, following what runs inside what (wrappers, ``sh -c``, pipes into a shell,
    one-liners) down to :data:`MAX_DEPTH` scripts deep."""

    def __init__(self) -> None:
        self.found: list[Command] = []

    def script(self, text: str, depth: int) -> None:
        if depth > MAX_DEPTH:
            raise Unreadable(f"scripts nested more than {MAX_DEPTH} deep")
        try:
            source = text.encode()
        except UnicodeEncodeError as exc:  # a lone surrogate: no shell is handed such text
            raise Unreadable(f"text that is not valid Unicode at character {exc.start}") \
                from None
        from tree_sitter import Parser

        tree = Parser(_bash()).parse(source)
        if tree.root_node.has_error:
            raise Unreadable(_first_error(tree.root_node))
        self._visit(tree.root_node, None, depth)

    # the syntax tree ---------------------------------------------------------

    def _visit(self, node: Node, stdin: _Input | None, depth: int) -> None:
        kind = node.type
        if kind == "pipeline":
            if node.parent is not None and node.parent.type == "heredoc_redirect":
                return  # `cat <<EOF | sh`: read with the here-document (_redirected)
            self._pipeline(_stages(node), stdin, depth)
        elif kind == "redirected_statement":
            self._redirected(node, stdin, depth)
        elif kind == "command":
            self._command(node, [], stdin, depth)
        else:
            for child in node.named_children:
                self._visit(child, stdin, depth)

    def _pipeline(self, stages: list[Node], stdin: _Input | None, depth: int) -> None:
        for stage in stages:
            self._visit(stage, stdin, depth)
            stdin = _output(stage)

    def _redirected(self, node: Node, stdin: _Input | None, depth: int) -> None:
        body = node.child_by_field_name("body")
        redirects = node.children_by_field_name("redirect")
        piped = [child for r in redirects if r.type == "heredoc_redirect"
                 for child in r.named_children if child.type == "pipeline"]
        if body is not None and body.type == "command":
            self._command(body, redirects, stdin, depth)
            if piped:  # `cat <<EOF | sh`: the here-document's reader feeds the pipe
                self._pipeline(_stages(piped[0]), _output(body, redirects), depth)
            return
        # a redirection of a group or a loop (`{ …; } > /dev/sda`), or of nothing
        self.found.append(Command((), tuple(_redirects(redirects))))
        for redirect in redirects:
            self._visit(redirect, None, depth)
        for pipeline in piped:
            self._pipeline(_stages(pipeline), _UNSEEN, depth)
        if body is not None:
            self._visit(body, stdin, depth)

    def _command(self, node: Node, outer: list[Node], stdin: _Input | None,
                 depth: int) -> None:
        name = node.child_by_field_name("name")
        own = [c for c in node.named_children if c.type.endswith("_redirect")]
        redirect_nodes = [*own, *outer]
        words = [] if name is None else [name, *node.children_by_field_name("argument")]
        # `echo a > f b`: the parser leaves `b` in the redirection; it is an argument
        words += [extra for r in redirect_nodes if r.type == "file_redirect"
                  for extra in r.children_by_field_name("destination")[1:]]
        for child in [*node.named_children, *outer]:  # substitutions run first
            if child is not name or name.named_child_count:
                self._visit(child, stdin, depth)
        stdin = _redirected_input(redirect_nodes) or stdin
        argv = tuple(w for node in words for w in _words(node))
        if argv[:1] == ("eval",) and _evaluates_start_up_code(node):
            # the code is the tool's own start-up (the tool was read above, as it runs)
            self.found.append(Command(argv, tuple(_redirects(redirect_nodes))))
            return
        self._run(argv, tuple(_redirects(redirect_nodes)), stdin, depth)

    # what runs inside what ---------------------------------------------------

    def _run(self, argv: tuple[str, ...], redirects: tuple[Redirect, ...],
             stdin: _Input | None, depth: int) -> None:
        if not argv:
            if redirects:
                self.found.append(Command((), redirects))
            return
        if UNKNOWN in argv[0]:
            self.found.append(Command(argv, redirects, computed_name=True))
            return
        program = os.path.basename(argv[0])
        code = self._code(program, argv[1:], stdin)
        self.found.append(Command(argv, redirects, runs_unseen=code is _COMPUTED))
        if isinstance(code, _Code):
            self._read_code(code, depth + 1)
            return
        if program == "find":
            for command in find_commands(argv[1:]):
                self._run(command, (), None, depth)
            return
        wrapper = _WRAPPERS.get(program)
        if wrapper is None:
            return
        if program == "env" and (split := _env_split(argv[1:])) is not None:
            self.script(split, depth + 1)
            return
        inner = _unwrapped(argv[1:], wrapper)
        if not inner and (program == "pkexec" or program in ("sudo", "doas")
                          and _asks_for_a_shell(argv[1:])):
            inner = ("sh",)  # `sudo -s`, `sudo -i`, `pkexec`: a root shell, reading stdin
        if program == "xargs":
            inner = inner or ("echo",)
            if stdin is not None and stdin.under:
                # `find R | xargs CMD` runs CMD on everything under R: `find R -exec CMD {} +`
                self._run(("find", *stdin.paths, "-exec", *inner, "{}", "+"), (), None, depth)
                return
            inner += stdin.paths if stdin else ()
            stdin = None
        self._run(inner, (), stdin, depth)

    def _read_code(self, code: _Code, depth: int) -> None:
        """A script is read as one; a one-liner by what it does, each effect as the
        shell command that would do the same (gateway/approvals/inline_code.py)."""
        if code.language is None:
            self.script(code.text, depth)
            return
        for effect in effects(code.language, code.text):
            if effect.script is not None:
                self.script(effect.script, depth)
            elif effect.writes is not None:
                path, appending = effect.writes
                self.found.append(Command((), (Redirect(
                    ">>" if appending else ">", UNKNOWN if path is None else _shown(path)),)))
            elif effect.runs_computed:
                self.found.append(Command((code.language,), runs_unseen=True))
            elif effect.argv:
                self._run(tuple(UNKNOWN if w is None else _shown(w) for w in effect.argv),
                          (), None, depth)

    def _code(self, program: str, args: tuple[str, ...],
              stdin: _Input | None) -> _Code | _Computed | None:
        """The code a shell, an interpreter, ``eval``, ``ssh`` or ``su`` is handed: a
        _Code to read, _COMPUTED when the line does not show it, None when it runs a
        named file or nothing."""
        language: CodeLanguage | None = next(
            (lang for pattern, lang in _INTERPRETERS if pattern.fullmatch(program)), None)
        if program in _SHELLS or program in (".", "source"):
            source = _shell_source(args) if program in _SHELLS else ("file", args[:1])
        elif language is not None:
            source = _interpreter_source(language, args)
        elif program == "eval":
            source = ("code", (" ".join(args),)) if args else ("none", ())
        elif program == "ssh":  # with no remote command, the remote shell reads stdin
            remote = _ssh_command(args)
            source = ("code", (remote,)) if remote else ("stdin", ())
        elif program == "runuser" and any(_is_user_option(w) for w in args):
            return None  # `runuser -u ann -- CMD`: a wrapper (_WRAPPERS)
        elif program in ("su", "runuser"):  # `su -c CODE`; without it, a shell reading stdin
            code = _command_option(args)
            source = ("code", (code,)) if code is not None else ("stdin", ())
        elif program == "flock" and (code := _command_option(args)) is not None:
            source = "code", (code,)  # `flock FILE -c CODE` (`flock FILE CMD` is a wrapper)
        elif program == "watch":  # runs its words with `sh -c`
            source = "code", (" ".join(_unwrapped(args, _WATCH)),)
        else:
            return None
        how, texts = source
        if how == "stdin":
            if stdin is None or stdin.from_file:
                return None  # the terminal, or a script file
            texts = () if stdin.text is None else (stdin.text,)
            if not texts:
                return _COMPUTED
        elif how == "file":
            # `bash <(curl …)`, `source <(…)`: a script the line computes (a process
            # substitution arrives as the /dev/fd path bash hands over); `bash "$DIR/x.sh"`
            # or `source "$VIRTUAL_ENV/bin/activate"` names a script, as `bash x.sh` does
            return _COMPUTED if any(t.startswith(_PIPED_FILE) for t in texts) else None
        elif how == "none":
            return None
        text = "\n".join(texts)
        if text.lstrip().startswith(UNKNOWN):
            return _COMPUTED  # `eval "$(…)"`, `bash -c "$CMD"`: the whole code is computed
        # `bash -c "rm -rf $DIR/"`: the computed part is read as the unknown it is
        return _Code(language, text.replace(UNKNOWN, _SHOWN_UNKNOWN))


class _Computed:
    """Code that is fed to a shell or interpreter but not shown by the line."""


_COMPUTED = _Computed()


@dataclass(frozen=True, slots=True)
class _Code:
    """Code a shell or an interpreter is handed, as the line shows it."""

    #: None: a shell script
    language: CodeLanguage | None
    text: str


# the programs that run code ----------------------------------------------------------

_Source = tuple[str, tuple[str, ...]]


def _shell_source(args: tuple[str, ...]) -> _Source:
    """``bash -c CODE``, ``bash -s``/``bash -``/``bash`` (stdin), ``bash FILE``."""
    command = stdin = False
    i = 0
    while i < len(args):
        word = args[i]
        if word in ("--", "-"):
            stdin = stdin or word == "-"
            i += 1
            break
        if word.startswith("--"):
            i += 2 if word in ("--rcfile", "--init-file") else 1
            continue
        if word[:1] in "-+" and len(word) > 1:
            command = command or (word[0] == "-" and "c" in word)
            stdin = stdin or "s" in word
            i += 2 if ("o" in word or "O" in word) else 1
            continue
        break
    rest = args[i:]
    if command:
        return ("code", rest[:1]) if rest else ("none", ())
    if stdin or not rest:
        return "stdin", ()
    return "file", rest[:1]


def _interpreter_source(language: CodeLanguage, args: tuple[str, ...]) -> _Source:
    """``python3 -c CODE``, ``perl -e CODE``, ``node -e CODE``; stdin when there is no
    script (``python3``, ``python3 -``); a file or a module otherwise."""
    codes: list[str] = []
    i = 0
    while i < len(args):
        word = args[i]
        if word == "-":
            return "stdin", ()
        if word == "--" or not word.startswith("-"):
            break
        takes_code = (word == "-c" if language == "python"
                      else word in ("-e", "--eval", "-p", "--print") if language == "node"
                      else re.fullmatch(r"-[a-zA-Z]*[eE]", word) is not None)
        if takes_code and i + 1 < len(args):
            codes.append(args[i + 1])
            i += 2
            if language == "python":
                break  # what follows is the code's own arguments
            continue
        if language == "python" and word.startswith("-c") and len(word) > 2:
            return "code", (word[2:],)
        if language == "python" and word.startswith("-m"):
            return "none", ()
        value_options = {"python": ("-W", "-X"), "node": ("-r", "--require", "--import"),
                         "perl": ("-I", "-M", "-m"), "ruby": ("-I", "-r", "-C")}[language]
        i += 2 if word in value_options else 1
    if codes:
        return "code", tuple(codes)
    return ("file", args[i:i + 1]) if args[i:] else ("stdin", ())


#: tools whose output is shell code their documentation says to ``eval`` (``eval
#: "$(pyenv init -)"``), by the subcommand that prints it (None: options only)
_START_UP_CODE: dict[str, frozenset[str] | None] = {
    "ssh-agent": None, "dircolors": None,
    "pyenv": frozenset({"init", "virtualenv-init"}), "rbenv": frozenset({"init"}),
    "nodenv": frozenset({"init"}), "goenv": frozenset({"init"}),
    "direnv": frozenset({"hook"}), "starship": frozenset({"init"}),
    "zoxide": frozenset({"init"}), "brew": frozenset({"shellenv"}),
    "mise": frozenset({"activate"}), "fnm": frozenset({"env"}),
}


def _evaluates_start_up_code(command: Node) -> bool:
    """``eval "$(ssh-agent -s)"``: the one argument of ``eval`` is the output of one of
    those tools, as one plain command (anything more is read as computed code)."""
    args = command.children_by_field_name("argument")
    if len(args) != 1:
        return False
    word = args[0]
    if word.type == "string" and word.named_child_count == 1:
        word = word.named_children[0]
    if word.type != "command_substitution" or word.named_child_count != 1 or \
            word.named_children[0].type != "command":
        return False
    inner = word.named_children[0]
    name = inner.child_by_field_name("name")
    arguments = inner.children_by_field_name("argument")
    if name is None or len(inner.named_children) != 1 + len(arguments):  # a redirection
        return False
    words = [w for node in (name, *arguments) for w in _words(node)]
    if any(UNKNOWN in w for w in words):
        return False
    program, rest = os.path.basename(words[0]), words[1:]
    if program not in _START_UP_CODE:
        return False
    subcommands = _START_UP_CODE[program]
    if subcommands is None:
        return all(w.startswith("-") for w in rest)
    return bool(rest) and rest[0] in subcommands


def _command_option(args: tuple[str, ...]) -> str | None:
    """The code of ``su``'s and ``flock``'s ``-c``/``--command``."""
    for i, word in enumerate(args):
        if word in ("-c", "--command") and i + 1 < len(args):
            return args[i + 1]
        if word.startswith("--command="):
            return word.partition("=")[2]
    return None


#: how ``watch`` reads its options (``-n 1``) before the words it runs
_WATCH = _Wrapper("nq", frozenset({"--interval", "--equexit"}))


def _asks_for_a_shell(args: tuple[str, ...]) -> bool:
    """``sudo -s``, ``sudo -i``, ``doas -s`` (with no command: a shell)."""
    return any(word in ("--shell", "--login") or (
        word.startswith("-") and not word.startswith("--") and ("s" in word or "i" in word))
        for word in args)


def _ssh_command(args: tuple[str, ...]) -> str:
    """The command ``ssh`` runs on the other host: the words after the host, joined."""
    i = 0
    while i < len(args) and args[i].startswith("-") and args[i] != "--":
        letters = args[i][1:]
        value_at = next((j for j, ch in enumerate(letters) if ch in _SSH_VALUES), None)
        i += 2 if value_at is not None and value_at == len(letters) - 1 else 1
    if i < len(args) and args[i] == "--":
        i += 1
    return " ".join(args[i + 1:])


def _is_user_option(word: str) -> bool:
    return word in ("-u", "--user") or word.startswith("--user=")


def innermost(argv: Sequence[str]) -> tuple[str, ...]:
    """The command behind its wrappers: ``sudo env rm -f x`` is ``rm -f x``."""
    command = tuple(argv)
    while command and (wrapper := _WRAPPERS.get(os.path.basename(command[0]))) is not None:
        command = _unwrapped(command[1:], wrapper)
    return command


def find_commands(args: Sequence[str]) -> list[tuple[str, ...]]:
    """The commands of ``find``'s ``-exec``, ``-execdir``, ``-ok`` and ``-okdir``."""
    commands: list[tuple[str, ...]] = []
    i = 0
    while i < len(args):
        if args[i] in ("-exec", "-execdir", "-ok", "-okdir"):
            end = i + 1
            while end < len(args) and args[end] != ";" and not (
                    args[end] == "+" and args[end - 1] == "{}"):
                end += 1
            commands.append(tuple(args[i + 1:end]))
            i = end
        i += 1
    return commands


def _unwrapped(args: tuple[str, ...], wrapper: _Wrapper) -> tuple[str, ...]:
    """The command a wrapper runs: its arguments after its own options."""
    i = 0
    while i < len(args):
        word = args[i]
        if word == "--":
            i += 1
            break
        if wrapper.assignments and re.match(r"[A-Za-z_]\w*=", word):
            i += 1
            continue
        if word.startswith("--"):
            i += 2 if word in wrapper.long_values else 1
            continue
        if word.startswith("-") and len(word) > 1:
            letters = word[1:]
            value_at = next((j for j, ch in enumerate(letters) if ch in wrapper.values), None)
            i += 2 if value_at is not None and value_at == len(letters) - 1 else 1
            continue
        break
    return args[i + wrapper.positional:]


def _env_split(args: tuple[str, ...]) -> str | None:
    """``env -S 'rm -rf /'``: the string env splits into a command (with what follows)."""
    for i, word in enumerate(args):
        if word in ("-S", "--split-string") and i + 1 < len(args):
            return " ".join(args[i + 1:])
        if word.startswith("--split-string="):
            return " ".join((word.partition("=")[2], *args[i + 1:]))
        if word.startswith("-S") and len(word) > 2:
            return " ".join((word[2:], *args[i + 1:]))
    return None


# what a command's input is -----------------------------------------------------------

def _stages(pipeline: Node) -> list[Node]:
    stages: list[Node] = []
    for child in pipeline.named_children:
        stages += _stages(child) if child.type == "pipeline" else [child]
    return stages


def _output(stage: Node, outer: list[Node] | None = None) -> _Input:
    """What a pipeline stage writes, where the line spells it out: ``echo``/``printf``
    of literal words, ``cat`` of a here-document; ``find``'s roots for ``xargs``."""
    command = stage.child_by_field_name("body") if stage.type == "redirected_statement" \
        else stage
    if command is None or command.type != "command":
        return _UNSEEN
    redirects = [*(outer or ()), *stage.children_by_field_name("redirect"),
                 *(c for c in command.named_children if c.type.endswith("_redirect"))]
    name = command.child_by_field_name("name")
    words = [] if name is None else [w for node in [
        name, *command.children_by_field_name("argument")] for w in _words(node)]
    program = os.path.basename(words[0]) if words else ""
    args = words[1:]
    if program == "find":
        return _Input(None, tuple(find_roots(args)), under=True)
    if any(UNKNOWN in w for w in args):
        return _UNSEEN
    if program == "echo":
        escapes = "-e" in args[:1]
        shown = [w for w in args if w not in ("-n", "-e", "-E")]
        text = " ".join(shown)
        return _Input(_unescape_c(text) if escapes else text, tuple(shown))
    if program == "printf" and args:
        printed = _printf(args)
        return _Input(printed, tuple(args[1:])) if printed is not None else _UNSEEN
    if program == "cat" and not args:
        given = _redirected_input(redirects)
        return given if given is not None and not given.from_file else _UNSEEN
    return _UNSEEN


def find_roots(args: Sequence[str]) -> list[str]:
    """The paths ``find`` starts from: its words before the first test or action."""
    roots: list[str] = []
    for word in args:
        if word.startswith(("-", "(", "!")):
            if roots or word not in ("-H", "-L", "-P"):
                break
            continue
        roots.append(word)
    return roots


def _printf(args: list[str]) -> str | None:
    template, values = _unescape_c(args[0]), list(args[1:])
    if "%" not in template:
        return template
    if not re.fullmatch(r"(?:[^%]|%[sb]|%%)*", template) or \
            template.count("%s") + template.count("%b") != len(values):
        return None
    return re.sub(r"%[sb]|%%", lambda m: "%" if m[0] == "%%" else values.pop(0), template)


def _redirected_input(redirects: list[Node]) -> _Input | None:
    for redirect in redirects:
        if redirect.type == "herestring_redirect":
            word = _word(redirect.named_children[-1]) if redirect.named_children else ""
            return _UNSEEN if UNKNOWN in word else _Input(word + "\n", tuple(word.split()))
        if redirect.type == "heredoc_redirect":
            body = next((c for c in redirect.named_children if c.type == "heredoc_body"), None)
            if body is None:
                return _Input("")
            if any(c.type != "heredoc_content" for c in body.named_children):
                return _UNSEEN  # `$(…)` or `$VAR` in an unquoted here-document
            return _Input(_text(body))
        if redirect.type == "file_redirect" and _operator(redirect) == "<":
            return _Input(None, from_file=True)
    return None


# words ------------------------------------------------------------------------------

def _redirects(nodes: list[Node]) -> list[Redirect]:
    found = []
    for node in nodes:
        if node.type != "file_redirect":
            continue
        destination = node.children_by_field_name("destination")
        op = _operator(node)
        if destination and not (op in (">&", "<&") and destination[0].type == "number"):
            found.append(Redirect(op, _word(destination[0])))
    return found


def _operator(redirect: Node) -> str:
    return next((_text(c) for c in redirect.children if not c.is_named), "")


_VARIABLES = {"HOME": "~", "PWD": "."}
#: the operators of ``${NAME:?}``, ``${NAME:-default}``…: a set variable is its value
_VALUE_OPERATORS = frozenset({":?", "?", ":-", "-", ":=", "="})
#: how a process substitution (``<(curl …)``) arrives: the path of a pipe bash opens
_PIPED_FILE = "/dev/fd/"


def _word(node: Node) -> str:
    """A word as the program receives it: quotes removed, escapes undone, ``$HOME``
    as ``~``; what the shell computes (a substitution, any other variable) is
    UNKNOWN."""
    kind, text = node.type, _text(node)
    if kind == "word":
        return _shown(re.sub(r"\\(.)", r"\1", text.replace("\\\n", ""), flags=re.DOTALL))
    if kind == "raw_string":
        return _shown(text[1:-1])
    if kind == "ansi_c_string":
        return _unescape_c(text[2:-1])
    if kind == "string_content":
        return _shown(re.sub(r"\\([\\\"$`])", r"\1", text.replace("\\\n", "")))
    if kind in ("string", "translated_string", "concatenation", "command_name"):
        return "".join(_word(c) for c in node.named_children)
    if kind in ("simple_expansion", "expansion"):
        names = [c for c in node.named_children]
        plain = len(names) == 1 and names[0].type == "variable_name" and \
            node.child_count == (2 if kind == "simple_expansion" else 3)
        if plain:
            return _VARIABLES.get(_text(names[0]), UNKNOWN)
        # `"${HOME:?}"`, `${HOME:-/tmp}`: HOME and PWD are always set
        if kind == "expansion" and node.child_count >= 4 and \
                node.children[1].type == "variable_name" and \
                node.children[2].type in _VALUE_OPERATORS:
            return _VARIABLES.get(_text(node.children[1]), UNKNOWN)
        return UNKNOWN
    if kind == "process_substitution":
        return _PIPED_FILE + UNKNOWN
    if kind == "brace_expression" or (node.named_child_count == 0 and kind in (
            "number", "heredoc_content", "regex", "extglob_pattern")):
        return text
    return UNKNOWN  # substitutions, arithmetic, anything this reader does not know


def _words(node: Node) -> list[str]:
    """The words one word of the line becomes: its brace expansion (``~/{a,}`` is
    ``~/a ~/``, ``r{m,}`` is ``rm r``), each read as :func:`_word` reads it."""
    if node.type == "command_name" and node.named_child_count == 1:
        node = node.named_children[0]
    if node.type not in ("word", "concatenation") or "{" not in _text(node):
        return [_word(node)]
    pieces = node.named_children if node.type == "concatenation" else [node]
    # unquoted text keeps its escapes for the expansion; a quoted or computed piece is
    # escaped so that its braces and commas stay what they are
    pattern = "".join(_text(p) if p.type == "word" else re.sub(r"([\\{},])", r"\\\1", _word(p))
                      for p in pieces)
    return [_shown(re.sub(r"\\(.)", r"\1", word.replace("\\\n", ""), flags=re.DOTALL))
            for word in _brace_expansion(pattern)]


#: one word whose braces make more words than this (``{a,b}{c,d}…``) is not read
MAX_BRACE_WORDS = 64


def _brace_expansion(text: str) -> list[str]:
    """Bash's brace expansion of an unquoted word, escapes kept: ``a{b,c}d`` is
    ``abd acd``; a group without a comma (``{}``, ``@{u}``) stays as it is."""
    done: list[str] = []
    todo = [text]
    while todo:
        word = todo.pop(0)
        group = _first_brace_group(word)
        if group is None:
            done.append(word)
            continue
        start, commas, end = group
        bounds = [start, *commas, end]
        todo[:0] = [word[:start] + word[a + 1:b] + word[end + 1:]
                    for a, b in zip(bounds, bounds[1:], strict=False)]
        if len(done) + len(todo) > MAX_BRACE_WORDS:
            raise Unreadable(f"a word whose braces make more than {MAX_BRACE_WORDS} words")
    return done


def _first_brace_group(word: str) -> tuple[int, list[int], int] | None:
    """The leftmost ``{…,…}`` of a word: where it opens, its commas, where it closes."""
    open_groups: list[tuple[int, list[int]]] = []
    first: tuple[int, list[int], int] | None = None
    i = 0
    while i < len(word):
        ch = word[i]
        if ch == "\\":
            i += 2
            continue
        if ch == "{":
            open_groups.append((i, []))
        elif ch == "," and open_groups:
            open_groups[-1][1].append(i)
        elif ch == "}" and open_groups:
            start, commas = open_groups.pop()
            if commas and (first is None or start < first[0]):
                first = (start, commas, i)
        i += 1
    return first


def _shown(text: str) -> str:
    """A computed part of an inner script, spelt out to be parsed, is UNKNOWN again."""
    return text.replace(_SHOWN_UNKNOWN, UNKNOWN)


def _text(node: Node) -> str:
    return (node.text or b"").decode("utf-8", "surrogateescape")


def _unescape_c(text: str) -> str:
    """``$'…'``, ``echo -e`` and ``printf`` escapes (``\\n``, ``\\x41``, ``\\047``)."""
    try:
        return codecs.decode(text.encode("latin-1", "backslashreplace"), "unicode_escape")
    except UnicodeDecodeError:
        return text


def _first_error(root: Node) -> str:
    stack = [root]
    while stack:
        node = stack.pop()
        if node.is_error or node.is_missing:
            start = node.start_point
            near = _text(node)[:40] or node.type
            return f"line {start.row + 1}, column {start.column + 1}, near {near!r}"
        stack.extend(reversed(node.children))
    return "a syntax error"

