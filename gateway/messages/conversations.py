"""Conversations: everything a session key has said, across the sessions that
``/new`` and compression made of it.

A session is the agent's unit; a conversation is the person's: its title
(renamed, or its first message that is not a command), its last words, and its
whole transcript, earlier sessions included, so a late notice from an ended
session stays reachable.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gateway.formatting.markdown import plain_text
from gateway.messages.command_line import NEW_SESSION_WORDS, new_session_ids, parse_command
from gateway.sessions.store import ArchivedFilter, SessionStore, TranscriptLine
from gateway.words.session_entry import SessionEntry

TITLE_CHARS = 80
PREVIEW_CHARS = 120
#: a conversation of more commands than this at its start stays untitled
TITLE_TRIES = 20
#: enough of a message for its first line in plain words (a title, a last line)
HEAD_CHARS = 2000


@dataclass(frozen=True, slots=True)
class Conversation:
    #: the session that stands for it: the live one, or the last to start
    session: SessionEntry
    title: str | None
    last: TranscriptLine | None

    def to_dict(self) -> dict[str, Any]:
        """``last.text`` is the last message's first line as written (Markdown);
        ``last.plain`` is what the sidebar shows: the message in plain words, one line."""
        s = self.session
        last = None
        if self.last is not None:
            line = self.last.text.strip().split("\n", 1)[0]
            last = {"role": self.last.role, "at": self.last.created_at,
                    "text": _cut(line, PREVIEW_CHARS), "plain": _plain_line(self.last)}
        return {"conversation": s.route.chat_id, "session_key": s.session_key,
                "session_id": s.id, "live": s.is_live, "title": self.title,
                "archived": s.archived, "last_active_at": s.last_active_at, "last": last}


def title_from(text: str) -> str | None:
    """A message as a title: its first line in plain words (no Markdown marks), trimmed;
    None for a command (``/help`` names nothing) or a message with no words."""
    if parse_command(text) is not None:
        return None
    lines = plain_text(text).split("\n", 1)
    line = " ".join(lines[0].split())
    return _cut(line, TITLE_CHARS) if line else None


def _plain_line(line: TranscriptLine) -> str:
    """A message in plain words on one line; the ``/new`` line as the page says it
    ("New session": its session ids are details, never a sidebar's words)."""
    if new_session_ids(line.role, line.text) is not None:
        return NEW_SESSION_WORDS
    return _cut(" ".join(plain_text(line.text[:HEAD_CHARS]).split()), PREVIEW_CHARS)


def _cut(line: str, limit: int) -> str:
    return line if len(line) <= limit else line[:limit - 1] + "…"


async def list_conversations(store: SessionStore, platform: str,
                             archived: ArchivedFilter = "exclude",
                             limit: int = 500) -> list[Conversation]:
    sessions = await store.list_sessions("include", platform=platform, limit=10 * limit)
    latest: dict[str, SessionEntry] = {}
    for s in sessions:  # newest activity first
        known = latest.get(s.session_key)
        if known is None or _rank(s) > _rank(known):
            latest[s.session_key] = s
    wanted = [s for s in latest.values()
              if archived == "include" or s.archived == (archived == "only")]
    wanted.sort(key=lambda s: s.last_active_at, reverse=True)
    return [await _conversation(store, s) for s in wanted[:limit]]


async def latest_session(store: SessionStore, session_key: str) -> SessionEntry | None:
    """The conversation's live session, else the last to start (``/resume`` can make an
    earlier one live again)."""
    sessions = await sessions_of(store, session_key)
    return max(sessions, key=_rank) if sessions else None


def _rank(session: SessionEntry) -> tuple[bool, float]:
    """Which session stands for its conversation: the live one, else the newest."""
    return session.is_live, session.created_at


async def sessions_of(store: SessionStore, session_key: str) -> list[SessionEntry]:
    """A conversation's sessions, oldest first."""
    rows = await store.db.fetchall(
        "SELECT id FROM sessions WHERE session_key = ? ORDER BY created_at, id",
        (session_key,))
    found = await store.get_many([r[0] for r in rows])
    return [found[r[0]] for r in rows if r[0] in found]


async def transcript(store: SessionStore, session_key: str, limit: int = 2000
                     ) -> list[TranscriptLine]:
    """The conversation's last ``limit`` lines, across its sessions, oldest first."""
    await store.db.flush()
    rows = await store.db.fetchall(
        "SELECT * FROM (SELECT m.id, m.session_id, m.role, m.text, m.created_at, m.notice "
        "FROM messages m JOIN sessions s ON s.id = m.session_id WHERE s.session_key = ? "
        "ORDER BY m.id DESC LIMIT ?) AS recent ORDER BY id", (session_key, limit))
    return [TranscriptLine(*row) for row in rows]


async def _conversation(store: SessionStore, session: SessionEntry) -> Conversation:
    title = session.title
    if title is None:
        # the first of the first few that names something (commands do not); the head
        # of each is enough for a first line
        first = await store.db.fetchall(
            "SELECT substr(m.text, 1, ?) FROM messages m JOIN sessions s "
            "ON s.id = m.session_id WHERE s.session_key = ? AND m.role = 'user' "
            "ORDER BY m.id LIMIT ?", (HEAD_CHARS, session.session_key, TITLE_TRIES))
        title = next((t for (text,) in first if (t := title_from(text)) is not None), None)
    last = await store.db.fetchall(
        "SELECT m.id, m.session_id, m.role, m.text, m.created_at, m.notice FROM messages m "
        "JOIN sessions s ON s.id = m.session_id WHERE s.session_key = ? "
        "ORDER BY m.id DESC LIMIT 1", (session.session_key,))
    return Conversation(session, title, TranscriptLine(*last[0]) if last else None)


def line_json(line: TranscriptLine, shown: dict[str, Any]) -> dict[str, Any]:
    """A transcript line for the web chat, with what the page shows of it (``html``…)."""
    data = line.to_dict()
    data.update(shown)
    data["at"] = line.created_at
    return data


__all__ = ["Conversation", "latest_session", "line_json", "list_conversations",
           "sessions_of", "title_from", "transcript"]
