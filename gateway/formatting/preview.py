"""Markdown still being written, made safe to show: the reply so far as it will look
once it is complete, never its raw markup.

A preview (an edited Telegram or Discord message, the web page's growing bubble) goes
through the same renderer as the final message, after ``preview_markdown`` has dealt
with the block being written:

- an open code fence is closed (its half-typed opening line held back);
- a table's row being typed is held back, and so are pipe lines that are not a table
  yet (a header row waiting for its ``|---|`` line);
- a line that is only a marker so far (``-``, ``##``, ``1.``, ``>``, ``---``) is held
  back: ``text`` then ``-`` would briefly be a heading;
- in the paragraph or heading being written, an open ``**``, ``*``, ``_``, ``~~`` or
  `` ` `` is closed, a delimiter that ends the text is held back, and a link shows
  as its text alone until its target is complete (a ``[`` not closed yet is text).

Whatever comes out, the renderers make balanced markup of it: these rules decide only
what the preview looks like, never whether Telegram can parse it.

``GrowingPreview`` renders a reply that is shown again at every delta (the page's
bubble) without rendering it whole each time: the finished top-level blocks are
rendered once and kept, and only the rest goes through ``preview_markdown`` and the
renderer again.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING

from gateway.formatting.markdown import parse

if TYPE_CHECKING:
    from markdown_it.token import Token

__all__ = ["GrowingPreview", "preview_markdown", "status_markdown"]

#: a line with nothing but block markers yet: its meaning depends on what comes next
_BARE_LINE = re.compile(r"[\s>*+\-#=|`~_\d.)]*")
_LEAVES = frozenset({"inline", "fence", "code_block", "hr"})
_EMPHASIS = "*_~"


def preview_markdown(text: str) -> str:
    """``text``, a reply cut anywhere, as Markdown that shows what it will be."""
    # only the last top-level block is still being written: the rules read it alone
    # (the whole is parsed once to find where it starts; GrowingPreview spares even that)
    tokens = parse(text)
    starts = [t.map[0] for t in tokens if t.level == 0 and t.map is not None]
    if not starts or starts[-1] == 0:
        return _showable(text, tokens)
    head = _offset(text.split("\n"), starts[-1])
    return text[:head] + _showable(text[head:])


def status_markdown(text: str) -> str:
    """A status line (``running `make test`…``) as Markdown that shows it as written:
    what is between its first and last backtick is code, the rest is text (a ``#``, a
    ``*`` or a ``---`` in it is no heading, emphasis or rule)."""
    first, last = text.find("`"), text.rfind("`")
    if first == last:
        return _escaped(text)
    code = text[first + 1:last]
    fence = "`" * (max((len(run) for run in re.findall(r"`+", code)), default=0) + 1)
    pad = " " if code.startswith(("`", " ")) or code.endswith(("`", " ")) else ""
    return (_escaped(text[:first]) + fence + pad + code + pad + fence
            + _escaped(text[last + 1:]))


def _escaped(text: str) -> str:
    return _PUNCTUATION.sub(r"\\\g<0>", text)


#: what a backslash makes literal in Markdown: every ASCII punctuation character
_PUNCTUATION = re.compile(r"[!-/:-@\[-`{-~]")


class GrowingPreview:
    """Previews of one reply as it grows, each rendered as ``render(preview_markdown(
    text))`` would render it, but with the finished top-level blocks rendered once.

    A block is finished at a blank line outside any code fence that is followed by a
    whole line starting a block of its own (not indented, not a list item, which could
    continue a list before it): nothing written after it changes how the text before
    it renders, so the two halves render apart. A reference definition
    (``[x]: url``) changes links anywhere: a text that has one is rendered whole.
    ``render`` must render blocks apart (markdown-it's HTML does), so that the
    rendering of two halves is the rendering of the whole."""

    def __init__(self, render: Callable[[str], str]) -> None:
        self._render = render
        self._head = ""  # the finished blocks, and their rendering
        self._head_html = ""

    def __call__(self, text: str) -> str:
        if _REFERENCE.search(text):
            self._head = self._head_html = ""
            return self._render(preview_markdown(text))
        if not text.startswith(self._head):
            self._head = self._head_html = ""  # started again (a retried call)
        done = len(self._head) + _finished(text[len(self._head):])
        if done > len(self._head):
            self._head_html += self._render(text[len(self._head):done])
            self._head = text[:done]
        return self._head_html + self._render(preview_markdown(text[done:]))


#: a link reference definition: it makes links of ``[x]`` anywhere in the text
_REFERENCE = re.compile(r"(?m)^ {0,3}\[[^\]\n]+\]:")
#: a line that opens or closes a code fence (its indentation at most three spaces)
_FENCE = re.compile(r" {0,3}(`{3,}|~{3,})(.*)")
#: a line that cannot start a block of its own after a blank line: indented (a list
#: item's or a code block's continuation) or a list item (the list before may go on)
#: a table's second line, under its header: | --- | :-: |
_DELIMITER_ROW = re.compile(r" {0,3}\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*")
_CONTINUES = re.compile(r"[ \t]|[-+*](?:[ \t]|$)|\d{1,9}[.)](?:[ \t]|$)")


def _finished(text: str) -> int:
    """The length of the finished blocks at the start of ``text``: up to the last
    whole line that starts a block after a blank line outside any fence (0: none)."""
    done = offset = 0
    fence: str | None = None  # the opening run of the fence the line is in
    blank = False  # the line before was blank (and outside any fence)
    for line in text.split("\n")[:-1]:  # the last line is still being written
        if fence is not None:
            closing = _FENCE.fullmatch(line)
            if (closing and closing[1][0] == fence[0] and len(closing[1]) >= len(fence)
                    and not closing[2].strip(" \t")):
                fence = None
            blank = False
        else:
            if blank and line.strip(" \t") and not _CONTINUES.match(line):
                done = offset
            opening = _FENCE.fullmatch(line)
            if opening and not (opening[1][0] == "`" and "`" in opening[2]):
                fence = opening[1]
            blank = not line.strip(" \t")
        offset += len(line) + 1
    return done


def _showable(text: str, tokens: list[Token] | None = None) -> str:
    """``text``, the block being written, with what cannot be shown yet held back and
    what is left open closed (``tokens``: its parse, when there is one already)."""
    lines = text.split("\n")
    writing = lines[-1]  # the line being written ("" after a newline)
    whole_lines = text[:len(text) - len(writing)]  # the text without it
    if writing and _BARE_LINE.fullmatch(writing):
        return _showable(whole_lines)
    tokens = parse(text) if tokens is None else tokens
    block = _last_leaf(tokens)
    if block is None or block.map is None or not _still_written(block, lines):
        return text
    start = block.map[0]
    if block.type == "fence":
        if writing and start == len(lines) - 1:
            return _showable(whole_lines)  # "```pyth": the language still coming
        if block.level == 0 and not _fence_closed(block, lines):
            return text + ("" if text.endswith("\n") else "\n") + block.markup
        return text
    if block.type != "inline":
        return text
    if _in_table(tokens, block):
        return whole_lines  # the table's whole rows
    pipes = end = len(lines) - (0 if writing else 1)
    while pipes > start and lines[pipes - 1].lstrip().startswith("|"):
        pipes -= 1
    # pipe lines that may become a table's header; ones that have their |---| line and
    # still parse as text never will (a list item's lazy continuation): shown as such
    if pipes < end and not _never_a_table(lines, pipes):
        return _showable(text[:_offset(lines, pipes)])
    shown, closers, in_code = _scan(text, _offset(lines, start))
    if shown is not None:
        return _showable(shown.rstrip(" "))
    if not closers:
        return text
    # a closing * or _ must follow a non-space to close anything
    return (text if in_code else text.rstrip()) + closers


# ---------------------------------------------------------------------- blocks

def _never_a_table(lines: list[str], header: int) -> bool:
    """The pipe lines from ``header`` on have a finished |---| line that fits the header,
    and yet do not parse as a table: more typing will not make them one."""
    if header + 1 >= len(lines) - 1:  # no |---| line yet, or it is still being typed
        return False
    delimiter = lines[header + 1]
    return bool(_DELIMITER_ROW.fullmatch(delimiter)) and (
        _cells(lines[header]) == _cells(delimiter))


def _cells(row: str) -> int:
    return len(row.strip().strip("|").split("|"))


def _last_leaf(tokens: list[Token]) -> Token | None:
    for token in reversed(tokens):
        if token.type in _LEAVES and token.map is not None:
            return token
    return None


def _still_written(block: Token, lines: list[str]) -> bool:
    """Whether ``block`` reaches the end of the text (no blank line has ended it)."""
    assert block.map is not None
    end = block.map[1]
    return end == len(lines) or (end == len(lines) - 1 and lines[-1] == "")


def _in_table(tokens: list[Token], block: Token) -> bool:
    index = tokens.index(block)
    return index > 0 and tokens[index - 1].type in ("th_open", "td_open")


def _fence_closed(fence: Token, lines: list[str]) -> bool:
    assert fence.map is not None
    start, end = fence.map
    if end - 1 <= start or end > len(lines):
        return False
    closing = lines[end - 1].strip()
    char = fence.markup[0]
    return len(closing) >= len(fence.markup) and closing == char * len(closing)


def _offset(lines: list[str], line: int) -> int:
    return sum(len(text) + 1 for text in lines[:line])


# ---------------------------------------------------------------------- inline

def _scan(text: str, start: int) -> tuple[str | None, str, bool]:
    """The inline text from ``start`` read as CommonMark reads it, near enough: what
    to show in its place when the end cannot be shown yet (cut before a delimiter,
    backslash or backtick run at the very end; a link whose target is not complete,
    or a ``[text]`` at the very end that may become one, as its text alone), the
    closers of what is left open, and whether it ends inside a code span. A ``[`` that
    no ``]`` has closed yet is text: it may never be a link (``range [0, 1)``)."""
    brackets: list[tuple[int, int]] = []  # each "[" still open: its start ("!" for an
    # image), where its text starts
    opened: list[tuple[str, int]] = []  # emphasis (or code) still open: character, run
    in_code = False
    i, n = start, len(text)
    while i < n:
        c = text[i]
        if c == "\\":
            if i + 1 == n:
                return text[:i], "", False
            i += 2
            continue
        if c == "`":
            run = _run(text, i)
            if i + run == n:
                return text[:i], "", False
            end = _code_end(text, i + run, run)
            if end is None:
                opened.append(("`", run))  # the rest is code: closed at the end
                in_code = True
                break
            i = end
            continue
        if c in _EMPHASIS:
            run = _run(text, i)
            if i + run == n:
                return text[:i], "", False
            before = text[i - 1] if i > 0 else " "
            after = text[i + run]
            i += run
            if c == "~" and run != 2:
                continue  # strikethrough is two tildes
            can_close = not before.isspace() and not (c == "_" and after.isalnum())
            if can_close and any(char == c for char, _ in opened):
                opened = _close(opened, c, run)
            elif not after.isspace() and not (c == "_" and before.isalnum()):
                opened.append((c, run))  # only _ never opens inside a word
            continue
        if c == "[":
            image = i > start and text[i - 1] == "!"
            brackets.append((i - 1 if image else i, i + 1))
        elif c == "]" and brackets:
            bracket, label = brackets.pop()
            if i + 1 == n:
                return text[:bracket] + text[label:i], "", False  # a link once "(" comes
            if text[i + 1] == "(":
                end = _target_end(text, i + 2)
                if end is None:
                    return text[:bracket] + text[label:i], "", False
                i = end
                continue
        i += 1
    return None, "".join(char * run for char, run in reversed(opened)), in_code


def _close(opened: list[tuple[str, int]], char: str, run: int) -> list[tuple[str, int]]:
    """A closing run of ``char`` ends the innermost openers of that character; those
    opened inside them stay literal, as CommonMark leaves them."""
    while run > 0:
        index = max((k for k, (c, _) in enumerate(opened) if c == char), default=None)
        if index is None:
            break
        length = opened[index][1]
        opened = opened[:index] + ([(char, length - run)] if length > run else [])
        run -= length
    return opened


def _run(text: str, i: int) -> int:
    end = i
    while end < len(text) and text[end] == text[i]:
        end += 1
    return end - i


def _code_end(text: str, i: int, run: int) -> int | None:
    """The index after the backtick run of exactly ``run`` that closes a code span."""
    while True:
        i = text.find("`", i)
        if i < 0:
            return None
        length = _run(text, i)
        if length == run:
            return i + run
        i += length


def _target_end(text: str, i: int) -> int | None:
    """The index after the ``)`` that ends a link target starting at ``i``."""
    depth = 0
    while i < len(text):
        c = text[i]
        if c == "\\":
            i += 2
            continue
        if c == "\n":
            return None if i + 1 == len(text) else i  # no target spans lines: not a link
        if c == "(":
            depth += 1
        elif c == ")":
            if depth == 0:
                return i + 1
            depth -= 1
        i += 1
    return None
