"""What a path in a command points at, for the approval rules: the path with ``.``
and ``..`` resolved the way the shell hands it over (``/tmp/..`` is ``/``), and
whether it is broad (``/``, home, a top-level or system directory, the working
directory, a glob at one of those), a system or start-up file, or a disk.

Paths are read as text (``..`` is not resolved through symlinks), as the words
of a command are when nothing has run yet. A part the shell computes (a
variable, a substitution) arrives as ``UNKNOWN``: it may be empty, or any name.
"""

from __future__ import annotations

import re

#: a part of a word the shell computes at run time (a variable, a substitution): NUL
#: cannot occur in a real argument, so it cannot be confused with one
UNKNOWN = "\x00"

#: top-level directories whose children are the system's too (``/usr/lib``, ``/home/ann``)
_SYSTEM = frozenset({"bin", "boot", "dev", "etc", "home", "lib", "lib32", "lib64", "libx32",
                     "media", "mnt", "opt", "proc", "sbin", "snap", "srv", "sys", "Users",
                     "usr", "var"})
#: where a file is the system's own: deleting or overwriting one is asked
_SYSTEM_FILES = frozenset({"bin", "boot", "etc", "lib", "lib32", "lib64", "libx32", "proc",
                           "sbin", "sys", "usr"})
#: in a home: secrets whose every file matters
_SECRETS = frozenset({".ssh", ".gnupg"})
#: in a home: the files a shell or a login runs at start-up (README, "Approvals"). Other
#: dot files (``~/.npmrc``, ``~/.bashrc.bak``) are a tool's settings, not asked
START_UP_FILES = frozenset({
    ".bashrc", ".bash_profile", ".bash_login", ".bash_logout", ".profile", ".zshrc",
    ".zshenv", ".zprofile", ".zlogin", ".zlogout", ".kshrc", ".mkshrc", ".cshrc", ".tcshrc",
    ".login", ".logout", ".xprofile", ".xinitrc", ".xsession", ".config/fish/config.fish"})
_DISK = re.compile(r"/dev/(?:sd[a-z]|hd[a-z]|vd[a-z]|xvd[a-z]|nvme\d|mmcblk\d|md\d|dm-\d|"
                   r"loop\d|disk/|mapper/)")
_GLOB = re.compile(r"[*?\[]")
#: a glob of nothing but wildcards and dots: it matches every name (``*``, ``.*``, ``.[!.]*``)
_EVERYTHING = re.compile(r"(?:[.*?]|\[[^\]]*\])*")


def parts(path: str) -> tuple[str, ...] | None:
    """The path's components, ``.`` and ``..`` resolved; absolute paths start with ``/``,
    a home (``~``, ``~ann``) is spelt as the directory it is. None for an empty path."""
    if not path:
        return None
    head, _, rest = path.partition("/")
    if head.startswith("~"):
        home = ("/", "root") if head == "~root" else ("/", "home", head[1:] or "~")
        names = [*home[1:], *rest.split("/")]
        absolute = True
    else:
        absolute = path.startswith("/")
        names = path.split("/")
    stack: list[str] = []
    for name in names:
        if name in ("", "."):
            continue
        if name == "..":
            if stack and stack[-1] != "..":
                stack.pop()
            elif not absolute:
                stack.append("..")
            continue
        stack.append(name)
    return ("/", *stack) if absolute else tuple(stack)


def is_broad(path: str, *, here_counts: bool = True) -> bool:
    """A path nobody deletes (or opens up) recursively on purpose. With
    ``here_counts`` the working directory and what is above it (``.``, ``*``, ``..``)
    count too; ``find`` and ``mv`` are judged by their absolute roots alone."""
    if UNKNOWN in path:
        # a computed part may be empty: `"$DIR/"` is then `/`, `~/$SUB` is `~/`
        unknown_at = path.index(UNKNOWN)
        after = parts(path[unknown_at:].replace(UNKNOWN, "")) or ()
        if all(not name.strip("/") or _EVERYTHING.fullmatch(name) for name in after) \
                and _broad(parts(path.replace(UNKNOWN, "")), here_counts):
            return True
        return _broad(parts(path.replace(UNKNOWN, "x")), here_counts)
    return _broad(parts(path), here_counts)


def is_system_file(path: str, *, appending: bool = False) -> bool:
    """A file of the system (``/etc``, ``/usr``, ``/boot``…, but not ``/usr/local``,
    where users install their own tools), a key in ``~/.ssh`` or ``~/.gnupg``, or a
    start-up file in a home (``~/.bashrc``), which only an overwrite (not an append)
    breaks."""
    names = parts(path.replace(UNKNOWN, "x"))
    if not names or names[0] != "/" or len(names) < 2:
        return False
    if names[1] in _SYSTEM_FILES:
        return names[1:3] != ("usr", "local")
    rest = _in_home(names)
    if not rest:
        return False
    return rest[0] in _SECRETS or ("/".join(rest) in START_UP_FILES and not appending)


def is_device(path: str) -> bool:
    """A path under ``/dev`` or one the shell computes (it may be one): what ``mkfs``
    erases, unlike a file image (``mkfs.ext4 disk.img``)."""
    names = parts(path.replace(UNKNOWN, "x"))
    return UNKNOWN in path or (names is not None and names[:2] == ("/", "dev"))


def is_disk(path: str) -> bool:
    """A disk, a partition or a volume (writing to one erases what it holds)."""
    names = parts(path)
    if not names or names[0] != "/":
        return False
    return _DISK.match("/" + "/".join(names[1:])) is not None


def _broad(names: tuple[str, ...] | None, here_counts: bool) -> bool:
    if names is None:  # `rm -rf ""` deletes nothing
        return False
    glob_at = next((i for i, name in enumerate(names) if _GLOB.search(name)), None)
    if glob_at is not None:
        prefix = names[:glob_at]
        if names[0] != "/":  # `*`, `.*`, `../*`: every name here or above
            return (here_counts and all(n == ".." for n in prefix)
                    and _EVERYTHING.fullmatch(names[glob_at]) is not None)
        # `/*`, `~/.*`: every name in a broad directory; `/u*`, `/usr/l*`: the glob can
        # match a broad path itself (`/tmp/build-*` matches neither)
        return (_EVERYTHING.fullmatch(names[glob_at]) is not None
                and _broad_absolute(prefix)) or _broad_absolute((*prefix, "x"))
    if names and names[0] == "/":
        return _broad_absolute(names)
    return here_counts and all(n == ".." for n in names)


def _broad_absolute(names: tuple[str, ...]) -> bool:
    below = names[1:]
    if len(below) <= 1:
        return True
    return (len(below) == 2 and below[0] in _SYSTEM) or _in_home(names) == ()


def _in_home(names: tuple[str, ...]) -> tuple[str, ...] | None:
    """What follows the home directory in an absolute path; None outside any home."""
    below = names[1:]
    if below[:1] == ("root",):
        return below[1:]
    if len(below) >= 2 and below[0] in ("home", "Users"):
        return below[2:]
    return None
