"""Markdown as Matrix's ``org.matrix.custom.html``, beside the plain ``body`` every
client shows without HTML.

Only the tags the Matrix spec allows in ``formatted_body`` are made: p, br, b (strong),
i (em), del, code, pre (``<code class="language-x">``), h1–h6, blockquote, ul, ol
(``start``), li, hr, a href, table with thead, tbody, tr, th, td. The agent's raw HTML is
text (the one parser has ``html`` off, so it is escaped), a link is made only to http(s)
and mailto addresses, and an image is its alt text (Matrix shows only ``mxc://`` images).

``@room`` written out would notify everyone in a room for clients that still match the
body: it is broken with a zero-width space, in the HTML and in the body, outside code
too (the body is the Markdown as written). The adapter sends every message with an
empty ``m.mentions`` besides, so it mentions nobody.

Each top-level block is rendered on its own, so a message split between blocks has its
tags balanced in every part; a block longer than a message is split first as Markdown
(the one splitter keeps code blocks closed) and rendered piece by piece.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gateway.formatting.markdown import top_level_blocks
from gateway.formatting.splitter import split_message

if TYPE_CHECKING:
    from markdown_it.token import Token

_INLINE_TAGS = {"strong_open": "<b>", "strong_close": "</b>", "em_open": "<i>",
                "em_close": "</i>", "s_open": "<del>", "s_close": "</del>"}
_BLOCK_TAGS = {"blockquote_open": "<blockquote>", "blockquote_close": "</blockquote>",
               "bullet_list_open": "<ul>", "bullet_list_close": "</ul>",
               "list_item_open": "<li>", "list_item_close": "</li>",
               "table_open": "<table>", "table_close": "</table>",
               "thead_open": "<thead>", "thead_close": "</thead>",
               "tbody_open": "<tbody>", "tbody_close": "</tbody>",
               "tr_open": "<tr>", "tr_close": "</tr>", "th_open": "<th>", "th_close": "</th>",
               "td_open": "<td>", "td_close": "</td>", "ordered_list_close": "</ol>",
               "hr": "<hr>"}
_SAFE_LINK = re.compile(r"^(https?|mailto):", re.IGNORECASE)
#: ``@room`` as a word of its own (``ops@room.example`` is an address, left alone)
_ROOM_MENTION = re.compile(r"(?<![\w.])@(room)\b", re.IGNORECASE)
_ZERO_WIDTH = "\u200b"
_TAG = re.compile(r"<[^>]*>")


@dataclass(frozen=True, slots=True)
class Part:
    """One Matrix message: ``html`` for ``formatted_body``, ``plain`` for ``body``."""

    html: str
    plain: str


def render_parts(text: str, limit: int) -> list[Part]:
    """``text`` as messages whose HTML is at most ``limit`` characters each (the HTML is
    the longer of the two: what a message's size is measured by)."""
    parts: list[Part] = []
    html_parts: list[str] = []
    plain_parts: list[str] = []
    size = 0
    for block_html, block_source in _blocks(text, limit):
        if html_parts and size + len(block_html) > limit:
            parts.append(Part("".join(html_parts), harmless("\n\n".join(plain_parts))))
            html_parts, plain_parts, size = [], [], 0
        html_parts.append(block_html)
        plain_parts.append(block_source)
        size += len(block_html)
    if html_parts:
        parts.append(Part("".join(html_parts), harmless("\n\n".join(plain_parts))))
    if parts or not text.strip():
        return parts
    return [Part(_escape(text), harmless(text))]


def message_parts(text: str, limit: int) -> list[str]:
    """``text`` cut into the Markdown of each message: each renders within ``limit``."""
    return [part.plain for part in render_parts(text, limit)]


def render(text: str) -> str:
    """The whole text as one HTML string (a preview, or a part already cut to fit)."""
    return "".join(block for block, _ in _blocks(text, None))


def harmless(text: str) -> str:
    """Plain text that notifies nobody: ``@room`` broken with a zero-width space."""
    return _ROOM_MENTION.sub(lambda m: f"@{_ZERO_WIDTH}{m.group(1)}", text)


def visible_text(markup: str) -> str:
    """What a reader sees of ``markup``, roughly (tags dropped, entities read)."""
    return html.unescape(_TAG.sub("", markup))


def _blocks(text: str, limit: int | None) -> list[tuple[str, str]]:
    """(html, its Markdown source) for each top-level block of ``text``."""
    out: list[tuple[str, str]] = []
    for block, source in top_level_blocks(text):
        rendered = _Renderer().blocks(block)
        if not rendered:
            continue
        if limit is not None and len(rendered) > limit:
            # one block longer than a message: split its Markdown, render each piece
            pieces = split_message(source, max(16, limit // 3))
            for piece in pieces:
                if piece == source or len(pieces) == 1:
                    out.append((f"<pre>{_escape(harmless(piece))}</pre>", piece))
                else:
                    out.extend(_blocks(piece, limit))
            continue
        out.append((rendered, source))
    return out


class _Renderer:
    def __init__(self) -> None:
        self.out: list[str] = []

    def blocks(self, tokens: list[Token]) -> str:
        for t in tokens:
            kind = t.type
            if kind in _BLOCK_TAGS:
                self.out.append(_BLOCK_TAGS[kind])
            elif kind == "ordered_list_open":
                start = int(t.attrGet("start") or 1)
                self.out.append(f'<ol start="{start}">' if start != 1 else "<ol>")
            elif kind == "heading_open":
                self.out.append(f"<{t.tag}>")
            elif kind == "heading_close":
                self.out.append(f"</{t.tag}>")
            elif kind == "paragraph_open" and not t.hidden:
                self.out.append("<p>")
            elif kind == "paragraph_close" and not t.hidden:
                self.out.append("</p>")
            elif kind == "inline":
                self.out.append(self.inline(t.children or []))
            elif kind in ("fence", "code_block"):
                self._pre(t.content.rstrip("\n"), (t.info or "").split(" ")[0])
        return "".join(self.out)

    def inline(self, children: list[Token]) -> str:
        out: list[str] = []
        links: list[bool] = []  # per open link: whether it became an <a>
        for c in children:
            kind = c.type
            if kind == "text":
                out.append(_escape(harmless(c.content)))
            elif kind in _INLINE_TAGS:
                out.append(_INLINE_TAGS[kind])
            elif kind == "code_inline":
                out.append(f"<code>{_escape(harmless(c.content))}</code>")
            elif kind in ("softbreak", "hardbreak"):
                out.append("<br>")
            elif kind == "link_open":
                href = str(c.attrGet("href") or "")
                safe = bool(_SAFE_LINK.match(href))
                links.append(safe)
                if safe:
                    out.append(f'<a href="{html.escape(href, quote=True)}">')
            elif kind == "link_close":
                if links and links.pop():
                    out.append("</a>")
            elif kind == "image":
                out.append(_escape(harmless(c.content or str(c.attrGet("src") or "image"))))
        return "".join(out)

    def _pre(self, code: str, language: str) -> None:
        body = _escape(harmless(code))
        if language:
            lang = html.escape(re.sub(r"[^\w+#.-]", "", language), quote=True)
            self.out.append(f'<pre><code class="language-{lang}">{body}</code></pre>')
        else:
            self.out.append(f"<pre><code>{body}</code></pre>")


def _escape(text: str) -> str:
    return html.escape(text, quote=False)
