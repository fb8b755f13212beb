"""Markdown as Slack's mrkdwn: what each mark becomes, what is escaped, and how a long
text is cut into messages."""

from __future__ import annotations

from gateway.formatting.mrkdwn import MESSAGE_LIMIT, escape, message_parts, render, unescape


def test_emphasis_becomes_slacks_marks() -> None:
    assert render("**bold**, *italic*, _also_ and ~~gone~~") == (
        "*bold*, _italic_, _also_ and ~gone~")
    assert render("**bold with *italic* inside**") == "*bold with _italic_ inside*"


def test_code_keeps_its_text_and_a_fence_loses_its_language() -> None:
    assert render("run `make *all*` now") == "run `make *all*` now"
    assert render("```python\nif a < b:\n    pass\n```") == (
        "```\nif a &lt; b:\n    pass\n```")


def test_links_are_slacks_own_and_only_safe_ones() -> None:
    assert render("[the log](https://ci.example/run?id=1&x=2)") == (
        "<https://ci.example/run?id=1&amp;x=2|the log>")
    assert render("<https://example.org>") == "<https://example.org>"
    assert render("[odd](https://x.example/a|b>c)") == "<https://x.example/a%7Cb%3Ec|odd>"
    assert render("[files](ftp://host.example/x)") == "files"  # not a scheme Slack links
    assert render("[click](javascript:alert(1))") == "[click](javascript:alert(1))"


def test_lists_quotes_headings_and_rules() -> None:
    text = "# Title\n\n- one\n- two\n  1. first\n  2. second\n\n> quoted\n> more\n\n---\nend"
    assert render(text) == ("*Title*\n\n• one\n• two\n    1. first\n    2. second\n\n"
                            "> quoted\n> more\n\n———\n\nend")


def test_a_table_becomes_a_monospaced_block() -> None:
    assert render("| a | b |\n|---|---|\n| 1 | 22 |") == "```\na | b\n--+---\n1 | 22\n```"


def test_slacks_control_characters_are_escaped_so_nothing_becomes_a_mention() -> None:
    shown = render("a & b <!here> <@U0123ABCD> <#C0GENERAL> @here @channel @everyone")
    assert "<" not in shown and ">" not in shown
    assert shown == ("a &amp; b &lt;!here&gt; &lt;@U0123ABCD&gt; &lt;#C0GENERAL&gt; "
                     "@\u200bhere @\u200bchannel @\u200beveryone")
    assert render("`<!channel>`") == "`&lt;!channel&gt;`"


def test_escape_and_unescape_are_each_others_inverse() -> None:
    text = "x < y && y > z &amp;"
    assert unescape(escape(text)) == text


def test_a_long_text_is_cut_between_blocks_into_messages_slack_takes_whole() -> None:
    paragraphs = [f"paragraph {n} " + "word " * 150 for n in range(12)]
    parts = message_parts("\n\n".join(paragraphs))
    assert len(parts) > 1 and all(len(p) <= MESSAGE_LIMIT for p in parts)
    assert "\n\n".join(parts) == render("\n\n".join(paragraphs))


def test_a_code_block_longer_than_a_message_stays_closed_in_every_part() -> None:
    code = "\n".join(f"line {n} " + "x" * 80 for n in range(120))
    parts = message_parts(f"```\n{code}\n```")
    assert len(parts) >= 3 and all(len(p) <= MESSAGE_LIMIT for p in parts)
    assert all(p.startswith("```\n") and p.endswith("```") for p in parts)


def test_an_empty_text_is_no_message() -> None:
    assert message_parts("") == [] and message_parts("   \n") == []


def test_an_address_that_contains_here_is_left_alone() -> None:
    assert render("write to ops@here.example") == "write to ops@here.example"
