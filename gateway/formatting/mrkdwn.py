"""Markdown as Slack's mrkdwn: ``*bold*``, ``_italic_``, ``~strike~``, code and code
blocks, ``<url|text>`` links; headings become bold lines, lists get bullets or numbers,
quotes ``>``, tables a monospaced block (Slack has none).

Slack reads ``&``, ``<`` and ``>`` as its own markup — ``<!here>``, ``<@U123>``,
``<url|text>`` — so every one the agent writes is escaped (``&amp;``, ``&lt;``,
``&gt;``), which is what Slack asks of a message's text; nothing written can become a
mention or a link the renderer did not make. ``@here``, ``@channel`` and ``@everyone``
written out are no mention without ``link_names`` (never sent), and are broken with a
zero-width space besides, outside code.

Each top-level block is rendered on its own, so a message split between blocks keeps
its marks balanced in every part; a block longer than a message is cut by the one
splitter, which keeps code blocks closed in each part.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from gateway.formatting.markdown import block_end, monospace_table, parse, plain_inline, table_rows
from gateway.formatting.splitter import split_message

if TYPE_CHECKING:
    from markdown_it.token import Token

#: Slack truncates a message's text past 40,000 characters and asks that it be kept
#: to 4,000: longer ones are hard to read and may be cut in notifications and threads
MESSAGE_LIMIT = 4000
_INLINE_MARKS = {"strong_open": "*", "strong_close": "*", "em_open": "_", "em_close": "_",
                 "s_open": "~", "s_close": "~"}
_SAFE_LINK = re.compile(r"^(https?|mailto):", re.IGNORECASE)
#: ``@here`` as a word of its own (``ops@here.example`` is an address, left alone)
_MASS_MENTION = re.compile(r"(?<![\w.])@(channel|here|everyone)\b", re.IGNORECASE)
_ZERO_WIDTH = "\u200b"


def message_parts(text: str, limit: int = MESSAGE_LIMIT) -> list[str]:
    """The agent's Markdown as Slack messages of at most ``limit`` characters each."""
    parts: list[str] = []
    current: list[str] = []
    size = 0
    for block in _blocks(text):
        pieces = [block] if len(block) <= limit else split_message(block, limit)
        for piece in pieces:
            if current and size + 2 + len(piece) > limit:
                parts.append("\n\n".join(current))
                current, size = [], 0
            current.append(piece)
            size += len(piece) + (2 if size else 0)
    if current:
        parts.append("\n\n".join(current))
    return parts or ([escape(text)] if text.strip() else [])


def render(text: str) -> str:
    """The whole text as one mrkdwn string (a preview, cut to one message by its caller)."""
    return "\n\n".join(_blocks(text))


def escape(text: str) -> str:
    """Text as Slack shows it literally: its three control characters as entities."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def unescape(text: str) -> str:
    """What Slack sends of a person's text, back as it was typed."""
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


def _words(text: str) -> str:
    """Text outside code: escaped, and no ``@here`` a reader could take for a mention."""
    return _MASS_MENTION.sub(lambda m: f"@{_ZERO_WIDTH}{m.group(1)}", escape(text))


def _blocks(text: str) -> list[str]:
    tokens = parse(text)
    out: list[str] = []
    i = 0
    while i < len(tokens):
        start = i
        i = block_end(tokens, i)
        rendered = _Renderer().blocks(tokens[start:i]).strip("\n")
        if rendered.strip():
            out.append(rendered)
    return out


class _Renderer:
    def __init__(self) -> None:
        self.out: list[str] = []
        self.lists: list[list[int]] = []  # per open list: [next number] or [] (bullets)
        self.quotes: list[int] = []  # per open quote: where its text starts in ``out``

    def blocks(self, tokens: list[Token]) -> str:
        i = 0
        while i < len(tokens):
            t = tokens[i]
            kind = t.type
            if kind == "table_open":
                rows, i = table_rows(tokens, i)
                self._code(monospace_table(rows))
                continue
            if kind == "heading_open":
                inline = tokens[i + 1]
                self._line(f"*{_words(plain_inline(inline))}*\n\n")
                i += 3  # the heading's inline and its close
                continue
            if kind == "paragraph_close":
                self.out.append("\n" if self.lists else "\n\n")
            elif kind == "inline":
                self._line(self.inline(t.children or []))
            elif kind in ("fence", "code_block"):
                self._code(t.content.rstrip("\n"))
            elif kind == "bullet_list_open":
                self.lists.append([])
            elif kind == "ordered_list_open":
                self.lists.append([int(t.attrGet("start") or 1)])
            elif kind in ("bullet_list_close", "ordered_list_close"):
                self.lists.pop()
                if not self.lists:
                    self.out.append("\n")
            elif kind == "list_item_open":
                self._line("    " * (len(self.lists) - 1) + self._marker())
            elif kind == "blockquote_open":
                self.quotes.append(len(self.out))
            elif kind == "blockquote_close":
                self._quote(self.quotes.pop())
            elif kind == "hr":
                self._line("———\n\n")
            i += 1
        return "".join(self.out)

    def inline(self, children: list[Token]) -> str:
        out: list[str] = []
        links: list[tuple[str, int] | None] = []  # per open link: its target, text start
        for c in children:
            kind = c.type
            if kind == "text":
                out.append(_words(c.content))
            elif kind in _INLINE_MARKS:
                out.append(_INLINE_MARKS[kind])
            elif kind == "code_inline":
                out.append(f"`{escape(c.content)}`")
            elif kind in ("softbreak", "hardbreak"):
                out.append("\n")
            elif kind == "link_open":
                href = str(c.attrGet("href") or "")
                links.append((href, len(out)) if _SAFE_LINK.match(href) else None)
            elif kind == "link_close":
                link = links.pop() if links else None
                if link is not None:
                    href, start = link
                    label = "".join(out[start:])
                    del out[start:]
                    out.append(_link(href, label))
            elif kind == "image":
                out.append(_words(c.content or str(c.attrGet("src") or "image")))
        return "".join(out)

    def _marker(self) -> str:
        numbers = self.lists[-1]
        if not numbers:
            return "• "
        numbers[0] += 1
        return f"{numbers[0] - 1}. "

    def _code(self, code: str) -> None:
        # Slack shows a language tag as the code's first line: none is written
        self._line(f"```\n{escape(code)}\n```\n\n")

    def _line(self, text: str) -> None:
        self.out.append(text)

    def _quote(self, start: int) -> None:
        """What was rendered since ``start`` as a quote: Slack's quote is a line's ``>``."""
        quoted = "".join(self.out[start:]).strip("\n")
        del self.out[start:]
        self.out.append("\n".join(f"> {line}" if line else ">"
                                   for line in quoted.split("\n")) + "\n\n")


def _link(href: str, label: str) -> str:
    """``<url|text>``: the target escaped as Slack's own links are (``&amp;``) and its
    delimiters percent-encoded, the text as rendered (a text that is the target itself
    shows as the bare ``<url>``)."""
    target = (href.replace("&", "&amp;").replace("|", "%7C").replace("<", "%3C")
              .replace(">", "%3E"))
    shown = label.replace("|", "\u2223")
    if not shown or shown == escape(href) or shown == _words(href):
        return f"<{target}>"
    return f"<{target}|{shown}>"
