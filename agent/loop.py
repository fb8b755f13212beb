"""The tool loop: ask the model, run the tools it calls, hand it the results, repeat.

One loop for the conversation agent and its sub-agents. A round — the
assistant message and a result for every tool call in it — is recorded as
one piece, even when the turn is cancelled or a tool raises halfway, so the
history never holds a tool call without its result (endpoints refuse such a
history for good).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import structlog

from agent.history import Message
from agent.model_client import ModelClient, OnText
from agent.model_reply import ModelReply
from agent.toolbox import ToolBox, ToolContext

log = structlog.get_logger(__name__)

INTERRUPTED = '{"error": "interrupted before this tool call finished"}'
CUT_NOTE = "(The answer was cut off here: it reached agent.max_tokens.)"

#: the messages to send this round (system prompt and history included)
Context = Callable[[], Awaitable[list[Message]]]
#: keeps a finished round; told the tokens the endpoint counted, when it did
Record = Callable[[list[Message], int | None], Awaitable[None]]
Say = Callable[[str], Awaitable[object]]


class ToolLoop:
    def __init__(self, client: ModelClient, toolbox: ToolBox, max_rounds: int) -> None:
        self.client = client
        self.toolbox = toolbox
        self.max_rounds = max_rounds

    async def run(self, context: Context, record: Record, say: Say, ctx: ToolContext, *,
                  on_text: OnText | None = None) -> ModelReply | None:
        """Rounds until the model answers without tool calls (that reply is returned)
        or ``max_rounds`` run out (None). Raises ModelUnavailable. ``on_text``: each
        round's answer as it is streamed, before ``say`` has the whole of it."""
        for _ in range(self.max_rounds):
            reply = await self.client.complete(await context(), self.toolbox.schemas(),
                                               on_text=on_text)
            if reply.text:
                # cut off by agent.max_tokens: posted as it is, with a note, not asked again
                await say(reply.text + (f"\n\n{CUT_NOTE}" if reply.cut else ""))
            if not reply.tool_calls:
                # an empty answer is not kept: some endpoints refuse an empty assistant turn
                await record([reply.message] if reply.text else [], reply.total_tokens)
                return reply
            await self._run_tools(reply, record, ctx)
        return None

    async def _run_tools(self, reply: ModelReply, record: Record, ctx: ToolContext) -> None:
        results: list[Message] = []
        try:
            for call in reply.tool_calls:
                log.info("tool_call", tool=call.name, tool_call_id=call.id)
                content = await self.toolbox.call(call, ctx)
                results.append({"role": "tool", "tool_call_id": call.id, "content": content})
        finally:
            for call in reply.tool_calls[len(results):]:
                results.append({"role": "tool", "tool_call_id": call.id,
                                "content": INTERRUPTED})
            await record([reply.message, *results], reply.total_tokens)
