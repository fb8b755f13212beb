"""Where a conversation lives, as one immutable value."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

from gateway.words.storable import storable

CHAT_TYPES = ("dm", "group", "channel", "thread")


@dataclass(frozen=True, slots=True)
class Route:
    """A conversation's address on its platform.

    ``thread_id`` is a forum topic or a Discord thread; ``message_id`` is the
    reply anchor: the message a reply is sent under (needed, for example, by
    Telegram private-chat topics).
    """

    platform: str
    chat_type: str
    chat_id: str
    thread_id: str | None = None
    user_id: str | None = None
    user_name: str | None = None
    chat_name: str | None = None
    message_id: str | None = None
    parent_chat_id: str | None = None

    def __post_init__(self) -> None:
        if self.chat_type not in CHAT_TYPES:
            raise ValueError(f"chat_type must be one of {CHAT_TYPES}, not {self.chat_type!r}")
        if not self.platform or not self.chat_id:
            raise ValueError("a route needs a platform and a chat_id")
        if self.thread_id == "":
            raise ValueError("thread_id must be None or a non-empty id")
        # names are only shown: one the store cannot hold (a lone surrogate in a display
        # name) keeps U+FFFD in that place, and its message is handled like any other
        for name in _NAMES:
            value = getattr(self, name)
            if value is not None and (kept := storable(value)) is not value:
                object.__setattr__(self, name, kept)

    def with_anchor(self, message_id: str | None) -> Route:
        if message_id == self.message_id:  # (routes are values: the same one will do)
            return self
        return replace(self, message_id=message_id)

    def to_dict(self) -> dict[str, Any]:
        return {name: value for name in _FIELDS if (value := getattr(self, name)) is not None}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Route:
        if all(type(v) is str for v in data.values()):  # as to_dict wrote it: as it is
            try:
                return cls(**data)
            except TypeError:  # a key this version does not know: left out below
                pass
        fields: dict[str, Any] = {k: (None if v is None else str(v))
                                  for k, v in data.items() if k in _FIELDS}
        return cls(**fields)


_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(Route))
#: the fields that are a person's or a place's name, not an id
_NAMES = ("user_name", "chat_name")
