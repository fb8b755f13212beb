"""What is sent to the model: the history in the shape every common chat template takes.

The strictest templates shipped with llama.cpp (Mistral-Nemo, Gemma-2 and
others) refuse a request — HTTP 400, "conversation roles must alternate" —
unless it has at most one ``system`` message, first, and then user and
assistant turns alternating, counting only assistant messages without tool
calls (a tool round sits between a user turn and the assistant's answer). A
history can hold shapes they refuse: summaries and notices stored as system
messages by older versions, two user turns in a row (a message after a turn
cut short, a notice beside user input), a tool round with no answer after it.
Rather than trust every writer of the history, the request is built here, from
whatever the store holds, in the one shape they all accept.
"""

from __future__ import annotations

import base64
from pathlib import Path

from agent.history import NOTICE_MARK, Message, content_text

#: said for the assistant where a turn ended without its answer (cut short, failed)
NO_ANSWER = "(no answer: that turn was cut short)"
#: said for the user where the history would otherwise open with the assistant
CONTINUED = "(continuing the conversation)"


def wire_messages(system: str, history: list[Message], *, vision: bool = False
                  ) -> list[Message]:
    """One ``system`` message (``system`` plus any summaries in the history), then the
    history with roles alternating; tool results stay right after their call.

    Images people sent are kept in the history by path; ``vision`` gives the model the
    latest message's images as image input, and every other image as a line saying
    where it is (a conversation does not resend every picture on every request)."""
    systems = [system] if system else []
    wire = _Wire()
    for message in history:
        role = message.get("role")
        content = message.get("content")
        if role in ("system", "developer"):
            if isinstance(content, str) and content.startswith(NOTICE_MARK):
                wire.user(content)  # a notice stored the old way
            elif content:
                systems.append(_text(content))
        elif role == "user":
            wire.user(content)
        elif role == "assistant":
            wire.assistant(message)
        elif role == "tool":
            wire.tool(message)
    wire.close_round()
    head = [{"role": "system", "content": "\n\n".join(systems)}] if systems else []
    return head + _with_images(wire.out, vision)


class _Wire:
    def __init__(self) -> None:
        self.out: list[Message] = []
        self.unanswered: list[str] = []  # the last tool round's calls without a result

    def user(self, content: object) -> None:
        self.close_round()
        out = self.out
        if out and out[-1].get("role") == "tool":
            out.append({"role": "assistant", "content": NO_ANSWER})
        if out and out[-1].get("role") == "user":
            before = out[-1].get("content")
            if isinstance(before, list) or isinstance(content, list):
                merged: object = [*_parts(before), {"type": "text", "text": "\n\n"},
                                  *_parts(content)]
            else:
                merged = f"{_text(before)}\n\n{_text(content)}"
            out[-1] = {"role": "user", "content": merged}
        else:
            out.append({"role": "user",
                        "content": content if isinstance(content, list) else _text(content)})

    def assistant(self, message: Message) -> None:
        self.close_round()
        out = self.out
        if not out:
            out.append({"role": "user", "content": CONTINUED})
        last = out[-1]
        if last.get("role") == "assistant":
            # two answers in a row are one message (a tool round may hang off the second)
            message = {**message, "content": _join(last.get("content"), message.get("content"))}
            out.pop()
        out.append(message)
        self.unanswered = [c.get("id") for c in message.get("tool_calls") or ()]

    def tool(self, message: Message) -> None:
        call_id = message.get("tool_call_id")
        if call_id in self.unanswered:
            self.unanswered.remove(call_id)
            self.out.append(message)
        # else: a result with no call right before it; no template takes it

    def close_round(self) -> None:
        """Every call of the last round gets a result before anything else is said."""
        for call_id in self.unanswered:
            self.out.append({"role": "tool", "tool_call_id": call_id,
                             "content": '{"error": "no result was recorded"}'})
        self.unanswered = []


def _parts(content: object) -> list[dict[str, object]]:
    if isinstance(content, list):
        return [p for p in content if isinstance(p, dict)]
    return [{"type": "text", "text": _text(content)}]


def _with_images(out: list[Message], vision: bool) -> list[Message]:
    """User content parts as the endpoint takes them: the last images inline (with
    ``vision``), other images as text, and all-text parts joined into one string."""
    # only the turn under way sees its images: the last user message (a later turn's
    # request carries an earlier picture as the line saying where it is)
    last = max((i for i, m in enumerate(out) if m.get("role") == "user"), default=-1)
    for i, message in enumerate(out):
        parts = _listed(message)
        if not parts:
            continue
        shaped: list[dict[str, object]] = []
        for part in parts:
            if part.get("type") != "image_file":
                shaped.append(part)
            elif vision and i == last and (url := image_url(part)) is not None:
                shaped.append({"type": "image_url", "image_url": {"url": url}})
            else:
                shaped.append({"type": "text",
                               "text": f"(an image was attached here: {part.get('path')})"})
        if all(p.get("type") == "text" for p in shaped):
            out[i] = {**message, "content": "".join(str(p.get("text", "")) for p in shaped)}
        else:
            out[i] = {**message, "content": shaped}
    return out


def _listed(message: Message) -> list[dict[str, object]]:
    content = message.get("content")
    return [p for p in content if isinstance(p, dict)] if isinstance(content, list) else []


#: what every vision endpoint takes, by the file's first bytes (not the sender's word)
_IMAGE_MAGIC = ((b"\x89PNG\r\n\x1a\n", "image/png"), (b"\xff\xd8\xff", "image/jpeg"),
                (b"GIF87a", "image/gif"), (b"GIF89a", "image/gif"))
MAX_IMAGE_BYTES = 10 * 1024 * 1024


def image_url(part: dict[str, object]) -> str | None:
    """An image file as a data URL; None when it cannot be read any more, is larger
    than endpoints take, or is not PNG, JPEG, GIF or WebP."""
    path = Path(str(part.get("path")))
    try:
        if path.stat().st_size > MAX_IMAGE_BYTES:
            return None
        data = path.read_bytes()
    except OSError:
        return None
    mime = next((m for magic, m in _IMAGE_MAGIC if data.startswith(magic)), None)
    if mime is None and data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        mime = "image/webp"
    if mime is None:
        return None
    return f"data:{mime};base64,{base64.b64encode(data).decode()}"


def _join(a: object, b: object) -> str:
    return "\n\n".join(t for t in (_text(a), _text(b)) if t)


_text = content_text
