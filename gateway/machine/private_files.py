"""The state directory is the operator's alone: 0700 for folders, 0600 for files.

Modes are set when things are made, whatever the umask, and an existing home
with wider modes (made by an older version, or by hand) is tightened at start,
with a log line saying how many were.
"""

from __future__ import annotations

import logging
import logging.handlers
import os
from pathlib import Path

import structlog

log = structlog.get_logger(__name__)

DIR_MODE = 0o700
FILE_MODE = 0o600


def private_dir(path: Path) -> Path:
    """Make ``path`` (and missing parents under it) a private folder."""
    # not mkdir(parents=True): the parents it makes get the umask's mode, not ours
    # (``files/`` was 0755 above its conversations' 0700 folders)
    missing = [p for p in (path, *path.parents) if not p.exists()]
    for folder in reversed(missing):
        folder.mkdir(mode=DIR_MODE, exist_ok=True)
        _narrow(folder, DIR_MODE)
    _narrow(path, DIR_MODE)
    return path


def private_file(path: Path) -> Path:
    """Make sure ``path`` exists as a private file (created empty when missing)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, FILE_MODE)
    os.close(fd)
    _narrow(path, FILE_MODE)
    return path


#: what Homing keeps in its home; nothing else there is touched (a home may be a
#: folder shared with other things)
OWN_ENTRIES = ("state.db", "state.db-wal", "state.db-shm", "status.json", "config.yaml",
               "logs", "jobs", "files")


def tighten_home(home: Path) -> int:
    """Narrow Homing's own files under ``home`` that others may read; how many were
    changed."""
    changed = _narrow(home, DIR_MODE)
    for name in OWN_ENTRIES:
        path = home / name
        if path.is_symlink() or not path.exists():
            continue
        if not path.is_dir():
            changed += _narrow(path, FILE_MODE)
            continue
        for root, dirs, files in os.walk(path):
            changed += _narrow(Path(root), DIR_MODE)
            for file in files:
                changed += _narrow(Path(root, file), FILE_MODE)
            dirs[:] = [d for d in dirs if not Path(root, d).is_symlink()]
    if changed:
        log.warning("state_directory_tightened", home=str(home), changed=changed,
                    hint="files of the state directory were readable by others; "
                         "now 0600 (folders 0700)")
    return changed


def _narrow(path: Path, mode: int) -> int:
    try:
        current = path.lstat().st_mode
    except OSError:
        return 0
    if os.path.islink(path) or current & 0o777 & ~mode == 0:
        return 0
    try:
        os.chmod(path, current & 0o777 & mode)
    except OSError as exc:
        log.warning("state_file_mode_not_changed", path=str(path), error=str(exc))
        return 0
    return 1


class PrivateRotatingFileHandler(logging.handlers.RotatingFileHandler):
    """The log file, and each one rotation starts, made 0600."""

    def _open(self):  # type: ignore[no-untyped-def]
        private_file(Path(self.baseFilename))
        return super()._open()
