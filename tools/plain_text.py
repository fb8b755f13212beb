"""Job output as a chat shows it: terminal escapes and control characters removed.

``output.log`` keeps the bytes exactly as the job wrote them; only what is sent
to a conversation (notices, ``/log``, ``/run``, tool results) is made plain.
"""

from __future__ import annotations

import re

# CSI (colours, cursor moves), OSC (titles, links), DCS/SOS/PM/APC strings, and
# the two-character escapes
_ESCAPE = re.compile(
    r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[PX^_][^\x1b]*(?:\x1b\\)?"
    r"|[ -/]*[0-~])")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f\x9b]")


def plain(line: str) -> str:
    """One output line as a terminal would leave it, without escapes."""
    if "\x1b" in line:
        line = _ESCAPE.sub("", line)
    if "\r" in line:  # a progress bar redrawn in place: what was drawn last
        line = next((part for part in reversed(line.split("\r")) if part), "")
    return _CONTROL.sub("", line)


def plain_lines(lines: list[str]) -> list[str]:
    return [plain(line) for line in lines]
