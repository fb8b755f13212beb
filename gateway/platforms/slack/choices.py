"""Choice buttons on Slack (``Adapter.send_choices``): the message's last part as Block
Kit — its mrkdwn in sections, then a button per choice, each carrying its command
(``cmd:<command>``, gateway/contract/choices.py) — and a press read back as the one who
pressed sending that command where the message is.

A press comes over Socket Mode like an approval's (presses.py); the adapter hands it in
as a message of the one who pressed, so who may send the command is the runner's rule,
and acknowledges its envelope once it is journaled, as it does a message's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gateway.contract.choices import choice_data, parse_choice
from gateway.formatting.splitter import split_message
from gateway.platforms.slack.approvals import SECTION_LIMIT
from gateway.platforms.slack.presses import Press
from gateway.words.events import Choice

__all__ = ["choice_blocks", "chosen_command"]

#: an actions block holds 25 elements
PER_BLOCK = 25
#: a message holds 50 blocks
MAX_BLOCKS = 50
#: a button's label holds 75 characters
LABEL_LIMIT = 75


def choice_blocks(text: str, choices: Sequence[Choice]) -> list[dict[str, Any]] | None:
    """``text`` (one message's mrkdwn, as sent without buttons) in sections of at most
    3000 characters, then the buttons of the choices whose command fits a button (each
    command once), 25 to an actions block; None when no choice has a button."""
    sections = [{"type": "section", "text": {"type": "mrkdwn", "text": piece}}
                for piece in split_message(text, SECTION_LIMIT) if piece.strip()]
    buttons: list[dict[str, Any]] = []
    given: set[str] = set()
    for choice in choices:
        data = choice_data(choice.command)
        if data is None or data in given:
            continue  # the message's text says how to type it
        given.add(data)
        buttons.append({"type": "button", "action_id": data, "value": data,
                        "text": {"type": "plain_text", "text": _label(choice)}})
    room = (MAX_BLOCKS - len(sections)) * PER_BLOCK
    buttons = buttons[:room]
    if not buttons:
        return None
    actions = [{"type": "actions", "block_id": f"choices-{start // PER_BLOCK}",
                "elements": buttons[start:start + PER_BLOCK]}
               for start in range(0, len(buttons), PER_BLOCK)]
    return [*sections, *actions]


def chosen_command(press: Press) -> str | None:
    """The command of the choice button pressed; None for any other button."""
    return parse_choice(press.action_id)


def _label(choice: Choice) -> str:
    label = " ".join(choice.label.split()) or choice.command
    return label if len(label) <= LABEL_LIMIT else label[:LABEL_LIMIT - 1] + "…"
