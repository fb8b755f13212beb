"""What Telegram makes of a text sent with a parse mode: the text a user sees and its
entities, or the Bot API's "can't parse entities" answer.

Kept apart from the messages because it is a parser with rules of its own, and the one
place the fake must be as strict as Telegram: a gateway that escapes too little works
against a lenient fake and fails in production. HTML follows tdlib's ``parse_html``
(``td/telegram/MessageEntity.cpp``), which the Bot API server runs: it walks the UTF-8
bytes, so error offsets are byte offsets; only the tags below are known; ``&lt;``,
``&gt;``, ``&amp;``, ``&quot;`` and numeric references are decoded, while any other
``&`` stays literal text (tdlib accepts a bare ``&``, though the docs ask to escape
it); a ``<`` that does not start a known tag is an error. Markdown modes are not
parsed: their text counts as sent.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from tests.fakes.telegram_api import ApiError

__all__ = ["Rendered", "auto_entities", "parse_html", "render", "utf16_len"]

JSON = dict[str, Any]

PARSE_MODES = frozenset({"html", "markdown", "markdownv2"})

#: the start tags tdlib knows (anything else is "Unsupported start tag")
_TAGS = frozenset({"a", "b", "strong", "i", "em", "s", "strike", "del", "u", "ins",
                   "tg-spoiler", "tg-emoji", "span", "pre", "code", "blockquote"})
_SIMPLE = {"b": "bold", "strong": "bold", "i": "italic", "em": "italic", "u": "underline",
           "ins": "underline", "s": "strikethrough", "strike": "strikethrough",
           "del": "strikethrough", "tg-spoiler": "spoiler", "span": "spoiler"}
#: tdlib's sort order for entities starting at the same offset with the same length
_PRIORITY = {"blockquote": 0, "expandable_blockquote": 0, "pre": 10, "code": 20,
             "text_link": 49, "text_mention": 49, "bold": 90, "italic": 91,
             "underline": 92, "strikethrough": 93, "spoiler": 94, "custom_emoji": 99}
_NAMED = {b"lt": "<", b"gt": ">", b"amp": "&", b"quot": '"'}
_SPACE = frozenset(b" \t\r\n\v\0")  # tdlib's is_space; the NUL is the end of the text
_LINK_SCHEMES = ("http://", "https://", "tg://", "ton://", "ftp://")


@dataclass(frozen=True)
class Rendered:
    """A text as Telegram stores it: what the user sees, and its entities."""

    text: str
    entities: list[JSON] = field(default_factory=list)


def utf16_len(text: str) -> int:
    """Length of ``text`` in UTF-16 code units, the unit Telegram counts in."""
    return len(text.encode("utf-16-le")) // 2


def auto_entities(text: str) -> list[JSON]:
    """The entities Telegram finds in a user's plain text: bot_command for a leading
    ``/cmd[@bot]``, mention for each ``@name``."""
    entities: list[JSON] = []
    command = re.match(r"/\w+(@\w+)?", text)
    if command:
        entities.append({"type": "bot_command", "offset": 0,
                         "length": utf16_len(command.group())})
    for mention in re.finditer(r"(?<![\w/@])@\w{3,}", text):
        if command and mention.start() < command.end():
            continue
        entities.append({"type": "mention", "offset": utf16_len(text[:mention.start()]),
                         "length": utf16_len(mention.group())})
    return entities


class _ParseError(Exception):
    """A reason tdlib gives, which the Bot API prefixes with "can't parse entities"."""


def render(text: str, parse_mode: str | None) -> Rendered:
    """``text`` as Telegram shows it under ``parse_mode``; raises the Bot API's error."""
    mode = (parse_mode or "").lower()
    if mode and mode not in PARSE_MODES:
        raise ApiError(400, "Bad Request: unsupported parse_mode")
    if mode != "html":
        return Rendered(text)
    try:
        return parse_html(text)
    except _ParseError as exc:
        raise ApiError(400, f"Bad Request: can't parse entities: {exc}") from None


def parse_html(markup: str) -> Rendered:
    """Telegram's HTML: the visible text and its entities (offsets in UTF-16 units)."""
    return _HtmlParser(markup.encode("utf-8")).parse()


@dataclass
class _Open:
    tag: str
    argument: str
    utf16_offset: int
    result_pos: int  # where its text starts in the output bytes


class _HtmlParser:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.out = bytearray()
        self.utf16 = 0
        self.entities: list[JSON] = []
        self.stack: list[_Open] = []
        self.surrogate = False

    def at(self, i: int) -> int:
        """The byte at ``i``; 0 past the end, as tdlib reads its NUL-terminated string."""
        return self.data[i] if i < len(self.data) else 0

    def parse(self) -> Rendered:
        i = 0
        while i < len(self.data):
            c = self.data[i]
            if c == ord("&"):
                code, end = self._reference(i)
                if code:
                    self._append_code(code)
                    i = end
                    continue
            if c != ord("<"):
                if c & 0xC0 != 0x80:  # the first byte of a character
                    self.utf16 += 2 if c >= 0xF0 else 1
                self.out.append(c)
                i += 1
                continue
            i = self._end_tag(i) if self.at(i + 1) == ord("/") else self._start_tag(i)
        if self.stack:
            raise _ParseError("Can't find end tag corresponding to start tag "
                              f'"{self.stack[-1].tag}"')
        if self.surrogate:
            raise _ParseError("Text contains invalid Unicode characters after decoding "
                              "HTML entities, check for unmatched surrogate code units")
        for entity in self.entities:
            entity.pop("_language", None)  # a lone <code class="language-x"> is plain code
        self.entities.sort(key=lambda e: (e["offset"], -e["length"], _PRIORITY[e["type"]]))
        return Rendered(self.out.decode("utf-8"), self.entities)

    # ------------------------------------------------------------------ tags

    def _start_tag(self, begin: int) -> int:
        i = begin + 1
        while self.at(i) not in _SPACE and self.at(i) != ord(">"):
            i += 1
        if self.at(i) == 0:
            raise _ParseError(f"Unclosed start tag at byte offset {begin}")
        tag = self._lower(begin + 1, i)
        if tag not in _TAGS:
            raise _ParseError(f'Unsupported start tag "{tag}" at byte offset {begin}')
        argument = ""
        while self.at(i) != ord(">"):
            i = self._skip_space(i)
            if self.at(i) == ord(">"):
                break
            name_begin = i
            while self.at(i) not in _SPACE and self.at(i) not in b"=>/\"'":
                i += 1
            name = self.data[name_begin:i].decode("utf-8", "replace")
            if not name:
                raise _ParseError(f'Empty attribute name in the tag "{tag}" at byte offset '
                                  f"{begin}")
            i = self._skip_space(i)
            if self.at(i) != ord("="):
                if self.at(i) == 0:
                    raise _ParseError(f'Unclosed start tag "{tag}" at byte offset {begin}')
                if tag == "blockquote" and name == "expandable":
                    argument = "1"
                continue
            i = self._skip_space(i + 1)
            if self.at(i) == 0:
                raise _ParseError(f'Unclosed start tag "{tag}" at byte offset {begin}')
            value, i = self._attribute_value(i)
            if self.at(i) == 0:
                raise _ParseError(f"Unclosed start tag at byte offset {begin}")
            argument = _argument(tag, name, value, argument)
        if tag == "span" and argument != "spoiler":
            raise _ParseError(f'Tag "span" must have class "tg-spoiler" at byte offset {begin}')
        self.stack.append(_Open(tag, argument, self.utf16, len(self.out)))
        return i + 1

    def _attribute_value(self, i: int) -> tuple[str, int]:
        """A name token (lower-cased) or a quoted string with its references decoded."""
        quote = self.at(i)
        if quote not in (ord('"'), ord("'")):
            begin = i
            while chr(self.at(i)).isascii() and (chr(self.at(i)).isalnum()
                                                  or self.at(i) in b".-"):
                i += 1
            if self.at(i) not in _SPACE and self.at(i) != ord(">"):
                raise _ParseError(f"Unexpected end of name token at byte offset {begin}")
            return self._lower(begin, i), i
        i += 1
        value = bytearray()
        while self.at(i) != quote and self.at(i) != 0:
            if self.at(i) == ord("&"):
                code, end = self._reference(i)
                if code:
                    value += chr(code).encode("utf-8", "surrogatepass")
                    i = end
                    continue
            value.append(self.at(i))
            i += 1
        if self.at(i) == quote:
            i += 1
        return value.decode("utf-8", "replace"), i

    def _end_tag(self, begin: int) -> int:
        if not self.stack:
            raise _ParseError(f"Unexpected end tag at byte offset {begin}")
        i = begin + 2
        while self.at(i) not in _SPACE and self.at(i) != ord(">"):
            i += 1
        name = self._lower(begin + 2, i)
        while self.at(i) in _SPACE and self.at(i) != 0:
            i += 1
        if self.at(i) != ord(">"):
            raise _ParseError(f"Unclosed end tag at byte offset {begin}")
        opened = self.stack[-1]
        if name and name != opened.tag:
            raise _ParseError(f'Unmatched end tag at byte offset {begin}, expected '
                              f'"</{opened.tag}>", found "</{name}>"')
        if self.utf16 > opened.utf16_offset:
            self._close(opened)
        self.stack.pop()
        return i + 1

    def _close(self, opened: _Open) -> None:
        """The entity a closed tag makes, as tdlib builds it (empty ones make none)."""
        offset, length = opened.utf16_offset, self.utf16 - opened.utf16_offset
        tag, argument = opened.tag, opened.argument
        entity: JSON = {"offset": offset, "length": length}
        last = self.entities[-1] if self.entities else None
        same_span = last is not None and (last["offset"], last["length"]) == (offset, length)
        if tag in _SIMPLE:
            entity["type"] = _SIMPLE[tag]
        elif tag == "tg-emoji":
            if not argument.isdigit() or int(argument) == 0 or int(argument) >= 2 ** 63:
                raise _ParseError("Invalid custom emoji identifier specified")
            entity.update(type="custom_emoji", custom_emoji_id=argument)
        elif tag == "a":
            url = argument or self.out[opened.result_pos:].decode("utf-8", "replace")
            link = _link_entity(url)
            if link is None:
                return  # tdlib drops a link it cannot check, silently
            entity.update(link)
        elif tag == "pre":
            if same_span and last is not None and last["type"] == "code" \
                    and last.get("_language"):
                last.update(type="pre", language=last.pop("_language"))
                return
            entity["type"] = "pre"
        elif tag == "code":
            if same_span and last is not None and last["type"] == "pre" and argument:
                last["language"] = argument
                return
            entity["type"] = "code"
            if argument:
                entity["_language"] = argument
        else:  # blockquote
            entity["type"] = "expandable_blockquote" if argument else "blockquote"
        self.entities.append(entity)

    # ------------------------------------------------------------------ helpers

    def _reference(self, pos: int) -> tuple[int, int]:
        """(code point, index after it) of a character reference at ``pos``; (0, pos) if
        there is none there (the ``&`` is then literal text)."""
        end = pos + 1
        code = 0
        if self.at(pos + 1) == ord("#"):
            end += 1
            if self.at(pos + 2) == ord("x"):
                end += 1
                while chr(self.at(end)) in "0123456789abcdefABCDEF":
                    code = code * 16 + int(chr(self.at(end)), 16)
                    end += 1
            else:
                while chr(self.at(end)).isdigit() and chr(self.at(end)).isascii():
                    code = code * 10 + self.at(end) - ord("0")
                    end += 1
            if code == 0 or code >= 0x10FFFF or end - pos >= 10:
                return 0, pos
        else:
            while chr(self.at(end)).isascii() and chr(self.at(end)).isalpha():
                end += 1
            named = _NAMED.get(self.data[pos + 1:end])
            if named is None:
                return 0, pos
            code = ord(named)
        return code, end + 1 if self.at(end) == ord(";") else end

    def _append_code(self, code: int) -> None:
        self.utf16 += 2 if code > 0xFFFF else 1
        if 0xD800 <= code <= 0xDFFF:
            self.surrogate = True
            self.out += b"?"  # never shown: the text is refused at the end
        else:
            self.out += chr(code).encode("utf-8")

    def _skip_space(self, i: int) -> int:
        while self.at(i) != 0 and self.at(i) in _SPACE:
            i += 1
        return i

    def _lower(self, begin: int, end: int) -> str:
        """tdlib lower-cases ASCII only."""
        return self.data[begin:end].lower().decode("utf-8", "replace")


def _argument(tag: str, name: str, value: str, current: str) -> str:
    """The one attribute each tag keeps; the others are ignored."""
    if tag == "a" and name == "href":
        return value
    if tag == "code" and name == "class" and value.startswith("language-"):
        return value[len("language-"):]
    if tag == "span" and name == "class" and value.startswith("tg-"):
        return value[len("tg-"):]
    if tag == "tg-emoji" and name == "emoji-id":
        return value
    if tag == "blockquote" and name == "expandable":
        return "1"
    return current


def _link_entity(url: str) -> JSON | None:
    """text_mention for ``tg://user?id=N``, text_link for a URL Telegram accepts (a bare
    host gets ``http://``, an empty path ``/``, as tdlib normalises them), else None."""
    lowered = url.strip().lower()
    if lowered.startswith("tg://user?id="):
        user_id = lowered.removeprefix("tg://user?id=")
        if user_id.isdigit():
            return {"type": "text_mention",
                    "user": {"id": int(user_id), "is_bot": False, "first_name": "User"}}
    url = url.strip()
    if not lowered.startswith(_LINK_SCHEMES):
        host = url.split("/", 1)[0]
        if "://" in url or "." not in host or any(c.isspace() for c in url):
            return None
        url = "http://" + url
    scheme, _, rest = url.partition("://")
    if not rest or any(c.isspace() for c in rest):
        return None
    if scheme.lower() in ("http", "https") and "/" not in rest.split("?", 1)[0].split("#")[0]:
        host, sep, tail = rest.partition("?") if "?" in rest else rest.partition("#")
        url = f"{scheme}://{host}/{sep}{tail}"
    return {"type": "text_link", "url": url}
