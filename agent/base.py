"""What the runner needs from an agent."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from gateway.notifications import Notification
from gateway.turn import Turn


class Agent(Protocol):
    @property
    def commands(self) -> Mapping[str, str]:
        """Slash commands this agent answers, name → one-line help."""

    async def run_turn(self, turn: Turn) -> None:
        """Answer one message; reply with ``turn.reply``."""

    async def run_notification(self, turn: Turn, notification: Notification) -> None:
        """React to a notification delivered to this session (an internal event)."""

    def posts_as_is(self, notification: Notification) -> bool:
        """Whether delivering ``notification`` only posts its text (no model turn): such
        notices may share one message when the conversation's send budget is short."""

    async def compress(self, turn: Turn) -> None:
        """Continue the conversation in a child session (reason ``compression``) and set
        ``turn.session`` to it; raise CompressionFailed to leave everything as it was."""

    def status_lines(self, turn: Turn) -> list[str]:
        """Lines for /status about what this agent has running in the conversation."""
