"""The built-in command agent: deterministic, needs no model.

It makes a fresh install useful and testable: it answers its slash commands
and acknowledges plain text. Later capabilities teach it job commands.
"""

from __future__ import annotations

import asyncio
import json

from gateway.commands import parse_command
from gateway.turn import Turn
from tools.session_info import session_info


class CommandAgent:
    commands: dict[str, str] = {
        "whoami": "show the conversation this turn runs in, as a tool sees it",
    }

    async def run_turn(self, turn: Turn) -> None:
        command = parse_command(turn.event.text)
        if command is None:
            await turn.reply(_acknowledge(turn.event.text))
            return
        name, _args = command
        if name == "whoami":
            await self._whoami(turn)
        else:
            await turn.reply(f"Unknown command /{name}. Send /help for the list.", kind="system")

    async def _whoami(self, turn: Turn) -> None:
        in_loop = session_info()
        # the same tool from a worker thread must see the same conversation
        in_thread = await asyncio.to_thread(session_info)
        await turn.reply(json.dumps({"tool": in_loop, "thread": in_thread}, sort_keys=True))


def _acknowledge(text: str) -> str:
    preview = " ".join(text.split())
    if len(preview) > 60:
        preview = preview[:57] + "..."
    return f"Received: {preview}\n(I am the built-in command agent; send /help for what I can do.)"
