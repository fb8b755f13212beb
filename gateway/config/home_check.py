"""Whether the state directory can be used: ``check-config`` says so before ``run``
would fail on it with a traceback (a ``home:`` naming a file, or a read-only place).

Nothing is left behind here: a home that does not exist yet is fine when the nearest
folder that does exist lets a folder be made in it. Asking the permission bits is not
enough — ``/proc`` and ``/sys`` say root may write and then refuse every new name —
so a folder is made there and removed at once.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def home_problem(home: Path) -> str | None:
    """None when ``home`` is (or can be made) a folder Homing can write in, else why not."""
    if home.exists() or home.is_symlink():
        if not home.is_dir():
            kind = "a file" if home.is_file() else "not a directory"
            return f"{home} is {kind}; the state directory must be a directory"
        if not _writable(home):
            return f"{home} is not writable (the state database and logs are kept there)"
        if (refused := _refuses_folders(home)) is not None:
            return f"{home} is not writable: a folder cannot be made in it ({refused})"
        return None
    parent = _nearest_existing(home)
    if not parent.is_dir():
        kind = "a file" if parent.is_file() else "not a directory"
        return f"{home} cannot be created: {parent} is {kind}"
    if not _writable(parent):
        return f"{home} cannot be created: {parent} is not writable"
    if (refused := _refuses_folders(parent)) is not None:
        return f"{home} cannot be created: a folder cannot be made in {parent} ({refused})"
    return None


def _nearest_existing(path: Path) -> Path:
    for parent in path.parents:
        if parent.exists() or parent.is_symlink():
            return parent
    return Path(path.anchor or ".")


def _refuses_folders(directory: Path) -> str | None:
    """None when a folder can be made in ``directory`` (it is removed again); else the
    system's reason."""
    try:
        probe = tempfile.mkdtemp(prefix=".homing-check-", dir=directory)
    except OSError as exc:
        return exc.strerror or str(exc)
    os.rmdir(probe)
    return None


def _writable(directory: Path) -> bool:
    # writing needs the search bit too: a folder one may write in but not enter is no use
    return os.access(directory, os.W_OK | os.X_OK)
