"""What no text column can hold, in one place: a NUL (PostgreSQL refuses it) and half
of a UTF-16 pair (a lone surrogate, ``"\\ud800"`` in JSON: not Unicode, and no UTF-8
encoder writes it). A message's words holding one are refused
(gateway/inbound/checks.py); what is only shown, a sender's name, is kept with the
character replaced.
"""

from __future__ import annotations

import re

UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
#: what stands for a character that could not be kept (U+FFFD REPLACEMENT CHARACTER)
REPLACEMENT = "\ufffd"


def storable(text: str) -> str:
    """``text`` with each character the store cannot hold replaced by U+FFFD (``text``
    itself when there is none)."""
    return UNSTORABLE.sub(REPLACEMENT, text) if UNSTORABLE.search(text) else text
