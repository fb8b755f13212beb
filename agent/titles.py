"""A conversation's name, written by the model after its first exchange
(``sessions.auto_title``), unless a person named it first.

One small request of its own — the system prompt, then the exchange as one user
message — after the answer went out, so nobody waits for it. What comes back is cut to
a title's size and kept only while the session has no title: a person's ``/title``
(or the web page's rename) is never overwritten, before or after.
"""

from __future__ import annotations

import structlog

from agent.model_client import ModelClient
from gateway.messages.conversations import TITLE_CHARS

log = structlog.get_logger(__name__)

TITLE_PROMPT = (
    "You name conversations. Given the first exchange of a chat, answer with a title of "
    "at most six words that says what it is about. No quotes, no full stop, nothing else.")
#: how much of each side of the exchange the model is shown
EXCHANGE_CHARS = 2000


async def model_title(client: ModelClient, said: str, answered: str) -> str | None:
    """The model's title for an exchange; None when it gave none or could not be asked
    (logged: a missing title is not the turn's failure)."""
    try:
        reply = await client.complete([
            {"role": "system", "content": TITLE_PROMPT},
            {"role": "user", "content": f"User: {said[:EXCHANGE_CHARS]}\n\n"
                                        f"Assistant: {answered[:EXCHANGE_CHARS]}"}])
    except Exception as exc:
        log.info("auto_title_failed", error=str(exc))
        return None
    return clean_title(reply.text or "")


def clean_title(text: str) -> str | None:
    """A model's answer as a title: its first line, without quotes or a closing full
    stop, one space between words, at most :data:`TITLE_CHARS`."""
    lines = [line for line in text.strip().splitlines() if line.strip()]
    if not lines:
        return None
    line = " ".join(lines[0].split()).strip("\"'“”‘’`*# ").removeprefix("Title:").strip()
    line = line.rstrip(".").strip()
    if not line:
        return None
    return line if len(line) <= TITLE_CHARS else line[:TITLE_CHARS - 1] + "…"
