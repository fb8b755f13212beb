"""Splitting long messages for platforms with a length limit.

One splitter for every platform: it prefers paragraph, then line, then word
boundaries, and never leaves a fenced code block open across parts — a part
that cuts a block closes the fence and the next part reopens it with the same
language tag.
"""

from __future__ import annotations

from collections.abc import Callable

FENCE = "```"


def utf16_len(text: str) -> int:
    """Length as Telegram counts it (UTF-16 code units)."""
    return len(text.encode("utf-16-le")) // 2


def split_message(text: str, limit: int, length: Callable[[str], int] = len) -> list[str]:
    """Split ``text`` into parts of at most ``limit`` by ``length``."""
    if limit < 16:
        raise ValueError("limit too small to split safely")
    if length(text) <= limit:
        return [text] if text else []
    parts: list[str] = []
    fence_lang: str | None = None  # language of a code block left open by the last part
    rest = text
    while rest:
        prefix = f"{FENCE}{fence_lang}\n" if fence_lang is not None else ""
        candidate = prefix + rest
        if length(candidate) <= limit:
            parts.append(candidate)
            break
        # leave room to close a fence that this part might leave open
        budget = limit - len(FENCE) - 1
        cut = _cut_point(candidate, budget, len(prefix), length)
        chunk = candidate[:cut]
        opened = _open_fence(chunk)
        if opened is not None:
            chunk = chunk.rstrip("\n") + "\n" + FENCE
        parts.append(chunk)
        fence_lang = opened
        rest = candidate[cut:].lstrip("\n") if opened is None else candidate[cut:]
    return [p for p in parts if p.strip()]


def _cut_point(text: str, budget: int, floor: int, length: Callable[[str], int]) -> int:
    """The best index to cut at so that ``text[:index]`` fits ``budget``."""
    hard = _longest_fitting_prefix(text, budget, length)
    window = text[:hard]
    for sep in ("\n\n", "\n", " "):
        at = window.rfind(sep)
        if at > floor + (hard - floor) // 2:
            return at + len(sep)
    return max(hard, floor + 1)


def _longest_fitting_prefix(text: str, budget: int, length: Callable[[str], int]) -> int:
    if length is len:
        return min(len(text), budget)
    lo, hi = 0, len(text)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if length(text[:mid]) <= budget:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _open_fence(chunk: str) -> str | None:
    """The language tag of the fenced block still open at the end of ``chunk``."""
    lang: str | None = None
    for line in chunk.split("\n"):
        stripped = line.strip()
        if stripped.startswith(FENCE):
            lang = stripped[len(FENCE):].strip() if lang is None else None
    return lang
