"""How a line is read as a gateway command, and the words ``/new`` answers with — what
the message path, the agents and the conversations' views all read commands by."""

from __future__ import annotations

import re

#: other names a command answers to
_ALIASES = {"reset": "new"}


def parse_command(text: str) -> tuple[str, str] | None:
    """``/name@bot args`` → ``("name", "args")``; None when not a command."""
    stripped = text.strip()
    if not stripped.startswith("/") or len(stripped) < 2:
        return None
    head, _, args = stripped[1:].partition(" ")
    name = head.split("@", 1)[0].lower()
    if not name or not all(c.isalnum() or c == "_" for c in name):
        return None
    return _ALIASES.get(name, name), args.strip()


def new_session_text(session_id: str, previous_id: str) -> str:
    """What ``/new`` says (:func:`new_session_ids` reads it back)."""
    return f"Started a new session ({session_id}). The previous one ({previous_id}) is closed."


_NEW_SESSION = re.compile(
    r"Started a new session \(([\w-]+)\)\. The previous one \(([\w-]+)\) is closed\.")


#: what the web page calls the line ``/new`` answers with, in its sidebar (the bubble
#: adds the time)
NEW_SESSION_WORDS = "New session"


def new_session_ids(kind: str, text: str) -> tuple[str, str] | None:
    """The new and the previous session id when this is the line ``/new`` answers with
    (a ``system`` line); None for any other. The one test of it: the web page says "New
    session" for that line, in its bubble and its sidebar line, the ids under details."""
    if kind != "system":
        return None
    found = _NEW_SESSION.fullmatch(text.strip())
    return (found[1], found[2]) if found else None
