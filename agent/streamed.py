"""A streamed answer put back together: text as it grows, tool calls from their pieces.

Servers differ in how they cut an answer: OpenAI sends a call's id and name
first and its arguments in pieces under the same ``index``; llama.cpp and
Ollama may send a whole call in one piece, without an id or an index, or with
the arguments as an object. Whatever the cut, the reply built here is the one
the whole answer would have given.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from openai.types.chat import ChatCompletionChunk

from .model_reply import ModelReply, ToolCall, arguments_text, make_reply, new_call_id


@dataclass(slots=True)
class _CallPieces:
    id: str | None = None
    name: str = ""
    arguments: list[str] = field(default_factory=list)


@dataclass(slots=True)
class StreamedAnswer:
    text: str = ""
    finish_reason: str | None = None
    usage: Any = None
    #: chunks read, choices or not (a stream of none is an answer that never came)
    chunks: int = 0
    _calls: dict[int, _CallPieces] = field(default_factory=dict)

    def add(self, chunk: ChatCompletionChunk) -> bool:
        """Take one chunk; True when it added to the text."""
        self.chunks += 1
        if getattr(chunk, "usage", None) is not None:
            self.usage = chunk.usage
        grew = False
        for choice in chunk.choices or []:
            if choice.index not in (0, None):
                continue  # n > 1 is never asked for
            delta = choice.delta
            if delta is not None and delta.content:
                self.text += delta.content
                grew = True
            for piece in (delta.tool_calls or []) if delta is not None else []:
                self._add_call(piece)
            if choice.finish_reason:
                self.finish_reason = choice.finish_reason
        return grew

    def _add_call(self, piece: Any) -> None:
        index = piece.index if isinstance(piece.index, int) else self._index_of(piece)
        call = self._calls.setdefault(index, _CallPieces())
        if piece.id:
            call.id = piece.id
        function = piece.function
        if function is not None:
            if function.name and not call.name:
                call.name = function.name
            if function.arguments is not None:
                call.arguments.append(arguments_text(function.arguments))

    def _index_of(self, piece: Any) -> int:
        """Where a piece without an index goes: the call with its id, else a new call
        when it names one, else the last call."""
        if piece.id is not None:
            for index, call in self._calls.items():
                if call.id == piece.id:
                    return index
        starts = piece.id is not None or (piece.function and piece.function.name)
        if starts or not self._calls:
            return max(self._calls, default=-1) + 1
        return max(self._calls)

    def reply(self) -> ModelReply:
        calls = [ToolCall(c.id or new_call_id(), c.name, "".join(c.arguments))
                 for _, c in sorted(self._calls.items())]
        return make_reply(self.text or None, calls, self.usage, self.finish_reason)
