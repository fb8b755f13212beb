"""What people see: the agent's Markdown as each platform shows it. Renderers on their
own, then the real python-telegram-bot, discord.py and the web chat against their fakes
with the model agent's answers."""

from __future__ import annotations

import html
from collections.abc import Iterable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gateway.formatting.discord_text as discord_text
import gateway.formatting.telegram_html as telegram_html
import gateway.formatting.web_html as web_html
from gateway.daemon.assembly import running_gateway
from gateway.formatting.markdown import plain_text
from gateway.formatting.preview import GrowingPreview, preview_markdown, status_markdown
from gateway.formatting.splitter import utf16_len
from tests.fakes.openai_server import Say
from tests.helpers import eventually
from tests.model_support import model_config, model_settings, web_base
from tests.previews_support import (
    ANSWERS,
    GENERATED_ANSWERS,
    page_sees,
    raw_markup,
    telegram_preview,
    telegram_sees,
    web_preview,
    words_of,
)
from tests.test_web import open_tab

RICH = """\
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
"""


# ---------------------------------------------------------------------- renderers

def test_telegram_html_uses_only_the_tags_telegram_takes() -> None:
    out = telegram_html.render(RICH)
    assert "<b>Build report</b>" in out and "<b>green</b>" in out and "<i>fast</i>" in out
    assert '<a href="https://ci.example/run/1?a=1&amp;b=2">the log</a>' in out
    assert "• compile: ok" in out
    assert '<pre><code class="language-python">print("&lt;done&gt;")</code></pre>' in out
    table = out.split("<pre>")[-1]
    assert "step | seconds" in table and "make | 12" in table  # a monospaced table
    assert "#" not in out and "**" not in out and "|---" not in out
    tags = {t.split()[0].strip("</>") for t in out.replace(">", ">\n").split("<")[1:]}
    assert tags <= {"b", "i", "a", "pre", "code", "s", "u", "blockquote"}


def test_telegram_html_escapes_whatever_else_and_drops_unsafe_links() -> None:
    out = telegram_html.render("a <script>x</script> & [b](javascript:alert(1)) [c](tg://user?id=1)")
    assert "&lt;script&gt;" in out and "&amp;" in out
    assert "javascript" in out and 'href="javascript' not in out
    assert '<a href="tg://user?id=1">c</a>' in out


def test_a_long_answer_splits_into_parts_that_each_fit_and_balance() -> None:
    code = "x = 1\n" * 40
    text = "\n\n".join(f"**part {n}** " + "word " * 300 + f"\n\n```\n{code}```"
                       for n in range(8))  # about 14,000 characters
    parts = telegram_html.render_parts(text)
    assert len(parts) >= 3
    for part in parts:
        assert utf16_len(telegram_html.visible_text(part.html)) <= 4096
        for tag in ("b", "pre"):
            assert part.html.count(f"<{tag}>") == part.html.count(f"</{tag}>")
    seen = "".join(telegram_html.visible_text(p.html) for p in parts)
    assert all(f"part {n}" in seen for n in range(8))


def test_discord_gets_its_markdown_with_tables_as_code_and_mass_mentions_inert() -> None:
    out = discord_text.render("hey @everyone and @here\n\n| a | b |\n|---|---|\n| 1 | 2 |\n")
    assert "@everyone" not in out and "@here" not in out and "@\u200beveryone" in out
    assert "```\na | b\n--+--\n1 | 2\n```" in out


@pytest.mark.parametrize(("written", "shown"), [
    ("```python\nprint(1", "```python\nprint(1\n```"),  # an open fence is closed
    ("Code:\n\n```pyth", "Code:\n\n"),  # its language is still coming
    ("| a | b |\n|---|---|\n| 1 | 2 |\n| 3 |", "| a | b |\n|---|---|\n| 1 | 2 |\n"),
    # pipe lines a list item takes in as text, |---| and all, will not become a table
    ("- item\n| a | b |\n|---|---|\n| 1 |\n", "- item\n| a | b |\n|---|---|\n| 1 |\n"),
    ("- item\n| a | b |\n|---|", "- item\n"),  # (here the |---| line is still typed)
    ("Totals:\n\n| a | b |\n|--", "Totals:\n\n"),  # no table until its |---| line is whole
    ("It is **done", "It is **done**"),
    ("It is **done*", "It is **done**"),  # half of the closing ** is not an <i>
    ("an *open", "an *open*"),
    ("run `make", "run `make`"),
    ("~~old", "~~old~~"),
    ("**bold and `code", "**bold and `code`**"),
    ("see [the log](https://ci.exa", "see the log"),  # a link once its target is whole
    ("see [the log]", "see the log"),  # may be a link once "(" comes
    ("**see ![a chart](https://ci", "**see a chart**"),
    ("range [0, 1) here", "range [0, 1) here"),  # a "[" alone is text
    ("[WIP", "[WIP"),
    ("list[i", "list[i"),
    ("list[i] = [x](htt", "list[i] = x"),
    ("Steps:\n-", "Steps:\n"),  # "Steps" underlined by "-" would be a heading
    ("snake_case and 2 * 3", "snake_case and 2 * 3"),
    ("a*b*c and foo**bar", "a*b*c and foo**bar**"),  # * opens inside a word, _ does not
    ("snake_case_", "snake_case"),
])
def test_a_preview_closes_or_holds_back_what_is_still_being_written(
        written: str, shown: str) -> None:
    assert preview_markdown(written) == shown


@pytest.mark.parametrize("answer", ANSWERS)
def test_every_prefix_of_an_answer_previews_as_html_telegram_takes_and_grows_on_the_page(
        answer: str) -> None:
    _every_preview_is_well_formed_and_grows(answer, range(1, len(answer) + 1))
    assert preview_markdown(answer) == answer  # a finished answer previews as itself


@settings(max_examples=150, deadline=None)
@given(GENERATED_ANSWERS, st.data())
def test_any_cut_of_an_answer_previews_as_html_telegram_takes_and_grows_on_the_page(
        answer: str, data: st.DataObject) -> None:
    cuts = data.draw(st.lists(st.integers(1, len(answer)), min_size=1, max_size=8))
    _every_preview_is_well_formed_and_grows(answer, cuts)


def _every_preview_is_well_formed_and_grows(answer: str, cuts: Iterable[int]) -> None:
    """Each preview of ``answer`` cut at ``cuts``: Telegram parses its HTML (the fake
    refuses what the Bot API refuses) and shows no raw Markdown the final message does
    not show; the page's HTML is well-formed and what it reads is the start of what the
    final message reads, so the bubble only grows."""
    final_telegram = raw_markup(telegram_sees(telegram_html.render(answer)))
    final_page = _unbracketed(words_of(page_sees(web_html.render(answer))))
    for end in cuts:
        written = answer[:end]
        seen = telegram_sees(telegram_preview(written))
        assert raw_markup(seen) <= final_telegram, (written, seen)
        page = _unbracketed(words_of(page_sees(web_preview(written))))
        assert final_page.startswith(page), (written, page)
        # and it keeps up: held back is only the bit still being written (a link's
        # target, a table row), never the rest of a paragraph
        as_typed = words_of(page_sees(web_html.render(written)))
        # (a table's row waits for its line's end, and a line after a table is a row)
        row = len(written.rsplit("\n", 1)[-1]) if "|---" in written else 0
        assert len(as_typed) - len(page) <= HELD_BACK_AT_MOST + row, (written, page)


#: the most a preview holds back of what the text as typed reads (a table's header row
#: and its half-typed |---| line, a link's half-typed target)
HELD_BACK_AT_MOST = 80


def _unbracketed(read: str) -> str:
    """What a page reads, but for brackets: a ``[`` shows until it turns out to open a
    link (``[the lo`` is shown; ``[the log](...`` shows as ``the log``)."""
    return read.replace("[", "").replace("]", "")


@pytest.mark.parametrize(("status", "shown", "code"), [
    ("running `grep -c '#' *.md`…", "running grep -c '#' *.md…", "grep -c '#' *.md"),
    ("running `echo `date``…", "running echo `date`…", "echo `date`"),
    ("---", "---", None),
    ("# waiting for *job* [j1](x) \\ 1. _now_", "# waiting for *job* [j1](x) \\ 1. _now_",
     None),
])
def test_a_status_line_shows_as_written_with_its_command_as_code(
        status: str, shown: str, code: str | None) -> None:
    markup = telegram_html.render(preview_markdown(status_markdown(status)))
    assert telegram_sees(markup) == shown
    assert (f"<code>{html.escape(code, quote=False)}</code>" in markup) if code else (
        "<" not in markup)


#: a long answer: the realistic ones one after another, and again
LONG_ANSWER = "\n\n".join(ANSWERS * 3)


def test_the_page_preview_of_every_prefix_is_the_whole_reply_rendered_though_only_the_end_is(
        ) -> None:
    """Each delta's HTML is what rendering the reply so far whole gives, while each
    render call reads no more than the block being written (plus one finished block)."""
    rendered: list[int] = []

    def render(text: str) -> str:
        rendered.append(len(text))
        return web_html.render(text)

    growing = GrowingPreview(render)
    for end in range(1, len(LONG_ANSWER) + 1):
        written = LONG_ANSWER[:end]
        shown = growing(written)  # fed every prefix, as the deltas come
        # (compared with the whole render, which costs the square of the length, at every
        # line's end and start, where blocks begin and end, and at every 7th character)
        if end % 7 == 0 or written[-1:] == "\n" or written[-2:-1] == "\n" or (
                end == len(LONG_ANSWER)):
            assert shown == web_preview(written), written[-200:]
    assert max(rendered) <= max(len(answer) for answer in ANSWERS)
    assert sum(rendered) < len(LONG_ANSWER) ** 2 / 20  # whole each time: len ** 2 / 2


@settings(max_examples=150, deadline=None)
@given(GENERATED_ANSWERS, st.data())
def test_any_growth_of_an_answer_renders_on_the_page_as_the_whole_would(
        answer: str, data: st.DataObject) -> None:
    cuts = sorted(data.draw(st.lists(st.integers(1, len(answer)), min_size=1, max_size=12)))
    growing = GrowingPreview(web_html.render)
    for end in cuts:
        assert growing(answer[:end]) == web_preview(answer[:end]), answer[:end]
    assert growing(answer[:cuts[0]]) == web_preview(answer[:cuts[0]])  # started again


@pytest.mark.parametrize("answer", [
    "- a\n\n- b\n\nc",  # a loose list: its second item after a blank line
    "1. a\n\n2. b\n\n   still b\n\nafter",
    "```\nx\n\ny\n```\n\nz",  # a blank line inside a fence
    "see [it]\n\nmore\n\n[it]: https://example.org\n",  # a reference made later
    "    code\n\n    more code\n\ntext",
])
def test_what_continues_a_block_across_a_blank_line_renders_as_the_whole_would(
        answer: str) -> None:
    growing = GrowingPreview(web_html.render)
    for end in range(1, len(answer) + 1):
        assert growing(answer[:end]) == web_preview(answer[:end]), answer[:end]


def test_web_html_never_carries_markup_that_runs() -> None:
    out = web_html.render('<img src=x onerror="alert(1)"> <script>alert(2)</script> '
                          '[x](javascript:alert(3)) [ok](https://example.org) '
                          '![leak](https://evil.example/?d=SECRET)')
    assert "<img" not in out and "<script" not in out and 'href="javascript' not in out
    # an image is never fetched by the page: at most a link someone chooses to follow
    assert '<a href="https://evil.example/?d=SECRET"' in out
    assert '<a href="https://example.org" target="_blank" rel="noopener noreferrer">' in out


def test_plain_text_is_the_words_a_person_reads_without_the_marks() -> None:
    """What the web chat's sidebar and titles show of a message."""
    assert plain_text(RICH).split("\n") == [
        "Build report",
        "The build is green and fast; see the log.",
        "compile: ok", "tests: 431 passed",
        'print("<done>")',
        "step | seconds", "make | 12", "test | 340"]
    assert plain_text("**Approval needed** (a2293e5d)\nline two &amp; <b>") == (
        "Approval needed (a2293e5d)\nline two & <b>")  # a line break stays one

# ---------------------------------------------------------------------- platforms

async def test_telegram_gets_the_answer_as_html_in_its_topic(tmp_path: Path, model) -> None:
    from tests.fakes.telegram_server import FakeTelegram
    from tests.test_telegram import FORUM, telegram_config

    model.brain = lambda req: Say(RICH)
    async with FakeTelegram() as telegram:
        config = telegram_config(tmp_path / "home", telegram, **model_settings(model))
        async with running_gateway(config) as gw:
            await gw.runner.adapters["telegram"].wait_connected()
            telegram.user_message(text="report", thread_id=42, chat_id=FORUM,
                                  chat_type="supergroup", is_forum=True, is_topic_message=True)
            (sent,) = await telegram.wait_for_sent(1, timeout=30)
    assert (sent.chat_id, sent.message_thread_id, sent.parse_mode) == (FORUM, 42, "HTML")
    assert sent.text == telegram_html.render(RICH)


async def test_html_telegram_cannot_parse_is_sent_again_as_plain_text_once(
        tmp_path: Path, model) -> None:
    from tests.fakes.telegram_server import FakeTelegram
    from tests.test_telegram import FORUM, telegram_config

    model.brain = lambda req: Say("**bold** claim")
    async with FakeTelegram() as telegram:
        config = telegram_config(tmp_path / "home", telegram, **model_settings(model))
        async with running_gateway(config) as gw:
            await gw.runner.adapters["telegram"].wait_connected()
            telegram.fail_next_send(status=400, description=(
                "Bad Request: can't parse entities: Can't find end tag corresponding to "
                "start tag \"b\""))
            telegram.user_message(text="go", thread_id=42, chat_id=FORUM,
                                  chat_type="supergroup", is_forum=True, is_topic_message=True)
            (sent,) = await telegram.wait_for_sent(1, timeout=30)
            await eventually(lambda: len([c for c in telegram.calls
                                          if c[0] == "sendMessage"]) >= 2, what="the resend")
    assert (sent.text, sent.parse_mode, sent.message_thread_id) == ("**bold** claim", None, 42)
    assert len(telegram.sent) == 1


async def test_discord_sends_tables_as_code_and_pings_nobody(tmp_path: Path, model,
                                                              discord_endpoints) -> None:
    from tests.fakes.discord_server import FakeDiscord
    from tests.test_discord import CHANNEL, THREAD_A

    model.brain = lambda req: Say("@everyone look:\n\n| a | b |\n|---|---|\n| 1 | 2 |")
    async with FakeDiscord() as fake:
        fake.add_channel(CHANNEL, "builds")
        fake.add_thread(THREAD_A, CHANNEL)
        config = model_config(
            tmp_path / "home", model, platforms__discord__enabled=True,
            platforms__discord__token=fake.token, platforms__discord__api_base=fake.api_base,
            platforms__discord__gateway_url=fake.gateway_url,
            platforms__discord__guild_ready_timeout_seconds=fake.guild_ready_timeout,
            platforms__discord__allowed_users=["1"])
        async with running_gateway(config) as gw:
            await gw.runner.adapters["discord"].wait_connected(timeout=30)
            await fake.user_message(content="table please", channel_id=THREAD_A)
            (sent,) = await fake.wait_for_sent(1, timeout=30)
    assert sent.channel_id == THREAD_A
    assert "@\u200beveryone" in sent.content and "```\na | b\n--+--\n1 | 2\n```" in sent.content
    assert sent.raw.get("allowed_mentions") == {"parse": []}


async def test_web_frames_carry_safe_html_and_the_time(tmp_path: Path, model, http) -> None:
    model.brain = lambda req: Say("**hi** <script>alert(1)</script>")
    async with running_gateway(model_config(tmp_path / "home", model)) as gw:
        tab = await open_tab(http, web_base(gw))
        await tab.say("hello")
        frame = await tab.frame()
    assert frame["html"].startswith("<p><strong>hi</strong> &lt;script&gt;")
    assert html.unescape(frame["html"]).count("<script>") == 1  # as text, escaped once
    assert isinstance(frame["at"], float) and frame["live"] is True


async def test_a_10000_character_answer_arrives_as_parts_telegram_parses(
        tmp_path: Path, model) -> None:
    from tests.fakes.telegram_server import FakeTelegram
    from tests.test_telegram import FORUM, telegram_config

    section = ("## Step {n}\n\nThe **build** of *module {n}* ran `make all` with "
               "[its log](https://ci.example/{n}) & <no> surprises:\n\n"
               "```sh\n" + "make[{n}]: compiling <file>.c && linking\n" * 12 + "```\n\n"
               "| stage | seconds |\n|---|---|\n| build | {n} |\n\n")
    answer = "".join(section.format(n=n) for n in range(16))
    assert len(answer) > 10_000
    model.brain = lambda req: Say(answer)
    async with FakeTelegram() as telegram:
        config = telegram_config(tmp_path / "home", telegram, **model_settings(model))
        async with running_gateway(config) as gw:
            await gw.runner.adapters["telegram"].wait_connected()
            telegram.user_message(text="the long report", thread_id=42, chat_id=FORUM,
                                  chat_type="supergroup", is_forum=True, is_topic_message=True)
            parts = telegram_html.render_parts(answer)
            sent = await telegram.wait_for_sent(len(parts), timeout=30)
    assert len(sent) == len(parts) >= 3
    # every part was taken as HTML (the fake parses it as strictly as Telegram), in topic 42
    assert all(s.parse_mode == "HTML" and s.message_thread_id == 42 for s in sent)
    assert [s.text for s in sent] == [p.html for p in parts]
    shown = "\n".join(telegram.visible(FORUM, 42))
    assert all(f"Step {n}" in shown for n in range(16)) and "<no>" in shown



async def test_the_page_loads_nothing_from_elsewhere(web, http) -> None:
    _, base = web
    async with http.get(f"{base}/") as r:
        policy = r.headers["Content-Security-Policy"]
    assert "default-src 'self'" in policy and "img-src 'self' data: blob:" in policy
