"""The inbound journal: every accepted message is committed before anything
acknowledges it, and handled from here.

A message (after authorization) is journaled with its platform's own id —
Telegram's update id, Discord's message id, the web chat frame's id — before
the Telegram offset moves past it or the web tab gets its ``ack``. Handling
then runs from the journal: ``received`` → ``started`` (its turn began) → ``acted``
(the turn did something that lasts: started a job, a delegation, a schedule —
recorded in that thing's own transaction) → ``replied`` (its first reply went
out, recorded with that reply's transcript line) → ``handled``, or
``skipped`` (too old to run). After a crash, a message not yet answered is
handled again — unless its turn had acted, which must not happen twice: then
its conversation is told it may not have finished. A message seen twice (a
redelivered update, a resent frame) is journaled once, so it is handled once,
across restarts too.
"""

from __future__ import annotations

import contextvars
import json
import sqlite3
import time
import uuid
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import structlog

from gateway.cluster.lives import ALONE, Life, lives_over
from gateway.store.group_commit import Op
from gateway.store.migrations import INBOUND_CHANNEL
from gateway.store.state import StateDatabase
from gateway.words.events import MessageEvent
from gateway.words.route import Route

log = structlog.get_logger(__name__)

_COLUMNS = ("id, platform, platform_id, session_key, event, sent_at, received_at, state, "
            "handled_at")


@dataclass(frozen=True, slots=True)
class JournalEntry:
    id: int
    platform: str
    platform_id: str
    session_key: str
    event: MessageEvent
    #: when the platform says it was sent (received_at when it does not say)
    sent_at: float
    received_at: float
    state: str

    @property
    def dedupe_key(self) -> str:
        """What the replies to this message are keyed by (each ``reply_key`` of it): the
        same in every life, so a send made again is known for the same send."""
        return f"in:{self.platform}:{self.platform_id}"

    @classmethod
    def from_row(cls, row: Any) -> JournalEntry:
        (eid, platform, platform_id, key, event, sent, received, state, _) = row
        return cls(eid, platform, platform_id, key, event_from_json(event), sent or received,
                   received, state)


class Inbound:
    def __init__(self, db: StateDatabase, *, life: Life = ALONE) -> None:
        self.db = db
        #: on a shared store, this life's name (gateway/cluster/lives.py): what it journals is
        #: its own to handle, and only a life that is over leaves entries to take over
        self.handler: str | None = life.name
        #: whether that life is over: then it writes no more ends, and a survivor takes
        #: its unfinished entries as they are (a stalled instance's turn that could not
        #: answer must not leave its message marked handled)
        self.over: Callable[[], bool] = life.over

    async def record(self, event: MessageEvent, session_key: str, *,
                     platform_id: str | None = None,
                     sent_at: float | None = None) -> JournalEntry | None:
        """Journal ``event`` (committed when this returns); None when its platform id was
        journaled before — a message seen twice."""
        now = time.time()
        pid = platform_id or f"local-{uuid.uuid4().hex}"

        def insert(conn: sqlite3.Connection) -> int | None:
            # no row back: the platform id was journaled before
            row = conn.execute(
                "INSERT INTO inbound (platform, platform_id, session_key, event, sent_at, "
                "received_at, state, handler) "
                f"VALUES (?, ?, ?, ?, ?, ?, '{EntryState.RECEIVED}', ?) "
                "ON CONFLICT DO NOTHING RETURNING id",
                (event.route.platform, pid, session_key, event_to_json(event), sent_at, now,
                 self.handler)
            ).fetchone()
            return int(row[0]) if row is not None else None

        entry_id = await self.db.write(insert)
        if entry_id is None:
            return None
        return JournalEntry(entry_id, event.route.platform, pid, session_key, event,
                            sent_at or now, now, "received")

    async def started(self, entry_id: int, *, replayed: bool = False) -> bool:
        """Its turn begins — False when another handler took it first. (A replay may take
        one whose turn began in the stopped process and did nothing that lasts.) From
        here a crash means "may not have finished", not "replay"."""
        mine, params = self._mine(entry_id)
        sql = (f"UPDATE inbound SET state = '{EntryState.STARTED}' WHERE id = ? "
               f"AND state IN ('{EntryState.RECEIVED}', '{EntryState.STARTED}'){mine}"
               if replayed else
               f"UPDATE inbound SET state = '{EntryState.STARTED}' WHERE id = ? "
               f"AND state = '{EntryState.RECEIVED}'{mine}")

        def claim(conn: sqlite3.Connection) -> bool:
            return conn.execute(sql, params).rowcount == 1
        return bool(await self.db.write(claim))

    @staticmethod
    def replied_op(entry_id: int) -> Op:
        """Written with a turn's reply: the message was answered, whatever comes next."""
        return (f"UPDATE inbound SET state = '{EntryState.REPLIED}' WHERE id = ? "
                f"AND state IN ('{EntryState.STARTED}', '{EntryState.ACTED}')", (entry_id,))

    def finished(self, entry_id: int, state: str = "handled") -> None:
        if self.over():
            log.warning("message_left_to_survivor", entry_id=entry_id,
                        reason="this instance's life is over")
            return
        mine, params = self._mine(entry_id)
        self.db.write_behind([("UPDATE inbound SET state = ?, handled_at = ? WHERE id = ? "
                               f"AND state IN ({OPEN_STATES}){mine}",
                               (state, time.time(), *params))])

    def _mine(self, entry_id: int) -> tuple[str, tuple[Any, ...]]:
        """On a shared store, a condition that the entry is still this life's: a
        survivor may have taken it over while this write waited (a stall)."""
        if self.handler is None:
            return "", (entry_id,)
        return " AND handler = ?", (entry_id, self.handler)

    async def hand_over(self, ids: Collection[int] | None = None, *,
                        keep: Collection[str] = ()) -> int:
        """On a shared store, as this life stops: what it journaled and will not begin
        (``ids``, or all of it) becomes nobody's, and the other instances are woken to
        take it at once, rather than after this life has ended. Entries of the
        conversations in ``keep`` (a turn under way here) are left for when it ends,
        so a survivor does not answer them before it. How many were handed over."""
        me = self.handler
        if me is None or self.over():  # the next life replays them, or a survivor takes
            return 0                   # them as it takes a life's that is over

        def give(conn: sqlite3.Connection) -> int:
            rows = conn.execute("SELECT id, session_key FROM inbound WHERE handler = ? "
                                f"AND state = '{EntryState.RECEIVED}'", (me,)).fetchall()
            chosen = [eid for eid, key in rows
                      if key not in keep and (ids is None or eid in ids)]
            if not chosen:
                return 0
            given = conn.execute(
                f"UPDATE inbound SET handler = NULL WHERE id IN ({','.join('?' * len(chosen))}) "
                f"AND handler = ? AND state = '{EntryState.RECEIVED}'", (*chosen, me)).rowcount
            if given:  # sent at commit
                conn.execute("SELECT pg_notify(?, ?)", (INBOUND_CHANNEL, ""))
            return int(given)

        given = int(await self.db.write(give))
        if given:
            log.info("messages_handed_over", messages=given,
                     reason="this instance is stopping")
        return given

    async def unfinished(self) -> list[JournalEntry]:
        """What a stopped process had taken in and not finished, oldest first. On a
        shared store: what lives that are over (a crashed instance, this instance's
        last life) had left, which become this life's in the same write — so two
        survivors never both take one entry."""
        me = self.handler
        if me is None:
            rows = await self.db.fetchall(
                f"SELECT {_COLUMNS} FROM inbound WHERE state IN ({OPEN_STATES}) ORDER BY id")
            return [JournalEntry.from_row(r) for r in rows]

        def take(conn: sqlite3.Connection) -> list[Any]:
            # the lives found over stay over until this commits (gateway/cluster/lives.py)
            over = lives_over(conn, lambda: [r[0] for r in conn.execute(
                f"SELECT DISTINCT handler FROM inbound WHERE state IN ({OPEN_STATES}) "
                "AND (handler IS NULL OR handler <> ?)", (me,))])
            if not over:
                return []
            named = [h for h in over if h is not None]
            which = " OR ".join(
                (["handler IS NULL"] if None in over else [])
                + ([f"handler IN ({','.join('?' * len(named))})"] if named else []))
            return conn.execute(
                f"UPDATE inbound SET handler = ? WHERE state IN ({OPEN_STATES}) AND ({which}) "
                f"RETURNING {_COLUMNS}", (me, *named)).fetchall()

        rows = await self.db.write(take)
        return sorted((JournalEntry.from_row(r) for r in rows), key=lambda e: e.id)

    async def last_ids(self, platform: str, since: float) -> dict[str, str]:
        """The newest journaled platform id of each chat of ``platform`` active since
        ``since`` (Discord catches up on a channel's history after it)."""
        rows = await self.db.fetchall(
            "SELECT event, platform_id FROM inbound WHERE id IN (SELECT MAX(id) FROM inbound "
            "WHERE platform = ? AND received_at >= ? GROUP BY session_key)", (platform, since))
        found: dict[str, str] = {}
        for event, platform_id in rows:
            found[json.loads(event)["route"]["chat_id"]] = platform_id
        return found

    async def last_received(self, platform: str) -> float | None:
        """When this platform's newest message was journaled: the gateway was alive then."""
        row = await self.db.fetchone("SELECT MAX(received_at) FROM inbound WHERE platform = ?",
                                     (platform,))
        return row[0] if row else None

    async def prune(self, older_than: float) -> int:
        """Forget finished entries journaled before ``older_than``: platforms redeliver
        within hours (Telegram keeps updates 24 h), and Telegram may reuse update ids
        after a week of silence."""
        def delete(conn: sqlite3.Connection) -> int:
            return conn.execute(f"DELETE FROM inbound WHERE state IN ('{EntryState.HANDLED}', "
                                f"'{EntryState.SKIPPED}') "
                                "AND received_at < ?", (older_than,)).rowcount
        return int(await self.db.write(delete))

    async def seen(self, platform: str, platform_id: str) -> bool:
        row = await self.db.fetchone(
            "SELECT 1 FROM inbound WHERE platform = ? AND platform_id = ?",
            (platform, platform_id))
        return row is not None


class EntryState(StrEnum):
    """A journaled message: taken in, its turn begun, something started by it, a reply
    sent, and at last handled or skipped."""

    RECEIVED = "received"
    STARTED = "started"
    ACTED = "acted"
    REPLIED = "replied"
    HANDLED = "handled"
    SKIPPED = "skipped"


#: the moves an entry's state may make, and no others (tests/test_states.py reads every
#: UPDATE of the table against it); a replay starts an entry again
ENTRY_MOVES: dict[EntryState, frozenset[EntryState]] = {
    EntryState.RECEIVED: frozenset({EntryState.STARTED, EntryState.HANDLED,
                                    EntryState.SKIPPED}),
    EntryState.STARTED: frozenset({EntryState.STARTED, EntryState.ACTED, EntryState.REPLIED,
                                   EntryState.HANDLED, EntryState.SKIPPED}),
    EntryState.ACTED: frozenset({EntryState.REPLIED, EntryState.HANDLED,
                                 EntryState.SKIPPED}),
    EntryState.REPLIED: frozenset({EntryState.HANDLED, EntryState.SKIPPED}),
    EntryState.HANDLED: frozenset(),
    EntryState.SKIPPED: frozenset(),
}
#: a message not finished yet: taken in, its turn under way, or answered and not closed
OPEN_STATES = ", ".join(f"'{s}'" for s in (EntryState.RECEIVED, EntryState.STARTED,
                                            EntryState.ACTED, EntryState.REPLIED))
#: the journal entry whose turn runs in this task (set by the runner around the turn)
_handling: contextvars.ContextVar[int | None] = contextvars.ContextVar("homing_inbound",
                                                                        default=None)


@contextmanager
def handling(entry_id: int | None) -> Iterator[None]:
    token = _handling.set(entry_id)
    try:
        yield
    finally:
        _handling.reset(token)


def current_entry() -> int | None:
    """The journal entry whose message's turn runs in this task (None outside one)."""
    return _handling.get()


def acted_ops() -> list[Op]:
    """For what a turn starts that lasts (a job, a delegation, a schedule), in that
    thing's own transaction: the message that asked for it must not be run again."""
    entry_id = _handling.get()
    if entry_id is None:
        return []
    return [(f"UPDATE inbound SET state = '{EntryState.ACTED}' "
             f"WHERE id = ? AND state = '{EntryState.STARTED}'",
             (entry_id,))]


async def mark_acted(db: StateDatabase) -> None:
    """Before a side effect no transaction of ours records — a foreground command, a
    tool call — the message that asked for it must not be run again either."""
    ops = acted_ops()
    if ops:
        await db.write(ops)


def event_to_json(event: MessageEvent) -> str:
    return json.dumps({"text": event.text, "route": event.route.to_dict(),
                       "message_id": event.message_id, "metadata": event.metadata},
                      ensure_ascii=False)


def event_from_json(text: str) -> MessageEvent:
    data = json.loads(text)
    metadata = dict(data.get("metadata") or {})
    return MessageEvent(text=data["text"], route=Route.from_dict(data["route"]),
                        message_id=data.get("message_id"), metadata=metadata)
