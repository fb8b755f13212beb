"""Context compression: the model summarises the older turns, and the session continues
in a child session linked to it.

The child is made through the runner's rotation with reason ``compression``
(the lineage), so work started before the compression still proves its way
to the conversation, and the summary plus the most recent turns are the
child's first history.
"""

from __future__ import annotations

import structlog

from agent.history import (
    History,
    Message,
    append_ops,
    content_text,
    estimate_tokens,
    starts_turn,
)
from agent.model_client import ModelClient
from gateway.config.settings import AgentConfig
from gateway.messages.commands import CompressionFailed
from gateway.messages.turn import Turn

log = structlog.get_logger(__name__)

SUMMARY_MARK = "[Summary of the earlier conversation]"
SUMMARY_PROMPT = (
    "You compress a chat between a user and an assistant that runs shell jobs and "
    "sub-agents for them. Write a summary that lets the assistant carry on: what the user "
    "wants, decisions made, facts learned, and every background job or delegation still "
    "running or expected to report back (with its id). Plain text, at most 300 words."
)
#: characters of one message shown to the summariser
_ITEM_CHARS = 2000
#: a tool result kept after a compression is never cut shorter than this
_MIN_RESULT_CHARS = 200


def split_for_compression(history: list[Message], keep_turns: int, keep_tokens: int
                          ) -> tuple[list[Message], list[Message]]:
    """(older, recent): ``recent`` is the last ``keep_turns`` (at least one) whole turns
    that fit in ``keep_tokens``; it starts at a turn, so no tool call loses its result.

    The last turn is always kept — it may be the one under way, and summarising
    its tool calls away would have the model make them again. When it does not
    fit, its tool results are cut short instead (the summary still sees them whole).
    """
    starts = [i for i, m in enumerate(history) if starts_turn(m)]
    if not starts:
        return history, []
    for count in range(min(max(keep_turns, 1), len(starts)), 0, -1):
        cut = starts[-count]
        recent = history[cut:]
        if _tokens(recent) <= keep_tokens:
            return history[:cut], recent
    cut = starts[-1]
    return history[:cut], _shrink(history[cut:], keep_tokens)


def _shrink(turn: list[Message], keep_tokens: int) -> list[Message]:
    """``turn`` with its tool results cut so that it fits ``keep_tokens`` if it can."""
    results = [i for i, m in enumerate(turn) if m.get("role") == "tool"]
    if not results:
        return turn
    room = keep_tokens - _tokens([m for m in turn if m.get("role") != "tool"])
    per_result = max(_MIN_RESULT_CHARS, room * 4 // len(results))
    return [_cut(m, per_result) if i in results else m for i, m in enumerate(turn)]


def _cut(message: Message, limit: int) -> Message:
    content = message.get("content") or ""
    if len(content) <= limit:
        return message
    return {**message, "content": content[:limit] + " [... cut short when the context "
                                                    "was compressed]"}


def _tokens(messages: list[Message]) -> int:
    return sum(estimate_tokens(m) for m in messages)


def render(messages: list[Message], limit_chars: int) -> str:
    """The older turns as plain text for the summariser, each message clipped so that
    all of them fit in about ``limit_chars`` (the first turn matters as much as the last)."""
    per_item = min(_ITEM_CHARS, max(200, limit_chars // max(1, len(messages))))
    lines = []
    for m in messages:
        content = content_text(m.get("content")).strip()
        role = m.get("role")
        if role == "assistant" and m.get("tool_calls"):
            calls = ", ".join(f"{c['function']['name']}({c['function']['arguments']})"
                              for c in m["tool_calls"])
            content = f"{content}\n[called {calls}]".strip()
        if role == "tool":
            role = "tool result"
        if content:
            lines.append(f"{role}: {_clip(content, per_item)}")
    return "\n\n".join(lines)


def summary_message(summary: str, from_session_id: str) -> Message:
    return {"role": "system",
            "content": f"{SUMMARY_MARK} (session {from_session_id} was compressed)\n{summary}"}


class Compressor:
    def __init__(self, config: AgentConfig, client: ModelClient, history: History) -> None:
        self.config = config
        self.client = client
        self.history = history

    def over_budget(self, tokens: int) -> bool:
        return tokens > self.config.context_budget_tokens

    async def compress(self, turn: Turn) -> None:
        """Summarise ``turn.session`` and continue in its child; ``turn.session`` becomes
        the child. Raises CompressionFailed and changes nothing when the model fails."""
        old = turn.session
        messages = await self.history.load(old.id)
        budget = self.config.context_budget_tokens
        older, recent = split_for_compression(messages, self.config.keep_recent_turns,
                                              budget // 2)
        # a kept turn that was cut short is summarised too, from its whole text
        summarised = older if older + recent == messages else messages
        summary = "(nothing was said yet)"
        if summarised:
            try:
                reply = await self.client.complete([
                    {"role": "system", "content": SUMMARY_PROMPT},
                    {"role": "user", "content": render(summarised, limit_chars=budget * 2)},
                ])
            except Exception as exc:
                log.warning("compression_failed", session_id=old.id, error=str(exc))
                raise CompressionFailed(str(exc)) from exc
            summary = reply.text or "(the model gave an empty summary)"
        carried = [summary_message(summary, old.id), *recent]
        # the child and its first history commit together: no crash leaves it empty
        turn.session = await turn.runner.rotate_session(
            old, "compression", route=None if turn.event.internal else turn.route,
            seed=lambda child_id: append_ops(child_id, carried))
        log.info("session_compressed", ended_session_id=old.id, session_id=turn.session.id,
                 summarised_messages=len(summarised), kept_messages=len(recent))


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + " [...]"
