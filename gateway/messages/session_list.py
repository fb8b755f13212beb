"""A conversation's sessions as a person sees them, for ``/sessions`` and ``/resume``.

A session here is what ``/new`` starts: compression carries a session on into a
child, and that chain is one session to a person (resumed where it went on). Each has
a number that never changes — 1 is the conversation's first, in the order they
started — so ``/resume 2`` means the same session whatever was listed or searched
before it.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gateway.messages.conversations import sessions_of, title_from
from gateway.sessions.store import SessionStore
from gateway.words.session_entry import SessionEntry

#: how many sessions ``/sessions`` lists (the newest); the rest by search
LISTED = 10
#: how many characters of a title a line shows
TITLE_CHARS = 60


@dataclass(frozen=True, slots=True)
class SessionLine:
    #: 1 for the conversation's first session, in the order they started
    number: int
    #: where the chain went on: the session that is (or was last) live
    session: SessionEntry
    #: every session id of the chain, oldest first
    chain: tuple[str, ...]
    title: str | None
    started_at: float
    messages: int
    running_jobs: int

    @property
    def current(self) -> bool:
        return self.session.is_live

    def text(self, now: float) -> str:
        mark = "● " if self.current else ""
        title = _cut(self.title, TITLE_CHARS) if self.title else "(untitled)"
        jobs = f", {self.running_jobs} job{'s' * (self.running_jobs != 1)} running" \
            if self.running_jobs else ""
        archived = ", archived" if self.session.archived else ""
        current = " — current" if self.current else ""
        return (f"{mark}{self.number}. {title}{current}\n"
                f"   started {_ago(self.started_at, now)}, last used "
                f"{_ago(self.session.last_active_at, now)}, {self.messages} message"
                f"{'s' * (self.messages != 1)}{jobs}{archived} · {self.session.id[:8]}")


async def session_lines(store: SessionStore, session_key: str,
                        running: Mapping[str, int]) -> list[SessionLine]:
    """The conversation's sessions, numbered, oldest first. ``running``: jobs running,
    by the session id that started them."""
    sessions = await sessions_of(store, session_key)
    chains = _chains(sessions)
    ids = [s.id for s in sessions]
    counts: dict[str, int] = {}
    for start in range(0, len(ids), 500):
        chunk = ids[start:start + 500]
        rows = await store.db.fetchall(
            f"SELECT session_id, COUNT(*) FROM messages WHERE session_id IN "
            f"({','.join('?' * len(chunk))}) GROUP BY session_id", chunk)
        counts.update((sid, int(n)) for sid, n in rows)
    lines = []
    for number, chain in enumerate(chains, start=1):
        chain_ids = tuple(s.id for s in chain)
        tip = chain[-1]
        lines.append(SessionLine(
            number=number, session=tip, chain=chain_ids,
            title=tip.title or await _first_words(store, chain_ids),
            started_at=chain[0].created_at,
            messages=sum(counts.get(i, 0) for i in chain_ids),
            running_jobs=sum(running.get(i, 0) for i in chain_ids)))
    return lines


async def matching(store: SessionStore, lines: Sequence[SessionLine],
                   words: Sequence[str]) -> list[SessionLine]:
    """The lines whose title, or anything said in them, holds every one of ``words``
    (case does not matter)."""
    if not words:
        return list(lines)
    found = []
    for line in lines:
        title = (line.title or "").lower()
        missing = [w for w in words if w.lower() not in title]
        if missing and not await _said_in(store, line.chain, missing):
            continue
        found.append(line)
    return found


def listing(lines: Sequence[SessionLine], *, searched: bool, archived_too: bool,
            now: float | None = None) -> str:
    """``/sessions``'s answer: newest first, at most :data:`LISTED`."""
    now = time.time() if now is None else now
    shown = sorted(lines, key=lambda line: line.number, reverse=True)[:LISTED]
    if not shown:
        return ("No session here matches that." if searched else
                "No other session here yet." if not archived_too else "No sessions here.")
    more = len(lines) - len(shown)
    head = "Sessions here, newest first" + (" (archived ones too)" if archived_too else "")
    tail = [f"…and {more} older: /sessions <words> finds one."] if more > 0 else []
    return "\n".join([head + ":", *(line.text(now) for line in shown), *tail,
                      "Resume one with /resume <number>."])


def pick(lines: Sequence[SessionLine], what: str) -> SessionLine | None:
    """The session ``/resume`` names: its number, or its id (or the start of one, when
    that is one session's)."""
    what = what.strip()
    if what.isdigit():
        return next((line for line in lines if line.number == int(what)), None)
    if len(what) < 4:
        return None
    found = [line for line in lines if any(i.startswith(what) for i in line.chain)]
    return found[0] if len(found) == 1 else None


def _chains(sessions: Sequence[SessionEntry]) -> list[list[SessionEntry]]:
    """Sessions (oldest first) grouped into compression chains, in the order the chains
    started."""
    by_id = {s.id: s for s in sessions}
    chains: dict[str, list[SessionEntry]] = {}
    root_of: dict[str, str] = {}
    for s in sessions:  # a parent starts before its child
        parent = s.parent_session_id
        root = root_of.get(parent, parent) if parent is not None and parent in by_id else s.id
        root_of[s.id] = root
        chains.setdefault(root, []).append(s)
    return sorted(chains.values(), key=lambda chain: (chain[0].created_at, chain[0].id))


async def _first_words(store: SessionStore, chain: Sequence[str]) -> str | None:
    """A session's first message that names something (commands do not)."""
    rows = await store.db.fetchall(
        f"SELECT substr(text, 1, 2000) FROM messages WHERE role = 'user' AND session_id "
        f"IN ({','.join('?' * len(chain))}) ORDER BY id LIMIT 20", tuple(chain))
    return next((t for (text,) in rows if (t := title_from(text)) is not None), None)


async def _said_in(store: SessionStore, chain: Sequence[str], words: Sequence[str]) -> bool:
    likes = " AND ".join("lower(text) LIKE ? ESCAPE '\\'" for _ in words)
    patterns = [f"%{_escaped(w.lower())}%" for w in words]
    row = await store.db.fetchone(
        f"SELECT 1 FROM messages WHERE session_id IN ({','.join('?' * len(chain))}) "
        f"AND {likes} LIMIT 1", (*chain, *patterns))
    return row is not None


def _escaped(word: str) -> str:
    return word.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _ago(timestamp: float, now: float) -> str:
    seconds = max(0, int(now - timestamp))
    if seconds < 60:
        return "just now"
    if seconds < 3600:
        return f"{seconds // 60} min ago"
    if seconds < 86400:
        return f"{seconds // 3600} h ago"
    return f"{seconds // 86400} d ago"
