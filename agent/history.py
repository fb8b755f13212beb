"""The model agent's context: each session's chat messages, kept in the store.

The transcript (``messages``) is what people read; this is what the model
reads — tool calls and tool results included, notices marked as such, and a
summary in place of turns that were compressed away.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

from gateway.store.group_commit import Op
from gateway.store.state import StateDatabase

#: one chat-completions message, as the endpoint takes it
Message = dict[str, Any]

NOTICE_MARK = "[Background notice: not a message from the user]"


def content_text(content: object) -> str:
    """A message's text: the content itself, or the text of its parts (images aside)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


def estimate_tokens(message: Message) -> int:
    """About four characters a token plus a small overhead per message.

    Good enough to decide when to compress, and needs no tokenizer that
    would only fit one model family.
    """
    size = len(content_text(message.get("content")))
    for call in message.get("tool_calls") or ():
        function = call.get("function") or {}
        size += len(function.get("name") or "") + len(function.get("arguments") or "")
    return size // 4 + 4


def notice_message(text: str, notification_id: int) -> Message:
    """A delivered notification as the model sees it: in the user's role (the only one
    every chat template takes mid-conversation), plainly marked as not the user's words."""
    return {"role": "user", "content": f"{NOTICE_MARK} (notice {notification_id})\n{text}"}


def _stored_notice_prefix(notification_id: int) -> str:
    """How a notice's row in ``agent_messages`` begins (see :func:`append_ops`)."""
    whole = json.dumps(notice_message("", notification_id), ensure_ascii=False)
    return whole[:-len('"}')]


def starts_turn(message: Message) -> bool:
    """True for what opens a turn: a user message or a notice (never inside a tool round)."""
    role = message.get("role")
    content = content_text(message.get("content"))
    return role == "user" or (role == "system" and content.startswith(NOTICE_MARK))


class History:
    def __init__(self, db: StateDatabase) -> None:
        self.db = db

    async def load(self, session_id: str) -> list[Message]:
        rows = await self.db.fetchall(
            "SELECT message FROM agent_messages WHERE session_id = ? ORDER BY id", (session_id,))
        return [json.loads(row[0]) for row in rows]

    async def has_notice(self, session_ids: list[str], notification_id: int) -> bool:
        """Whether the model was already given this notice in any of ``session_ids``."""
        prefix = _stored_notice_prefix(notification_id)
        marks = ",".join("?" * len(session_ids))
        row = await self.db.fetchone(
            f"SELECT 1 FROM agent_messages WHERE session_id IN ({marks}) "
            f"AND substr(message, 1, ?) = ? LIMIT 1", (*session_ids, len(prefix), prefix))
        return row is not None

    async def append(self, session_id: str, messages: list[Message], *,
                     inbound_ids: Sequence[int] = ()) -> None:
        """Add ``messages`` in order, in one transaction; returns once committed.
        ``inbound_ids``, one per message when given: the journal entries whose messages
        they are (given to a turn under way), written once per entry as in
        :meth:`open_turn`."""
        if messages:
            await self.db.write(append_ops(session_id, messages, inbound_ids))

    async def open_turn(self, session_id: str, opening: Message,
                        inbound_id: int | None) -> None:
        """Add the message that opens a turn; returns once committed. ``inbound_id``: the
        journal entry whose message it is — written once per entry, so a message
        replayed after a crash keeps the row the life that died wrote (and the model
        is not asked it twice, as two user turns merged into one)."""
        await self.db.write([_insert_op(session_id, opening, time.time(), inbound_id)])


def append_ops(session_id: str, messages: list[Message],
               inbound_ids: Sequence[int] = ()) -> list[Op]:
    """The writes that add ``messages`` to a session's history (to join a transaction)."""
    now = time.time()
    if inbound_ids:
        return [_insert_op(session_id, m, now, i)
                for m, i in zip(messages, inbound_ids, strict=True)]
    return [_insert_op(session_id, m, now) for m in messages]


def _insert_op(session_id: str, message: Message, now: float,
               inbound_id: int | None = None) -> Op:
    return ("INSERT INTO agent_messages (session_id, message, tokens, created_at, inbound_id) "
            "VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
            (session_id, json.dumps(message, ensure_ascii=False), estimate_tokens(message),
             now, inbound_id))
