"""What the preview tests share: realistic answers (and a generator of more), and what
a user would see of a preview on Telegram and on the page."""

from __future__ import annotations

import html
import re
from html.parser import HTMLParser

from hypothesis import strategies as st

import gateway.formatting.telegram_html as telegram_html
import gateway.formatting.web_html as web_html
from gateway.formatting.preview import preview_markdown
from gateway.platforms.preview import WRITING
from tests.fakes.telegram_entities import render as telegram_parses

#: answers as a model writes them: headings, emphasis, lists, links, tables, code
ANSWERS = [
    """\
# Build report

The build is **green** and *fast*; see [the log](https://ci.example/run/1?a=1&b=2).

- compile: ok
- tests: 431 passed

```python
print("<done>")
```

| step | seconds |
|------|---------|
| make | 12 |
| test | 340 |
""",
    """\
## Why the deploy failed

The **migration** stopped at step 3, because `users_email_idx` already existed:
1. the first run created it and timed out
2. the retry tried again with ~~no~~ a check that was *too late*

> **Note:** nothing was lost; see [runbook](https://wiki.example/ops/db_migrations).

| table | rows | state |
| --- | ---: | --- |
| `users` | 1,204 | ok |
| **orders** | 88 | _locked_ |

~~~sh
psql -c 'DROP INDEX users_email_idx;'
~~~

Then run `make migrate` again.""",
    """\
Here's the plan:
- **Step one**: read `config.yaml`
  - check the `agent:` section
- **Step two**: restart with `homing run`

````markdown
```python
x = 1
```
````
### Done
That's all, snake_case_names and 2 * 3 = 6 included.""",
]

_PHRASES = st.sampled_from([
    "plain words", "more text here", "**bold words**", "*slanted*", "_underscored_",
    "`code()`", "~~struck~~", "[a link](https://example.org/a_b?x=1&y=2)",
    "snake_case_name", "2 * 3 = 6", "<tag> & co", "**bold with `code`**",
    "*it with [link](https://example.org)*", "range [0, 1) here", "list[i] of [WIP",
    "a*b*c"])
_LINE = st.lists(_PHRASES, min_size=1, max_size=5).map(" ".join)
_CELL = st.sampled_from(["a", "`x`", "**b**", "long cell text", "42"])


def _table(rows: list[list[str]]) -> str:
    width = len(rows[0])
    lines = ["| " + " | ".join(r[:width] + [""] * (width - len(r))) + " |" for r in rows]
    lines.insert(1, "|" + "---|" * width)
    return "\n".join(lines)


_BLOCK = st.one_of(
    _LINE,
    _LINE.map(lambda line: "## " + line),
    st.lists(_LINE, min_size=1, max_size=3).map(lambda items: "\n".join(
        "- " + item for item in items)),
    st.lists(_LINE, min_size=1, max_size=3).map(lambda items: "\n".join(
        f"{n}. {item}" for n, item in enumerate(items, 1))),
    st.lists(st.lists(_CELL, min_size=2, max_size=3), min_size=2, max_size=4).map(_table),
    st.tuples(st.sampled_from(["```python", "```", "~~~sh"]), _LINE).map(
        lambda fence: f"{fence[0]}\nprint('{fence[1]}')\n{fence[0][:3]}"),
    _LINE.map(lambda line: "> " + line),
    st.lists(_LINE, min_size=1, max_size=3).map(lambda items: "\n".join(
        "* " + item + "\n  - " + item for item in items)),
    st.just("---"),
)
#: an answer of a few such blocks, each after a blank line or right after the last line
GENERATED_ANSWERS = st.lists(st.tuples(_BLOCK, st.sampled_from(["\n\n", "\n"])),
                             min_size=1, max_size=5).map(
    lambda blocks: "".join(block + end for block, end in blocks).rstrip("\n"))


def telegram_preview(text: str) -> str:
    """The HTML of a Telegram preview of ``text`` (as ``TelegramPreview`` sends it)."""
    return telegram_html.render(preview_markdown(text)) + WRITING


def telegram_sees(markup: str) -> str:
    """What a Telegram user sees of ``markup``; raises Telegram's "can't parse
    entities" error (as the fake, which follows tdlib, does) when it is malformed."""
    return telegram_parses(markup, "HTML").text


class _StrictHtml(HTMLParser):
    """Well-formed HTML or an AssertionError: every tag closed, in order."""

    VOID = frozenset({"br", "hr", "img", "input"})

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.open: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag not in self.VOID:
            self.open.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if tag in self.VOID:
            return  # <br />
        assert self.open and self.open[-1] == tag, f"</{tag}> closes {self.open}"
        self.open.pop()

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def page_sees(markup: str) -> str:
    """The text of web HTML, which must be well-formed."""
    parser = _StrictHtml()
    parser.feed(markup)
    parser.close()
    assert not parser.open, f"left open: {parser.open}"
    return "".join(parser.text)


def web_preview(text: str) -> str:
    return web_html.render(preview_markdown(text))


def words_of(seen: str) -> str:
    """Seen text with its spacing made one: what the user reads, not how it is laid out."""
    return re.sub(r"\s+", " ", html.unescape(seen)).strip()


#: Markdown that a user should never see as typed characters
RAW_MARKUP = ("**", "__", "~~", "`", "](")


def raw_markup(seen: str) -> set[str]:
    """The kinds of raw Markdown in what a user sees: markers, and lines that start as
    a heading, a table row or a quote."""
    found = {marker for marker in RAW_MARKUP if marker in seen}
    return found | {"line " + m.group(1) for m in re.finditer(r"(?m)^\s*(#|\||>)", seen)}
