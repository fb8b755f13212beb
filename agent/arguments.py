"""Splitting a command's arguments the way a user types them."""

from __future__ import annotations

import shlex


def split_first_word(args: str) -> tuple[str, str]:
    """The first shell word (quotes allowed) and the rest of the line verbatim;
    ValueError when the quotes do not balance."""
    lexer = shlex.shlex(args, posix=True)
    lexer.whitespace_split = True
    first = lexer.get_token() or ""
    rest = args[lexer.instream.tell():] if hasattr(lexer.instream, "tell") else ""
    return first, rest.strip()
