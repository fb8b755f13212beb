"""What every table's state machine shares: the moves its rows may make, written once
next to its states, and the check for a move whose target is known only at run time
(the rest are read from the SQL by tests/test_states.py)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from enum import StrEnum
from typing import TypeVar

from gateway.errors import StoreError

S = TypeVar("S", bound=StrEnum)


class NotAMove(StoreError):
    """A write would move a row between states its table does not allow: a bug, caught
    before it reaches the store."""


def check_move(moves: Mapping[S, frozenset[S]], sources: Iterable[S], target: S) -> None:
    """Raise NotAMove unless a row in every one of ``sources`` may move to ``target``;
    ``moves`` gives, for each state, the states a row in it may move to."""
    for source in sources:
        if target not in moves[source]:
            raise NotAMove(f"a {type(target).__name__} may not move from {source} to {target}")
