"""Which of the model's actions wait for a human: the built-in dangerous commands,
``approvals.patterns`` and ``approvals.allow``.

The built-in rules judge the commands a shell line would run as a shell reads
them (gateway/approvals/shell_commands.py): quoting removed, paths resolved
(gateway/approvals/shell_paths.py), through ``sudo``, ``sh -c``, ``eval``, pipes into a shell
or interpreter, and one-liners. What cannot be read is asked — a line the parser
cannot parse, a program whose name is computed, code fed to a shell that the
line does not show. It is still a net for the common accident (the model
"cleaning up" with ``rm -rf ~``), not a sandbox: a script file it writes and
then runs is not read. ``approvals.mode: all`` is the setting for those who want
every command seen. ``patterns`` and ``allow`` match the action's text as written.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from gateway.approvals.shell_commands import (
    Command,
    Unreadable,
    find_commands,
    find_roots,
    innermost,
    read_commands,
)
from gateway.approvals.shell_paths import is_broad, is_device, is_disk, is_system_file

ApprovalMode = Literal["off", "dangerous", "all"]

#: actions whose text is a task in words, not a shell line: a delegated task is not
#: parsed (the sub-agent's own commands pass the rules one by one)
PROSE_TOOLS = frozenset({"delegate_task"})
#: the rule of a line the shell parser cannot read (fail closed)
UNPARSABLE = "unparsable"
#: characters of an action the rules read; a longer one is asked unread (the check runs
#: on the event loop, and nobody reviews a 64 KB command by its rules anyway)
MAX_READ_CHARS = 64 * 1024
#: the rule of an action longer than that
TOO_LONG = "too-long"


@dataclass(frozen=True, slots=True)
class Rule:
    """A regular expression over the action's text (``approvals.patterns``, SQL)."""

    key: str
    #: why it is asked, as the request says it ("a recursive delete of a broad path")
    why: str
    pattern: re.Pattern[str]


@dataclass(frozen=True, slots=True)
class CommandRule:
    """A test of one command the line runs, as the shell would run it."""

    key: str
    why: str
    matches: Callable[[Command], bool]


# what the rules read in a command's words ------------------------------------------

def _options(args: tuple[str, ...]) -> list[str]:
    """Its options (``-rf``, ``--force``): words before ``--`` that start with a dash."""
    found = []
    for word in args:
        if word == "--":
            break
        if word.startswith("-") and len(word) > 1:
            found.append(word)
    return found


def _operands(args: tuple[str, ...], takes_value: tuple[str, ...] = (),
              modes: re.Pattern[str] | None = None) -> list[str]:
    """Its operands: the other words (all words after ``--``); ``takes_value`` names the
    options whose value is the next word, ``modes`` the dashed words that are operands."""
    found, i, ended = [], 0, False
    while i < len(args):
        word = args[i]
        if not ended and word == "--":
            ended = True
        elif not ended and word.startswith("-") and len(word) > 1 and not (
                modes is not None and modes.fullmatch(word)):
            i += 1 if word in takes_value else 0
        else:
            found.append(word)
        i += 1
    return found


#: a mode of chmod's that starts with a dash (``-w``, ``-rwx``, ``-x,g+w``)
_DASH_MODE = re.compile(r"-[rwxXst]+(?:,\S*)?")


def _has_flag(args: tuple[str, ...], short: str, *long: str) -> bool:
    """Whether a short flag (alone or in a cluster: ``-rf``) or a long one is given."""
    return any(any(_is_long(word, option) for option in long)
               or (not word.startswith("--") and any(c in word[1:] for c in short))
               for word in _options(args))


def _is_long(word: str, option: str) -> bool:
    """``word`` is the long ``option`` or a prefix of it: GNU programs take any unique
    prefix (``rm --recur``); one that is not unique is refused, so taking it is safe."""
    return word == option or (len(word) > 2 and option.startswith(word))


def _recursive_delete(c: Command) -> bool:
    if c.program == "rm":
        return any(_is_long(w, "--no-preserve-root") for w in _options(c.args)) or (
            _has_flag(c.args, "rR", "--recursive")
            and any(is_broad(path) for path in _operands(c.args)))
    if c.program == "find":  # `find / -delete`, `find ~ -exec rm {} +`
        roots = [w for w in find_roots(c.args) if is_broad(w, here_counts=False)]
        return bool(roots) and _find_deletes(c.args)
    return False


def _find_deletes(args: tuple[str, ...]) -> bool:
    """``-delete``, or an ``-exec`` of a deleting program (``-exec sudo rm {} +`` too)."""
    deleters = {"rm", "unlink", "shred", "rmdir"}
    return "-delete" in args or any(
        (program := innermost(command)) and os.path.basename(program[0]) in deleters
        for command in find_commands(args))


def _makes_filesystem(c: Command) -> bool:
    """On a device (or a path the shell computes), not on a file image."""
    return re.fullmatch(r"mkfs(?:\.\w+)?|mke2fs|mkswap|wipefs|mkntfs|mkdosfs", c.program) \
        is not None and any(is_device(w) for w in c.args if not w.startswith("-"))


def _writes_disk(c: Command) -> bool:
    if any(r.writes and is_disk(r.target) for r in c.redirects):
        return True
    if c.program == "dd":
        return any(w.startswith("of=") and is_disk(w[3:]) for w in c.args)
    if c.program in ("tee", "shred", "truncate", "blkdiscard"):
        return any(is_disk(w) for w in _operands(c.args, ("-s", "--size", "-r")))
    if c.program in ("cp", "mv", "install"):
        operands = _operands(c.args)
        return bool(operands) and is_disk(operands[-1])
    return False


def _powers_off(c: Command) -> bool:
    if c.program in ("shutdown", "reboot", "poweroff", "halt"):
        return True
    operands = _operands(c.args)
    if c.program == "systemctl":
        return operands[:1] in (["poweroff"], ["reboot"], ["halt"], ["kexec"], ["suspend"],
                                ["hibernate"], ["hybrid-sleep"])
    return c.program in ("init", "telinit") and operands[:1] in (["0"], ["6"])


def _opens_permissions(c: Command) -> bool:
    if c.program not in ("chmod", "chown", "chgrp") or not _has_flag(c.args, "R",
                                                                      "--recursive"):
        return False
    # `chmod -R -w /`: GNU chmod reads a dashed mode as the mode, not as an option
    operands = _operands(c.args, modes=_DASH_MODE if c.program == "chmod" else None)
    targets = operands if any(w.startswith("--reference") for w in c.args) else operands[1:]
    return any(is_broad(path) for path in targets)


def _force_pushes(c: Command) -> bool:
    if c.program != "git":
        return False
    args = list(c.args)
    while args and args[0].startswith("-"):  # git -C dir -c k=v push
        args = args[2:] if args[0] in ("-C", "-c", "--git-dir", "--work-tree") else args[1:]
    if args[:1] != ["push"]:
        return False
    rest = tuple(args[1:])
    return _has_flag(rest, "f", "--force") or any(
        w.startswith("--force-with-lease") for w in rest) or any(
        w.startswith("+") for w in _operands(rest))


def _kills_everything(c: Command) -> bool:
    if c.program == "killall5":
        return True
    if c.program == "kill":
        return any(pid in ("1", "-1") for pid in _kill_pids(c.args))
    if c.program in ("pkill", "killall"):
        names = _operands(c.args, _KILL_BY_NAME_VALUES[c.program])
        if not names:  # `pkill -u root`: no name given, every process of the user
            return any(w in _USER_SELECTORS or w.startswith(
                tuple(f"{s}=" for s in _USER_SELECTORS)) for w in _options(c.args))
        return any(name in ("init", "systemd") or _EVERY_NAME.fullmatch(name)
                   for name in names)
    return False


#: the options of ``pkill`` and ``killall`` that take the next word as their value
_KILL_BY_NAME_VALUES = {
    "pkill": ("-u", "-U", "-G", "-g", "-P", "-s", "-t", "-F", "--signal", "--uid", "--euid",
              "--group", "--pgroup", "--parent", "--session", "--terminal", "--pidfile",
              "--ns", "--nslist"),
    "killall": ("-u", "-s", "-o", "-y", "-n", "-Z", "--user", "--signal", "--older-than",
                "--younger-than", "--ns", "--context"),
}
#: the options that pick processes by their user or group
_USER_SELECTORS = ("-u", "-U", "-G", "--uid", "--euid", "--group", "--user")
#: a process-name pattern that every name matches (``.``, ``.*``, ``^``)
_EVERY_NAME = re.compile(r"\^?(?:\.[*+]?)?\$?")


def _kill_pids(args: tuple[str, ...]) -> list[str]:
    """The pids of ``kill``: the first dashed word is the signal (``kill -9 -1``)."""
    pids: list[str] = []
    signal = ended = False
    i = 0
    while i < len(args):
        word = args[i]
        if not ended and word == "--":
            ended = True
        elif not ended and not pids and word in ("-s", "-n"):
            signal = True
            i += 1
        elif not ended and not pids and word in ("-l", "-L"):
            return []
        elif not ended and not pids and not signal and word.startswith("-"):
            signal = True
        else:
            pids.append(word)
        i += 1
    return pids


def _overwrites_system_file(c: Command) -> bool:
    if any(r.writes and is_system_file(r.target, appending=r.appending)
           for r in c.redirects):
        return True
    if c.program in ("rm", "unlink", "shred"):
        return any(is_system_file(path) for path in _operands(c.args))
    if c.program == "tee":
        appending = _has_flag(c.args, "a", "--append")
        return any(is_system_file(p, appending=appending) for p in _operands(c.args))
    if c.program == "truncate":
        return any(is_system_file(p) for p in _operands(c.args, ("-s", "--size", "-r")))
    if c.program == "dd":
        return any(w.startswith("of=") and is_system_file(w[3:]) for w in c.args)
    if c.program in ("cp", "mv", "install", "ln"):
        operands = _operands(c.args, ("-t", "--target-directory", "-m", "--mode", "-S"))
        target = next((c.args[i + 1] for i, w in enumerate(c.args[:-1])
                       if w in ("-t", "--target-directory")), None)
        destination = target or (operands[-1] if len(operands) >= 2 else None)
        # what `mv` takes away is gone from where it was (`mv ~/.ssh/id_ed25519 /tmp/`);
        # what `cp` copies from is only read
        sources = (operands if target else operands[:-1]) if c.program == "mv" else []
        return any(is_system_file(path) for path in [*sources, *filter(None, [destination])])
    return False


def _moves_broad_path(c: Command) -> bool:
    if c.program != "mv":
        return False
    operands = _operands(c.args, ("-t", "--target-directory", "-S", "--suffix"))
    given_target = any(w in ("-t", "--target-directory") or w.startswith(
        "--target-directory=") for w in c.args)
    sources = operands if given_target else operands[:-1]
    return any(is_broad(path, here_counts=False) for path in sources)


def _removes_crontab(c: Command) -> bool:
    """``crontab -r``, or ``crontab FILE`` (``-`` too), which replaces every job with the
    file's (``crontab /dev/null`` removes them all)."""
    if c.program != "crontab":
        return False
    return _has_flag(c.args, "r", "--remove") or (
        not _has_flag(c.args, "leT") and bool(_operands(c.args, ("-u",))))


#: the documented list (README, "Approvals"): each judges every command the line runs
COMMAND_RULES: tuple[CommandRule, ...] = (
    CommandRule("recursive-delete", "a recursive delete of a broad path", _recursive_delete),
    CommandRule("make-filesystem", "making a filesystem (erases the device)",
                _makes_filesystem),
    CommandRule("disk-write", "writing straight to a disk device", _writes_disk),
    CommandRule("power", "shutting down or rebooting the machine", _powers_off),
    CommandRule("open-permissions", "opening permissions recursively on a broad path",
                _opens_permissions),
    CommandRule("pipe-to-shell", "running code it downloads or computes (not shown here) "
                                 "in a shell or an interpreter", lambda c: c.runs_unseen),
    CommandRule("computed-program", "the program it runs is computed (a substitution or a "
                                    "variable), so it cannot be checked",
                lambda c: c.computed_name),
    CommandRule("force-push", "a force-push (rewrites shared history)", _force_pushes),
    CommandRule("kill-init", "killing pid 1, every process, or every process of a user",
                _kills_everything),
    CommandRule("move-broad-path", "moving a broad path away (/, a home, a system "
                                   "directory)", _moves_broad_path),
    CommandRule("system-file", "deleting or overwriting a system file, a key or a shell "
                               "start-up file", _overwrites_system_file),
    CommandRule("crontab-remove", "removing or replacing every cron job of a user",
                _removes_crontab),
)

#: rules over the text as written, for what is no shell syntax (SQL) or is best seen whole
TEXT_RULES: tuple[Rule, ...] = (
    Rule("drop", "dropping a database or a table",
         re.compile(r"\bdrop\s+(?:table|database|schema)\b", re.IGNORECASE)),
    # the name starts where a word does and is taken whole (possessive): tried from
    # every letter of a long word, `\w+` backtracking made a 20 KB word take seconds
    Rule("fork-bomb", "a fork bomb",
         re.compile(r"(?<!\w)(\w++|:)\s*\(\)\s*\{\s*\1\s*\|\s*\1\s*&\s*\}")),
)


@dataclass(frozen=True, slots=True)
class Need:
    """Why an action waits for a human, and what "approve for this session" covers."""

    reason: str
    #: the grant an "approve for this session" gives: the rule, or (mode all) the program
    grant: str


class ApprovalPolicy:
    """The ``approvals`` settings as one decision: :meth:`check` says whether an action
    waits for a human and why. It only reads the action's text, never runs it."""

    def __init__(self, mode: ApprovalMode, patterns: list[str], allow: list[str]) -> None:
        self.mode = mode
        self.extra = [Rule(f"pattern:{p}", f"it matches approvals.patterns {p!r}",
                           re.compile(p)) for p in patterns]
        self.allow = [re.compile(p) for p in allow]

    def check(self, tool: str, text: str) -> Need | None:
        """What an action (a command, a delegated task) needs: None when it may run."""
        if self.mode == "off" or self.allowed_by(text) is not None:
            return None
        need = self._built_in(tool, text)
        if need is not None:
            return need
        for rule in self.extra:
            if rule.pattern.search(text):
                return Need(rule.why, rule.key)
        if self.mode == "all":
            program = text.split(maxsplit=1)[0] if text.strip() else ""
            what = f"{tool} {program}".strip() if tool != "delegate_task" else tool
            return Need("approvals.mode is all: every action is asked", f"all:{what}")
        return None

    def allowed_by(self, text: str) -> str | None:
        """The ``approvals.allow`` pattern that exempts this text, if one does."""
        return next((p.pattern for p in self.allow if p.search(text)), None)

    @staticmethod
    def _built_in(tool: str, text: str) -> Need | None:
        if len(text) > MAX_READ_CHARS:
            return Need(f"it is {len(text)} characters long, more than the {MAX_READ_CHARS} "
                        f"the rules read, and what is not read is asked", TOO_LONG)
        if tool not in PROSE_TOOLS:
            try:
                commands = read_commands(text)
            except Unreadable as exc:
                return Need(f"the shell parser cannot read it ({exc}), and what cannot be "
                            f"read is asked", UNPARSABLE)
            for rule in COMMAND_RULES:
                if any(rule.matches(command) for command in commands):
                    return Need(rule.why, rule.key)
        for text_rule in TEXT_RULES:
            if text_rule.pattern.search(text):
                return Need(text_rule.why, text_rule.key)
        return None
