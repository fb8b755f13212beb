"""What the runner needs from an agent."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from gateway.turn import Turn


class Agent(Protocol):
    #: slash commands this agent answers, name → one-line help
    commands: Mapping[str, str]

    async def run_turn(self, turn: Turn) -> None:
        """Answer one message; reply with ``turn.reply``."""
