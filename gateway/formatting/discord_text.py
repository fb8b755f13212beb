"""Markdown as Discord shows it: Discord's own Markdown, with tables as code blocks
(it has none) and ``@everyone``/``@here`` made inert. The sends also carry no
allowed mentions, so nobody is pinged by what the agent or a job wrote."""

from __future__ import annotations

import re

import discord

from gateway.formatting.markdown import monospace_table, parse, table_rows
from gateway.formatting.splitter import split_message

MESSAGE_LIMIT = 2000
#: every send and edit: nobody is pinged by what the agent or a job's output says
NO_MENTIONS = discord.AllowedMentions.none()
_MASS_MENTION = re.compile(r"@(everyone|here)\b")


def message_parts(text: str) -> list[str]:
    """The agent's Markdown as Discord messages."""
    return split_message(render(text), MESSAGE_LIMIT)


def render(text: str) -> str:
    tokens = parse(text)
    lines = text.split("\n")
    replaced: list[tuple[int, int, str]] = []
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if token.type == "table_open" and token.map and token.level == 0:
            rows, i = table_rows(tokens, i)
            replaced.append((token.map[0], token.map[1],
                             "```\n" + monospace_table(rows) + "\n```"))
            continue
        i += 1
    for start, end, block in reversed(replaced):
        lines[start:end] = [block]
    return _MASS_MENTION.sub("@\u200b\\1", "\n".join(lines))
