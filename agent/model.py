"""The model agent: a tool-calling loop over an OpenAI-compatible endpoint.

A turn loads the session's history, offers the tools, runs the calls the
model makes (in the turn's task, so what they start carries the turn's
return address) and sends the model's words to the turn's route. A delivered
notification is a turn too, with the notice as a marked system message, and
the answer goes to the notice's route — never under whatever message came
last. Slash commands the command agent knows (/bg, /jobs, /kill, …) still
go to it, so they work without a model round trip.
"""

from __future__ import annotations

import structlog

from gateway.commands import CompressionFailed, parse_command
from gateway.config import AgentConfig
from gateway.events import SendResult
from gateway.notifications import Notification
from gateway.turn import Turn
from tools.delegation import SubAgent

from .command import CommandAgent
from .compression import Compressor
from .history import History, Message, notice_message
from .model_client import ModelClient, ModelUnavailable
from .toolbox import ToolBox, ToolContext

log = structlog.get_logger(__name__)

SYSTEM_PROMPT = """\
You are the assistant behind Homing, a chat gateway: people talk to you from Telegram, \
Discord or a web chat, and you can run shell commands for them with your tools.

- For anything that takes more than a few seconds (builds, deploys, downloads, scrapers), \
start it with terminal and background: true. It reports back to this conversation when \
it ends, so do not wait for it or poll it.
- delegate_task hands a self-contained task to a sub-agent; its summary comes back here.
- A system message that starts with "[Background notice: not a message from the user]" \
reports on work started earlier. The user did not write it: tell them in a sentence or \
two what happened and what it means; do not answer it as a question from the user.
- Be brief; this is a chat."""

SUBAGENT_PROMPT = """\
You are a sub-agent working on one task in the background with a shell (the terminal \
tool, foreground only). When you are done, answer with a short summary of what you did \
and found: that summary is all the requester will see."""


class ModelAgent:
    def __init__(self, config: AgentConfig, client: ModelClient, history: History,
                 toolbox: ToolBox, command_agent: CommandAgent) -> None:
        self.config = config
        self.client = client
        self.history = history
        self.toolbox = toolbox
        self.command_agent = command_agent
        self.commands = command_agent.commands
        self.compressor = Compressor(config, client, history)
        self.system_prompt = config.system_prompt or SYSTEM_PROMPT

    async def run_turn(self, turn: Turn) -> None:
        command = parse_command(turn.event.text)
        if command is not None and command[0] in self.commands:
            await self.command_agent.run_turn(turn)
            return
        await self._converse(turn, {"role": "user", "content": turn.event.text})

    async def run_notification(self, turn: Turn, notification: Notification) -> None:
        await self._converse(turn, notice_message(notification.text), notice=notification)

    def status_lines(self, turn: Turn) -> list[str]:
        return [f"model: {self.config.model} at {self.config.base_url}",
                *self.command_agent.status_lines(turn)]

    async def compress(self, turn: Turn) -> None:
        await self.compressor.compress(turn)

    async def _converse(self, turn: Turn, opening: Message, *,
                        notice: Notification | None = None) -> None:
        session_id = turn.session.id
        history = await self.history.load(session_id)
        await self.history.append(session_id, [opening])
        kind = "notification" if notice is not None else "reply"
        new: list[Message] = []
        ctx = ToolContext(reply=lambda text: turn.reply(text, kind=kind))
        said = False
        try:
            for _ in range(self.config.max_tool_rounds):
                reply = await self.client.complete(
                    [{"role": "system", "content": self.system_prompt}, *history, opening, *new],
                    self.toolbox.schemas())
                new.append(reply.message)
                if reply.text:
                    said = (await turn.reply(reply.text, kind=kind)).ok or said
                if not reply.tool_calls:
                    break
                for call in reply.tool_calls:
                    log.info("tool_call", tool=call.name)
                    result = await self.toolbox.call(call, ctx)
                    new.append({"role": "tool", "tool_call_id": call.id, "content": result})
            else:
                await turn.reply(f"I stopped after {self.config.max_tool_rounds} rounds of tool "
                                 f"calls without an answer (agent.max_tool_rounds). Tell me "
                                 f"how to go on.", kind="system")
                said = True
        except ModelUnavailable as exc:
            await self.history.append(session_id, new)
            await self._unavailable(turn, exc, notice)
            return
        await self.history.append(session_id, new)
        if not said and notice is not None:
            await turn.reply(notice.text, kind="notification")  # the notice itself, then
        elif not said:
            await turn.reply("(The model gave an empty answer.)", kind="system")
        await self._compress_if_needed(turn)

    async def _unavailable(self, turn: Turn, exc: ModelUnavailable,
                           notice: Notification | None) -> None:
        if notice is not None:
            # the notice must still arrive: without the model's words, as it is
            await turn.reply(f"{notice.text}\n\n(The model could not comment on this: {exc})",
                             kind="notification")
            return
        await turn.reply(f"{exc} Your message is kept in this conversation; send another "
                         f"message to try again.", kind="system")

    async def _compress_if_needed(self, turn: Turn) -> None:
        tokens = await self.history.tokens(turn.session.id)
        if not self.compressor.over_budget(tokens):
            return
        try:
            await self.compressor.compress(turn)
        except CompressionFailed:
            pass  # logged; the history is intact and the next turn tries again


def model_subagent(config: AgentConfig, client: ModelClient, toolbox: ToolBox) -> SubAgent:
    """``delegate_task``'s sub-agent: a second model loop with its own, unsaved history
    and a foreground shell; its last words are the summary that comes home."""

    async def refuse(text: str) -> SendResult:
        return SendResult.failed("a sub-agent cannot post to the conversation")

    async def run(task: str) -> str:
        messages: list[Message] = [{"role": "system", "content": SUBAGENT_PROMPT},
                                   {"role": "user", "content": task}]
        ctx = ToolContext(reply=refuse)
        for _ in range(config.max_tool_rounds):
            reply = await client.complete(messages, toolbox.schemas())
            messages.append(reply.message)
            if not reply.tool_calls:
                return reply.text or "(the sub-agent finished without a summary)"
            for call in reply.tool_calls:
                result = await toolbox.call(call, ctx)
                messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
        return (f"The sub-agent stopped after {config.max_tool_rounds} rounds of tool calls "
                f"without a summary.")

    return run
