"""What the gateway refuses to take in from outside, and the words for why.

One JSON decoder for every REST body and WebSocket frame: Python's own
``json`` would recurse until it fails on deep nesting, refuse a long number
with a ValueError about ``sys.set_int_max_str_digits``, decode ``1e400`` as
infinity and pass a lone surrogate (``"\\ud800"``) through to the database,
which cannot store it.
Here each of those is an :class:`InputRefused` saying what is wrong, with the
limit; a frame too large to decode at all is still named in its refusal by
:func:`string_members`, which reads its type and id and nothing else.
:func:`text_problem` is the same rule for a message's text from any platform:
text the journal cannot store is refused, never "send it again". (A sender's
name is kept with the character replaced instead: gateway/words/route.py.)
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING, Any

from gateway.errors import RefusedInput
from gateway.inbound.files import files_of
from gateway.words.storable import UNSTORABLE

if TYPE_CHECKING:
    from gateway.words.events import MessageEvent

#: deeper than any body or frame the API takes (they are one or two levels)
MAX_JSON_DEPTH = 32
#: characters in one JSON number; Python refuses more than 4300 digits with a ValueError
MAX_NUMBER_CHARS = 100
#: members and brackets :func:`string_members` reads before it gives up
MAX_SCAN_STEPS = 1000

# a JSON string (skipped whole, so brackets in it are not counted) or a bracket. An
# unclosed string runs to the end, as the decoder reads it: were the closing quote
# required, every later `"` would start a fresh scan to the end (quadratic).
_STRING_OR_BRACKET = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"?|[\[\]{}]', re.DOTALL)
# a number or a word: a member's value passed over unread (JSON's digits are ASCII)
_NUMBER_OR_WORD = re.compile(r"-?[0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?|true|false|null")
_SPACE = re.compile(r"[ \t\n\r]+")
# json.loads's own reader of one string (C): linear, quick over escapes, as strict
_scanstring: Callable[[str, int], tuple[str, int]] = (
    json.decoder.scanstring)  # type: ignore[attr-defined]


class InputRefused(RefusedInput, ValueError):
    """Input the gateway does not take; ``str(exc)`` says what is wrong with it.

    ``decoded`` is the JSON value when it was read but holds text that cannot be
    stored, so that the caller can still say which request it refuses (a frame's id);
    None when it could not be read."""

    def __init__(self, problem: str, decoded: Any = None) -> None:
        super().__init__(problem)
        self.decoded = decoded


def load_json(data: str | bytes) -> Any:
    """``data`` decoded as JSON, within the limits above; InputRefused otherwise."""
    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InputRefused(f"it is not UTF-8 (byte {exc.start})") from None
    _check_depth(data)
    try:
        value = json.loads(data, parse_int=_integer, parse_float=_real,
                           parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise InputRefused(f"it is not valid JSON: {exc.msg} (character {exc.pos})") from None
    if (problem := _string_problem(value)) is not None:
        raise InputRefused(f"a string in it {problem}", decoded=value)
    return value


def string_members(data: str, names: Collection[str]) -> dict[str, str]:
    """The top-level string members called ``names`` of a JSON object too large to
    decode (an oversize frame's type and id, to name it in its refusal), read in one
    pass without decoding the rest: the object's other values are passed over unread.
    The scan stops once every name is found (the first of a name repeated is the one
    read), at the end of the object, where the text stops being JSON, or after
    :data:`MAX_SCAN_STEPS` members and brackets (a frame of a million members or of
    nesting a million deep costs no more than one of a few); what was found before
    that is returned. A value that could not be stored (a NUL, a lone surrogate) is
    left out, as is a named value that is not a string."""
    found: dict[str, str] = {}
    steps = MAX_SCAN_STEPS
    pos = _after_space(data, 0)
    if not data.startswith("{", pos):
        return found
    pos += 1
    while len(found) < len(names) and steps > 0:
        steps -= 1
        key, pos = _string_at(data, _after_space(data, pos))
        if key is None:
            break
        pos = _after_space(data, pos)
        if not data.startswith(":", pos):
            break
        pos = _after_space(data, pos + 1)
        if key in names and key not in found and data.startswith('"', pos):
            value, pos = _string_at(data, pos)
            if value is None:
                break
            if text_problem(value) is None:
                found[key] = value
        else:
            after, steps = _after_value(data, pos, steps)
            if after is None:
                break
            pos = after
        pos = _after_space(data, pos)
        if not data.startswith(",", pos):
            break
        pos += 1
    return found


def _after_space(data: str, pos: int) -> int:
    space = _SPACE.match(data, pos)
    return pos if space is None else space.end()


def _string_at(data: str, pos: int) -> tuple[str | None, int]:
    """The JSON string starting at ``pos`` decoded, and where it ends; None when there
    is none there or it does not end (unclosed, a raw control character, a bad escape)."""
    if not data.startswith('"', pos):
        return None, pos
    try:
        return _scanstring(data, pos + 1)
    except json.JSONDecodeError:
        return None, pos


def _after_value(data: str, pos: int, steps: int) -> tuple[int | None, int]:
    """Where the JSON value at ``pos`` ends, read over without decoding it, and the
    steps left: a string read by the decoder's own reader, a number or word by its
    shape, an array or object by counting its brackets (strings in it skipped whole),
    each bracket a step, so no depth can make this recurse or run long. None when it
    does not end, or not within the steps."""
    if data.startswith('"', pos):
        value, after = _string_at(data, pos)
        return (after if value is not None else None), steps
    if (word := _NUMBER_OR_WORD.match(data, pos)) is not None:
        return word.end(), steps
    if not data.startswith(("[", "{"), pos):
        return None, steps
    depth = 0
    for token in _STRING_OR_BRACKET.finditer(data, pos):
        bracket = token.group()
        if bracket in "[{":
            depth += 1
        elif bracket in "]}":
            depth -= 1
            if depth == 0:
                return token.end(), steps
        steps -= 1
        if steps <= 0:
            break
    return None, steps


def text_problem(text: str) -> str | None:
    """None when ``text`` can be stored as it is; else what it holds that cannot
    (a NUL, or half of a UTF-16 pair, which is not Unicode text)."""
    found = UNSTORABLE.search(text)
    if found is None:
        return None
    char = found.group()
    what = "a NUL character" if char == "\x00" else "a lone surrogate, which is not valid Unicode"
    return f"holds {what} (U+{ord(char):04X}, character {found.start() + 1})"


def _check_depth(text: str) -> None:
    if text.count("[") + text.count("{") <= MAX_JSON_DEPTH:
        return  # cannot nest deeper: most bodies end here
    depth = 0
    for token in _STRING_OR_BRACKET.finditer(text):
        bracket = token.group()
        if bracket in "[{":
            depth += 1
            if depth > MAX_JSON_DEPTH:
                raise InputRefused(f"it nests arrays or objects more than {MAX_JSON_DEPTH} "
                                   f"deep")
        elif bracket in "]}":
            depth -= 1


def _check_number(token: str) -> None:
    if len(token) > MAX_NUMBER_CHARS:
        raise InputRefused(f"it has a number {len(token)} characters long (at most "
                           f"{MAX_NUMBER_CHARS})")


def _integer(token: str) -> int:
    _check_number(token)
    return int(token)


def _real(token: str) -> float:
    _check_number(token)
    value = float(token)
    if math.isinf(value):  # `1e400`: no JSON number, and no column can hold it
        raise InputRefused(f"it has {token}, which is out of range for a number")
    return value


def _no_constant(token: str) -> Any:
    raise InputRefused(f"it has {token}, which is not a JSON number")


def _string_problem(value: Any) -> str | None:
    """What is wrong with the first string in ``value`` (keys too) that cannot be
    stored (a NUL, a lone surrogate); None when every one can."""
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, dict):
            pending.extend(item.keys())
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
        elif isinstance(item, str) and (problem := text_problem(item)) is not None:
            return problem
    return None


def message_problem(event: MessageEvent) -> str | None:
    """None when the journal can store ``event``; else a sentence for its conversation
    saying what is wrong with it (sending it again as it is could never work)."""
    problem = text_problem(event.text)
    where = "its text"
    for file in files_of(event.metadata):
        if problem is None and (problem := text_problem(file.name)) is not None:
            where = f"the name of the file {file.name!r}"
    if problem is None:
        return None
    return f"That message was not taken: {where} {problem}. Send it without that character."
