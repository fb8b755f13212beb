"""Choice buttons on Discord (``Adapter.send_choices``): a button per choice under a
message, each carrying its command (``cmd:<command>``, gateway/contract/choices.py), and
a click read back as the one who clicked sending that command where the message is.

As with approvals (approvals.py), clicks are taken in ``on_interaction`` for every
message, never through discord.py's view store (the views are stopped before they are
sent), so a message posted before a restart still answers. Who may send the command is
the runner's rule, as for anything typed: a click is handed in like a message.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import discord

from gateway.contract.choices import choice_data, parse_choice
from gateway.words.events import Choice

__all__ = ["MAX_BUTTONS", "choice_buttons", "clicked_command"]

#: Discord takes 5 action rows of 5 buttons under a message
MAX_BUTTONS = 25
#: a button's label holds 80 characters
LABEL_LIMIT = 80


def choice_buttons(choices: Sequence[Choice]) -> discord.ui.View | None:
    """A button for each choice whose command fits a button (the first 25, each command
    once), filled into rows of five; None when there is none."""
    view = discord.ui.View(timeout=None)
    given: set[str] = set()
    for choice in choices:
        data = choice_data(choice.command)
        if data is None or data in given:
            continue  # the message's text says how to type it
        if len(given) == MAX_BUTTONS:
            break
        given.add(data)
        view.add_item(discord.ui.Button(label=_label(choice), custom_id=data,
                                        style=discord.ButtonStyle.secondary))
    if not given:
        return None
    view.stop()  # a finished view is not kept in discord.py's store: the adapter answers
    return view


def clicked_command(interaction: discord.Interaction) -> str | None:
    """The command of the choice button clicked; None for any other interaction (an
    approval's button, or another part of a bot's)."""
    if interaction.type != discord.InteractionType.component:
        return None
    data: dict[str, Any] = dict(interaction.data or {})
    custom_id = data.get("custom_id")
    return parse_choice(custom_id) if isinstance(custom_id, str) else None


def _label(choice: Choice) -> str:
    label = " ".join(choice.label.split()) or choice.command
    return label if len(label) <= LABEL_LIMIT else label[:LABEL_LIMIT - 1] + "…"
