"""Markdown as Telegram's HTML: the tags its ``parse_mode: HTML`` takes, the rest escaped.

Telegram accepts b, i, u, s, code, pre (with ``<code class="language-x">``),
a href and blockquote; headings become bold lines, lists get bullets or
numbers, tables become a monospaced block. Each block is rendered on its own,
so a message split between blocks has balanced tags in every part, and a
block longer than a message is split first as Markdown and rendered part by
part.
"""

from __future__ import annotations

import html
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, TypeVar

from gateway.formatting.markdown import (
    monospace_table,
    table_rows,
    top_level_blocks,
)
from gateway.formatting.splitter import split_message, utf16_len

if TYPE_CHECKING:
    from markdown_it.token import Token

_INLINE_TAGS = {"strong_open": "<b>", "strong_close": "</b>", "em_open": "<i>",
                "em_close": "</i>", "s_open": "<s>", "s_close": "</s>"}
_SAFE_LINK = re.compile(r"^(https?|tg|mailto):", re.IGNORECASE)
_TAG = re.compile(r"<[^>]*>")


@dataclass(frozen=True, slots=True)
class Part:
    """One Telegram message: ``html`` to send, ``plain`` if Telegram cannot parse it."""

    html: str
    plain: str


def render_parts(text: str, limit: int = 4096) -> list[Part]:
    """``text`` as messages of at most ``limit`` visible characters (UTF-16 units)."""
    blocks = _blocks(text, limit)
    parts: list[Part] = []
    html_parts: list[str] = []
    plain_parts: list[str] = []
    size = 0
    for block_html, block_plain in blocks:
        visible = utf16_len(visible_text(block_html))
        if html_parts and size + 2 + visible > limit:
            parts.append(Part("\n\n".join(html_parts), "\n\n".join(plain_parts)))
            html_parts, plain_parts, size = [], [], 0
        html_parts.append(block_html)
        plain_parts.append(block_plain)
        size += visible + (2 if size else 0)
    if html_parts:
        parts.append(Part("\n\n".join(html_parts), "\n\n".join(plain_parts)))
    return parts or [Part(html.escape(text, quote=False), text)]


def message_parts(text: str, limit: int = 4096) -> list[str]:
    """``text`` cut into the Markdown of each message: each renders within ``limit``."""
    return [part.plain for part in render_parts(text, limit)]


_T = TypeVar("_T")
_T_co = TypeVar("_T_co", covariant=True)


class TextRequest(Protocol[_T_co]):
    """A Telegram request given its text (``sendMessage``, ``editMessageText``)."""

    def __call__(self, *, text: str, parse_mode: str | None) -> Awaitable[_T_co]: ...


@dataclass(slots=True)
class HtmlOrPlain:
    """One message's text as Telegram is sent it, the one rule for every message: its
    HTML, and its plain text when Telegram cannot parse that HTML (a message is never
    lost to its formatting). ``markup`` is None once refused, so a retry of the same
    request, or the caller's next one, goes plain at once."""

    markup: str | None
    plain: str

    async def send(self, request: TextRequest[_T], admit: Callable[[], Awaitable[None]]
                   ) -> _T:
        """``request``, admitted by flood control by the caller; the plain retry after a
        refusal is a request of its own, admitted with ``admit`` first."""
        if self.markup is not None:
            try:
                return await request(text=self.markup, parse_mode="HTML")
            except Exception as exc:  # the request's own error: BadRequest, or the caller's
                if not cannot_parse(str(exc)):
                    raise
                self.markup = None
            await admit()
        return await request(text=self.plain, parse_mode=None)


def cannot_parse(error: str) -> bool:
    """Telegram's answer to HTML it cannot read."""
    return "can't parse entities" in error.lower() or "can't find end tag" in error.lower()


def plain_fallback(source: str, limit: int = 4096) -> str:
    """A part as plain text, when its HTML was refused: its Markdown as written, or
    only what it shows when the Markdown (long link targets) would not fit."""
    if utf16_len(source) <= limit:
        return source
    shown = visible_text(render(source))
    while utf16_len(shown) > limit:
        shown = shown[:max(1, len(shown) - (utf16_len(shown) - limit))]
    return shown


def render(text: str) -> str:
    """The whole text as one HTML string (a preview, which is cut to one message)."""
    return "\n\n".join(block for block, _ in _blocks(text, None))


def visible_text(markup: str) -> str:
    """What a user sees of ``markup``: as Telegram counts a message's length."""
    return html.unescape(_TAG.sub("", markup))


def _blocks(text: str, limit: int | None) -> list[tuple[str, str]]:
    """(html, its Markdown source) for each top-level block of ``text``."""
    out: list[tuple[str, str]] = []
    for block, source in top_level_blocks(text):
        rendered = _Renderer().blocks(block).strip("\n")
        if not rendered:
            continue
        if limit is not None and utf16_len(visible_text(rendered)) > limit - 16:
            # one block longer than a message: split its Markdown, render each piece
            for piece in split_message(source, max(16, (limit - 16) * 3 // 4), utf16_len):
                out.extend(_blocks(piece, limit) if piece != source
                           else [(html.escape(piece, quote=False), piece)])
            continue
        out.append((rendered, source))
    return out


class _Renderer:
    def __init__(self) -> None:
        self.out: list[str] = []
        self.lists: list[list[int]] = []  # per open list: [next number] or [] (bullets)

    def blocks(self, tokens: list[Token]) -> str:
        i = 0
        while i < len(tokens):
            t = tokens[i]
            kind = t.type
            if kind == "table_open":
                rows, i = table_rows(tokens, i)
                self._pre(monospace_table(rows), "")
                continue
            if kind == "heading_open":
                self.out.append("<b>")
            elif kind == "heading_close":
                self.out.append("</b>\n\n")
            elif kind == "paragraph_close":
                self.out.append("\n" if self.lists else "\n\n")
            elif kind == "inline":
                self.out.append(self.inline(t.children or []))
            elif kind in ("fence", "code_block"):
                self._pre(t.content.rstrip("\n"), (t.info or "").split(" ")[0])
            elif kind == "bullet_list_open":
                self.lists.append([])
            elif kind == "ordered_list_open":
                self.lists.append([int(t.attrGet("start") or 1)])
            elif kind in ("bullet_list_close", "ordered_list_close"):
                self.lists.pop()
                if not self.lists:
                    self.out.append("\n")
            elif kind == "list_item_open":
                self.out.append("  " * (len(self.lists) - 1) + self._marker())
            elif kind == "blockquote_open":
                self.out.append("<blockquote>")
            elif kind == "blockquote_close":
                self._trim()
                self.out.append("</blockquote>\n\n")
            elif kind == "hr":
                self.out.append("———\n\n")
            i += 1
        return "".join(self.out)

    def inline(self, children: list[Token]) -> str:
        out: list[str] = []
        links: list[bool] = []  # per open link: whether it became an <a>
        for c in children:
            kind = c.type
            if kind == "text":
                out.append(_escape(c.content))
            elif kind in _INLINE_TAGS:
                out.append(_INLINE_TAGS[kind])
            elif kind == "code_inline":
                out.append(f"<code>{_escape(c.content)}</code>")
            elif kind in ("softbreak", "hardbreak"):
                out.append("\n")
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
                out.append(_escape(c.content or str(c.attrGet("src") or "image")))
        return "".join(out)

    def _marker(self) -> str:
        numbers = self.lists[-1]
        if not numbers:
            return "• "
        numbers[0] += 1
        return f"{numbers[0] - 1}. "

    def _pre(self, code: str, language: str) -> None:
        body = _escape(code)
        if language:
            lang = html.escape(language, quote=True)
            self.out.append(f'<pre><code class="language-{lang}">{body}</code></pre>\n\n')
        else:
            self.out.append(f"<pre>{body}</pre>\n\n")

    def _trim(self) -> None:
        if self.out:
            self.out[-1] = self.out[-1].rstrip("\n")


def _escape(text: str) -> str:
    return html.escape(text, quote=False)
