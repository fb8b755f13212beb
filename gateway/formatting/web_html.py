"""Markdown as the web page shows it: HTML from markdown-it with raw HTML escaped,
links checked (no ``javascript:``) and opened in a new tab. The page inserts it
as it is; nothing the agent or a job's output says can run there."""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING

from gateway.formatting.markdown import new_parser

if TYPE_CHECKING:
    from markdown_it import MarkdownIt
    from markdown_it.renderer import RendererHTML
    from markdown_it.token import Token
    from markdown_it.utils import EnvType, OptionsDict


def render(text: str) -> str:
    html: str = _parser().render(text)
    return html


@lru_cache(maxsize=1)
def _parser() -> MarkdownIt:
    """Built with the first reply (markdown.new_parser says why not sooner). An image in
    the agent's text would be fetched by every tab that shows it (a URL can carry data
    out): shown as the Markdown it is written in."""
    md = new_parser().disable("image")
    md.add_render_rule("link_open", _link_open)
    return md


def _link_open(self: RendererHTML, tokens: list[Token], idx: int, options: OptionsDict,
               env: EnvType) -> str:
    tokens[idx].attrSet("target", "_blank")
    tokens[idx].attrSet("rel", "noopener noreferrer")
    return self.renderToken(tokens, idx, options, env)
