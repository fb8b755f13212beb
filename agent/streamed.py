"""A streamed answer read and put back together: SSE events, text as it grows, tool
calls from their pieces.

The events are read here rather than by the ``openai`` client's stream, which
builds a typed object per chunk — 60 % of a streamed turn's cost in
bench/streaming.py — and hides the ``[DONE]`` that tells a finished answer
from a cut one.

Servers differ in how they cut an answer: OpenAI sends a call's id and name
first and its arguments in pieces under the same ``index``; llama.cpp and
Ollama may send a whole call in one piece, without an id or an index, or with
the arguments as an object. Whatever the cut, the reply built here is the one
the whole answer would have given.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import httpx

from agent.model_reply import ModelReply, ToolCall, arguments_text, make_reply, new_call_id
from gateway.errors import PlatformError


class StreamError(PlatformError):
    """The server put an error in the stream (``{"error": ...}``), mid-answer."""


async def sse_data(response: httpx.Response) -> AsyncIterator[str]:
    """The ``data`` of each server-sent event, as the SSE format joins its lines."""
    data: list[str] = []
    async for line in response.aiter_lines():
        if not line:
            if data:
                yield "\n".join(data)
                data = []
        elif line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))
    if data:
        yield "\n".join(data)


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
    #: the server said ``[DONE]``: the answer is whole
    done: bool = False
    _calls: dict[int, _CallPieces] = field(default_factory=dict)

    def add_event(self, data: str) -> bool:
        """Take one event's data; True when it added to the text."""
        if data.strip() == "[DONE]":
            self.done = True
            return False
        chunk = json.loads(data)
        if not isinstance(chunk, dict):
            raise ValueError(f"a stream event that is a JSON {type(chunk).__name__}")
        if chunk.get("error"):
            error = chunk["error"]
            raise StreamError(str(error.get("message") if isinstance(error, dict) else error))
        return self.add(chunk)

    def add(self, chunk: dict[str, Any]) -> bool:
        self.chunks += 1
        if isinstance(chunk.get("usage"), dict):
            self.usage = SimpleNamespace(**chunk["usage"])
        grew = False
        for choice in chunk.get("choices") or []:
            if choice.get("index") not in (0, None):
                continue  # n > 1 is never asked for
            delta = choice.get("delta") or {}
            if isinstance(delta.get("content"), str) and delta["content"]:
                self.text += delta["content"]
                grew = True
            for piece in delta.get("tool_calls") or []:
                if isinstance(piece, dict):
                    self._add_call(piece)
            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]
        return grew

    def _add_call(self, piece: dict[str, Any]) -> None:
        index = piece.get("index")
        call = self._calls.setdefault(
            index if isinstance(index, int) else self._index_of(piece), _CallPieces())
        if piece.get("id"):
            call.id = piece["id"]
        function = piece.get("function")
        if isinstance(function, dict):
            if function.get("name") and not call.name:
                call.name = function["name"]
            if function.get("arguments") is not None:
                call.arguments.append(arguments_text(function["arguments"]))

    def _index_of(self, piece: dict[str, Any]) -> int:
        """Where a piece without an index goes: the call with its id, else a new call
        when it names one, else the last call."""
        if piece.get("id") is not None:
            for index, call in self._calls.items():
                if call.id == piece["id"]:
                    return index
        function = piece.get("function")
        names = isinstance(function, dict) and bool(function.get("name"))
        if piece.get("id") is not None or names or not self._calls:
            return max(self._calls, default=-1) + 1
        return max(self._calls)

    def reply(self) -> ModelReply:
        calls = [ToolCall(c.id or new_call_id(), c.name, "".join(c.arguments))
                 for _, c in sorted(self._calls.items())]
        return make_reply(self.text or None, calls, self.usage, self.finish_reason)
