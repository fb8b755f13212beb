"""Markdown as Matrix's org.matrix.custom.html (gateway/formatting/matrix_html.py)."""

from __future__ import annotations

import re

from gateway.formatting.matrix_html import harmless, message_parts, render, render_parts

#: the tags the Matrix spec allows in formatted_body (of them, the ones a renderer makes)
ALLOWED = {"p", "br", "b", "i", "del", "code", "pre", "h1", "h2", "h3", "h4", "h5", "h6",
           "blockquote", "ul", "ol", "li", "hr", "a", "table", "thead", "tbody", "tr",
           "th", "td"}


def tags(markup: str) -> set[str]:
    return set(re.findall(r"</?([a-z0-9]+)", markup))


def test_marks_become_the_tags_matrix_allows() -> None:
    markup = render("# Title\n\n**bold** *it* ~~gone~~ `x<y`\n\n- one\n- two\n\n"
                    "3. three\n4. four\n\n> quoted\n\n---\n\n```py\nprint(1 < 2)\n```")
    assert markup == (
        "<h1>Title</h1><p><b>bold</b> <i>it</i> <del>gone</del> <code>x&lt;y</code></p>"
        "<ul><li>one</li><li>two</li></ul><ol start=\"3\"><li>three</li><li>four</li></ol>"
        "<blockquote><p>quoted</p></blockquote><hr>"
        '<pre><code class="language-py">print(1 &lt; 2)</code></pre>')
    assert tags(markup) <= ALLOWED


def test_a_table_is_a_table() -> None:
    markup = render("| a | b |\n|---|---|\n| 1 | 2 |")
    assert markup == ("<table><thead><tr><th>a</th><th>b</th></tr></thead>"
                      "<tbody><tr><td>1</td><td>2</td></tr></tbody></table>")


def test_raw_html_is_text_and_only_web_and_mail_links_are_links() -> None:
    markup = render('<img src=x onerror=alert(1)> [ok](https://a.example/?q=1&r="2") '
                    "[mail](mailto:a@b.example) [bad](javascript:alert(1)) "
                    "[file](file:///etc/passwd)")
    assert "<img" not in markup and "&lt;img src=x onerror=alert(1)&gt;" in markup
    assert '<a href="https://a.example/?q=1&amp;r=%222%22">ok</a>' in markup
    assert '<a href="mailto:a@b.example">mail</a>' in markup
    assert markup.count("<a ") == 2
    assert tags(markup) <= ALLOWED


def test_at_room_notifies_nobody_in_the_html_or_the_body() -> None:
    (part,) = render_parts("ping @room and @ROOM, not ops@room.example\n\n`@room`", 6000)
    assert "@room" not in part.html.replace("ops@room", "") and "@\u200broom" in part.html
    assert part.plain.count("@\u200b") == 3 and "ops@room.example" in part.plain
    assert harmless("@room") == "@\u200broom"


def test_a_line_break_is_a_br() -> None:
    assert render("one\ntwo") == "<p>one<br>two</p>"


def test_a_long_text_is_split_between_blocks_each_part_balanced_and_within_the_limit() -> None:
    text = "\n\n".join(f"paragraph {i} " + "word " * 40 for i in range(30))
    parts = render_parts(text, 1000)
    assert len(parts) > 1 and all(len(p.html) <= 1000 for p in parts)
    for part in parts:
        assert part.html.count("<p>") == part.html.count("</p>")
    assert message_parts(text, 1000) == [p.plain for p in parts]
    assert " ".join(p.plain for p in parts).split() == text.split()


def test_a_code_block_longer_than_a_message_is_cut_into_closed_blocks() -> None:
    code = "\n".join(f"line {i:04d} " + "x" * 60 for i in range(100))
    parts = render_parts(f"```\n{code}\n```", 1500)
    assert len(parts) > 1 and all(len(p.html) <= 1500 for p in parts)
    for part in parts:
        assert part.html.count("<pre>") == part.html.count("</pre>")
        assert part.plain.count("```") % 2 == 0
    assert "line 0099" in parts[-1].html


def test_nothing_is_no_part() -> None:
    assert render_parts("", 100) == [] and render_parts("   ", 100) == []
