"""A press of a Block Kit button, read off the ``block_actions`` payload Socket Mode
brings: who pressed which button on which message. What the button means is its
owner's business — an approval's (approvals.py) or a choice's (choices.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["Press", "press_of"]


@dataclass(frozen=True, slots=True)
class Press:
    """One press of a button on one of the bot's messages."""

    action_id: str
    user_id: str
    user_name: str | None
    channel: str
    message_ts: str
    thread_ts: str | None
    #: unique per press: a redelivered envelope carries the same
    trigger_id: str
    #: when it was pressed (Slack's ``action_ts``), None if not said
    pressed_at: float | None


def press_of(payload: dict[str, Any]) -> Press | None:
    """The button pressed in ``payload``; None for anything else (a view submission, a
    press without its user or message)."""
    if payload.get("type") != "block_actions":
        return None
    actions = [a for a in payload.get("actions") or [] if isinstance(a, dict)]
    action_id = str(actions[0].get("action_id") or "") if actions else ""
    user = payload.get("user") or {}
    container = payload.get("container") or {}
    message = payload.get("message") or {}
    channel = container.get("channel_id") or (payload.get("channel") or {}).get("id")
    message_ts = container.get("message_ts") or message.get("ts")
    if not action_id or not user.get("id") or not channel or not message_ts:
        return None
    thread_ts = container.get("thread_ts") or message.get("thread_ts")
    trigger_id = payload.get("trigger_id") or f"{channel}:{message_ts}:{user['id']}"
    return Press(action_id, str(user["id"]), user.get("username") or user.get("name"),
                 str(channel), str(message_ts), str(thread_ts) if thread_ts else None,
                 str(trigger_id), _seconds(actions[0].get("action_ts")))


def _seconds(ts: Any) -> float | None:
    try:
        return float(ts) if ts is not None else None
    except (TypeError, ValueError):
        return None
