"""Which of the model's actions wait for a human: the built-in dangerous commands,
``approvals.patterns`` and ``approvals.allow``.

The rules match shell text, so they are a net, not a proof: a determined model
can spell a delete so no pattern sees it. They exist to stop the common
accident — the model "cleaning up" with ``rm -rf ~`` — and to put a human in
front of the commands that cannot be taken back. ``approvals.mode: all`` is
the setting for those who want every command seen.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

ApprovalMode = Literal["off", "dangerous", "all"]

# a path nobody deletes recursively on purpose: /, ~, $HOME, ., .., *, or a top-level
# system directory (with or without a trailing slash or glob)
_BROAD = (r"(?:/|/\*|~|~/|~/\*|\$HOME|\$\{HOME\}|\$HOME/\*?|\.|\./|\.\.|\.\./|\*|"
          r"/(?:bin|boot|dev|etc|home|lib|lib64|opt|proc|root|sbin|srv|sys|usr|var)/?\*?)")
_ROOTS = (r"(?:/|~|~/|\$HOME|\$\{HOME\}|"
          r"/(?:bin|boot|dev|etc|home|lib|lib64|opt|root|sbin|srv|usr|var)/?)")
_END = r"(?=$|[\s;&|)'\"])"
#: where a command starts: the line's start, after ; & | ( or $(, maybe after sudo
_START = r"(?:^|[;&|({'\"]\s*|\$\(\s*)(?:sudo\s+(?:-\S+\s+)*)?"
_RECURSIVE = r"(?:-[a-zA-Z]*[rR][a-zA-Z]*|--recursive)"
_DEVICE = r"/dev/(?:sd[a-z]|hd[a-z]|vd[a-z]|xvd[a-z]|nvme\d|mmcblk\d|md\d|dm-\d|disk/)"


@dataclass(frozen=True, slots=True)
class Rule:
    key: str
    #: why it is asked, as the request says it ("a recursive delete of a broad path")
    why: str
    pattern: re.Pattern[str]


def _rule(key: str, why: str, pattern: str, flags: int = 0) -> Rule:
    return Rule(key, why, re.compile(pattern, flags))


#: the documented list (README, "Security"): each matches anywhere in the command
BUILT_IN: tuple[Rule, ...] = (
    _rule("recursive-delete", "a recursive delete of a broad path",
          rf"\brm\s+(?:-\S+\s+)*{_RECURSIVE}\s+(?:-\S+\s+)*(?:\S+\s+)*{_BROAD}{_END}"
          rf"|\brm\b.*--no-preserve-root|\bfind\s+{_ROOTS}\s.*-delete\b"),
    _rule("make-filesystem", "making a filesystem (erases the device)",
          r"\b(?:mkfs(?:\.\w+)?|mke2fs|mkswap|wipefs)\b"),
    _rule("disk-write", "writing straight to a disk device",
          rf"\bdd\b[^;&|]*\bof={_DEVICE}|>\s*{_DEVICE}|\b(?:tee|shred)\b[^;&|]*{_DEVICE}"),
    _rule("power", "shutting down or rebooting the machine",
          rf"{_START}(?:shutdown|reboot|poweroff|halt){_END}"
          r"|\bsystemctl\s+(?:poweroff|reboot|halt|kexec|suspend|hibernate)\b"
          rf"|{_START}(?:tel)?init\s+[06]\b", re.MULTILINE),
    _rule("open-permissions", "opening permissions recursively on a broad path",
          rf"\bch(?:mod|own|grp)\s+(?:-\S+\s+)*{_RECURSIVE}\s+(?:-\S+\s+)*\S+\s+{_BROAD}{_END}"),
    _rule("pipe-to-shell", "piping a download into a shell",
          r"\b(?:curl|wget|fetch)\b[^;&|]*\|\s*(?:sudo\s+)?(?:ba|z|da|k|c)?sh\b"
          r"|\b(?:ba|z)?sh\s+(?:-c\s+)?[\"']?(?:<\(|\$\()\s*(?:curl|wget)\b"),
    _rule("force-push", "a force-push (rewrites shared history)",
          r"\bgit\s+push\b[^;&|]*(?:\s--force\b|\s--force-with-lease\b|\s-[a-zA-Z]*f\b|\s\+\S)"),
    _rule("drop", "dropping a database or a table",
          r"\bdrop\s+(?:table|database|schema)\b", re.IGNORECASE),
    _rule("kill-init", "killing pid 1 or every process",
          r"\bkill\s+(?:-\S+\s+)*-?1(?=$|[\s;&|])"),
    _rule("fork-bomb", "a fork bomb",
          r"(\w+|:)\s*\(\)\s*\{\s*\1\s*\|\s*\1\s*&\s*\}"),
)


@dataclass(frozen=True, slots=True)
class Need:
    """Why an action waits for a human, and what "approve for this session" covers."""

    reason: str
    #: the grant an "approve for this session" gives: the rule, or (mode all) the program
    grant: str


class ApprovalPolicy:
    def __init__(self, mode: ApprovalMode, patterns: list[str], allow: list[str]) -> None:
        self.mode = mode
        self.extra = [Rule(f"pattern:{p}", f"it matches approvals.patterns {p!r}",
                           re.compile(p)) for p in patterns]
        self.allow = [re.compile(p) for p in allow]

    def check(self, tool: str, text: str) -> Need | None:
        """What an action (a command, a delegated task) needs: None when it may run."""
        if self.mode == "off" or any(p.search(text) for p in self.allow):
            return None
        for rule in (*BUILT_IN, *self.extra):
            if rule.pattern.search(text):
                return Need(rule.why, rule.key)
        if self.mode == "all":
            program = text.split(maxsplit=1)[0] if text.strip() else ""
            what = f"{tool} {program}".strip() if tool != "delegate_task" else tool
            return Need("approvals.mode is all: every action is asked", f"all:{what}")
        return None
