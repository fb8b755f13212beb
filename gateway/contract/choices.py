"""What a choice's button carries (``Adapter.send_choices``): its command, in a form
every platform's button data can hold, and read back from a press.

Telegram's ``callback_data`` holds 64 bytes; Discord's ``custom_id`` 100 characters;
Slack's ``action_id`` 255. A command that does not fit 64 bytes gets no button (the
message's text still says how to type it). A press is the presser sending the command
in the message's conversation: the adapter hands it in as a message from that person
(``AdapterHost.receive``, with the press's own id as its platform id), so it is
authorized, journaled and answered like anything they write.
"""

from __future__ import annotations

#: what a choice's button data starts with (an approval's is ``ap:``)
PREFIX = "cmd:"
#: the most bytes of button data any platform takes (Telegram's callback_data)
MAX_DATA_BYTES = 64


def choice_data(command: str) -> str | None:
    """A button's data for ``command``; None when it would not fit every platform."""
    data = PREFIX + command
    return data if len(data.encode()) <= MAX_DATA_BYTES else None


def parse_choice(data: str) -> str | None:
    """The command a pressed button carries; None when it is not a choice's."""
    if not data.startswith(PREFIX):
        return None
    command = data[len(PREFIX):]
    return command if command.startswith("/") else None
