"""Server-sent events for the fake OpenAI server: how an answer is cut into chunks and sent.

Kept apart from the server because streaming has its own shape to get right — the
order of deltas OpenAI sends (role, text in pieces, each tool call's id and name and
then its arguments), the finish and usage chunks, ``[DONE]``, pacing, and dropping the
connection as a crashing server does — while the server only decides what to answer.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

__all__ = ["drop", "stream_chunks", "stream_deltas"]

JSON = dict[str, Any]


async def stream_chunks(request: web.Request, deltas: list[JSON], delay: float, *,
                        header: Callable[[], JSON], with_usage: bool,
                        pause: Callable[[float], Awaitable[bool]],
                        ending: tuple[str, JSON] | None = None) -> web.StreamResponse:
    """Send ``deltas`` as chunks under ``header()`` (the completion id and model
    every chunk repeats), ``delay`` seconds apart after the first; then ``ending``
    (finish reason, usage): the finish chunk, the usage chunk when the client asked for
    it (``with_usage``), and ``[DONE]``. No ending (a Cut), or ``pause`` answering False
    (the server stopping) mid-stream: drop the connection instead, as a crashing server
    does."""
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                           "Cache-Control": "no-cache"})
    await response.prepare(request)
    chunk_header = header()

    async def send(chunk: JSON) -> None:
        await response.write(f"data: {json.dumps({**chunk_header, **chunk})}\n\n".encode())

    def choice(delta: JSON, finish_reason: str | None = None) -> JSON:
        chunk: JSON = {"choices": [{"index": 0, "delta": delta, "logprobs": None,
                                    "finish_reason": finish_reason}]}
        return chunk | {"usage": None} if with_usage else chunk

    try:
        for i, delta in enumerate(deltas):
            if i and delay > 0 and not await pause(delay):
                return drop(request, response)
            await send(choice(delta))
        if ending is None:
            return drop(request, response)
        finish_reason, usage = ending
        await send(choice({}, finish_reason))
        if with_usage:
            await send({"choices": [], "usage": usage})
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
    except ConnectionResetError:
        pass  # the client closed the stream early: there is no one left to answer
    return response


def stream_deltas(message: JSON, *, split_tool_calls: bool = True) -> list[JSON]:
    """The deltas that stream ``message``, as OpenAI sends them: role (and any other
    field) first, with its text fields emptied (a null content stays null, as OpenAI's
    does before tool calls); then reasoning and content in pieces; then
    each tool call's id and name, followed by its arguments in pieces — or, not
    ``split_tool_calls``, the tool calls verbatim in one delta, as Ollama sends them."""
    texts = [key for key in ("reasoning_content", "content")
             if isinstance(message.get(key), str)]
    deltas = [{key: "" if key in texts else value
               for key, value in message.items() if key != "tool_calls"}]
    deltas += [{key: piece} for key in texts for piece in _pieces(message[key])]
    if "tool_calls" in message and not split_tool_calls:
        deltas.append({"tool_calls": message["tool_calls"]})
    elif "tool_calls" in message:
        for index, call in enumerate(message["tool_calls"]):
            function = call["function"]
            deltas.append({"tool_calls": [
                {"index": index, "id": call["id"], "type": "function",
                 "function": {"name": function["name"], "arguments": ""}}]})
            deltas += [{"tool_calls": [{"index": index, "function": {"arguments": piece}}]}
                       for piece in _pieces(function["arguments"])]
    return deltas


def drop(request: web.Request, response: web.StreamResponse | None = None,
         ) -> web.StreamResponse:
    """Close the connection at once, mid-answer, as a crashing server does."""
    if request.transport is not None:
        request.transport.abort()
    return response if response is not None else web.Response()


def _pieces(text: str) -> list[str]:
    """``text`` in the pieces a model would stream it in: words with their trailing spaces."""
    return re.findall(r"\S+\s*|\s+", text)
