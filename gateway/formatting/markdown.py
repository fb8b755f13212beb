"""The one Markdown parser: CommonMark with tables and strikethrough, raw HTML off.

Raw HTML in the agent's text (or in a job's output it quotes) is text, never
markup: with ``html`` off the parser escapes it, and links are checked by
markdown-it's ``validateLink`` (no ``javascript:``, ``vbscript:``, ``file:``).
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import lru_cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from markdown_it import MarkdownIt
    from markdown_it.token import Token


def new_parser() -> MarkdownIt:
    """A parser of our dialect; markdown-it is imported with the first (about 1 MB
    resident that an idle daemon, which has not replied yet, does not hold:
    bench/idle_rss.py)."""
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark", {"html": False, "breaks": True}).enable(
        ["table", "strikethrough"])


@lru_cache(maxsize=1)
def parser() -> MarkdownIt:
    """The shared parser, for token streams (renderers that add rules make their own)."""
    return new_parser()


def parse(text: str) -> list[Token]:
    return parser().parse(text)


def block_end(tokens: list[Token], i: int) -> int:
    """The index after the top-level block starting at ``tokens[i]``."""
    if tokens[i].nesting == 1:
        depth = 0
        while True:
            depth += tokens[i].nesting
            i += 1
            if depth == 0:
                return i
    return i + 1


def top_level_blocks(text: str) -> Iterator[tuple[list[Token], str]]:
    """Each top-level block of ``text``: its tokens and its Markdown source lines (what
    a renderer splits again when one block is longer than a message)."""
    tokens = parse(text)
    lines = text.split("\n")
    i = 0
    while i < len(tokens):
        start = i
        i = block_end(tokens, i)
        token = tokens[start]
        yield tokens[start:i], ("\n".join(lines[token.map[0]:token.map[1]]) if token.map
                                else "")


def table_rows(tokens: list[Token], start: int) -> tuple[list[list[str]], int]:
    """The cells of the table opening at ``tokens[start]`` as plain text, and the index
    after its ``table_close``."""
    rows: list[list[str]] = []
    i = start + 1
    while tokens[i].type != "table_close":
        token = tokens[i]
        if token.type == "tr_open":
            rows.append([])
        elif token.type == "inline" and rows:
            rows[-1].append(plain_inline(token))
        i += 1
    return rows, i + 1


def plain_inline(token: Token, newline: str = " ") -> str:
    """An inline token's text without its markup (a table cell, a heading); a line
    break in it becomes ``newline``."""
    out = []
    for child in token.children or []:
        if child.type in ("text", "code_inline"):
            out.append(child.content)
        elif child.type in ("softbreak", "hardbreak"):
            out.append(newline)
        elif child.type == "image":
            out.append(child.content or "image")
    return "".join(out)


def plain_text(text: str) -> str:
    """Markdown as the words a person reads, without its marks (a sidebar's last line,
    a title): a line for each block and each line break (the page shows them as
    breaks), a table's row on a line, code as it is written. Blank lines are dropped."""
    tokens = parse(text)
    blocks: list[str] = []
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if token.type == "table_open":
            rows, i = table_rows(tokens, i)
            blocks.extend(" | ".join(row) for row in rows)
            continue
        if token.type == "inline":
            blocks.append(plain_inline(token, newline="\n"))
        elif token.type in ("fence", "code_block"):
            blocks.append(token.content)
        i += 1
    lines = "\n".join(blocks).split("\n")
    return "\n".join(line.rstrip() for line in lines if line.strip())


def monospace_table(rows: list[list[str]]) -> str:
    """A table as aligned columns, for platforms without tables."""
    if not rows:
        return ""
    width = max(len(r) for r in rows)
    rows = [r + [""] * (width - len(r)) for r in rows]
    sizes = [max(len(r[c]) for r in rows) for c in range(width)]
    lines = [" | ".join(cell.ljust(sizes[c]) for c, cell in enumerate(r)).rstrip()
             for r in rows]
    lines.insert(1, "-+-".join("-" * s for s in sizes))
    return "\n".join(lines)
