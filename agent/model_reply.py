"""What the model said, as the tool loop takes it: the assistant message for the
history, its tool calls, and whether it was cut at the token limit.

Built the same way from a whole answer and from a stream's pieces, so the
history never depends on how the endpoint delivered it.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any

from agent.history import Message


@dataclass(frozen=True, slots=True)
class ToolCall:
    id: str
    name: str
    arguments: str


@dataclass(frozen=True, slots=True)
class ModelReply:
    #: the assistant message, ready to be appended to the history
    message: Message
    tool_calls: list[ToolCall]
    #: prompt plus completion tokens, when the endpoint reports them
    total_tokens: int | None
    #: the answer stopped at ``agent.max_tokens`` (``finish_reason: length``)
    cut: bool = False

    @property
    def text(self) -> str:
        return (self.message.get("content") or "").strip()


def make_reply(content: str | None, calls: list[ToolCall], usage: Any,
               finish_reason: str | None) -> ModelReply:
    """The reply as the loop takes it, from a whole answer or a stream's pieces.
    ``content`` may be None beside ``reasoning_content`` (which is not kept)."""
    message: Message = {"role": "assistant", "content": content or ""}
    if calls:
        message["tool_calls"] = [
            {"id": c.id, "type": "function",
             "function": {"name": c.name, "arguments": _storable(c.arguments)}}
            for c in calls]
    return ModelReply(message, calls, getattr(usage, "total_tokens", None),
                      cut=finish_reason == "length")


def new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:12]}"


def arguments_text(arguments: object) -> str:
    """Tool-call arguments as the JSON text the API specifies; some local servers
    (Ollama among them) give the object itself."""
    if arguments is None:
        return ""
    if isinstance(arguments, str):
        return arguments
    return json.dumps(arguments, ensure_ascii=False)


def _storable(arguments: str) -> str:
    """Arguments as the history keeps them: a JSON object, or ``{}`` when the model's were
    not one (some servers parse past arguments and would refuse every later request; the
    tool's error already told the model what it sent)."""
    try:
        return arguments if isinstance(json.loads(arguments), dict) else "{}"
    except ValueError:
        return "{}"
