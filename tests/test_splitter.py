from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.formatting.splitter import FENCE, split_message, utf16_len


def _unfenced(parts: list[str]) -> str:
    """The text with the fence lines the splitter added or kept removed."""
    return "".join(
        line for part in parts for line in part.splitlines() if not line.startswith(FENCE))


def _balanced(part: str) -> bool:
    return sum(1 for line in part.splitlines() if line.strip().startswith(FENCE)) % 2 == 0


def test_short_text_is_one_part() -> None:
    assert split_message("hello", 4096) == ["hello"]


def test_a_long_code_block_stays_a_code_block_in_every_part() -> None:
    code = "\n".join(f"line {i}: " + "x" * 40 for i in range(400))
    text = f"Output:\n```python\n{code}\n```\nDone."
    parts = split_message(text, 4096)
    assert len(parts) > 1
    assert all(len(p) <= 4096 for p in parts)
    assert all(_balanced(p) for p in parts)
    assert all(p.lstrip().startswith("```python") for p in parts[1:-1])
    assert _unfenced(parts).replace("\n", "") == _unfenced([text]).replace("\n", "")


def test_utf16_counting_for_telegram() -> None:
    text = "😀" * 3000  # 6000 UTF-16 units, 3000 code points
    parts = split_message(text, 4096, utf16_len)
    assert len(parts) == 2
    assert all(utf16_len(p) <= 4096 for p in parts)
    assert "".join(parts) == text


blocks = st.lists(
    st.one_of(
        st.text(alphabet=st.characters(blacklist_characters="`"), max_size=300),
        st.builds(lambda lang, body: f"```{lang}\n{body}\n```", st.sampled_from(["", "py", "sh"]),
                  st.text(alphabet=st.characters(blacklist_characters="`"), max_size=3000)),
    ),
    max_size=8,
).map("\n".join)


@settings(max_examples=200)
@given(blocks, st.sampled_from([100, 2000, 4096]))
def test_parts_fit_keep_fences_balanced_and_lose_nothing(text: str, limit: int) -> None:
    parts = split_message(text, limit)
    assert all(len(p) <= limit for p in parts)
    assert all(_balanced(p) for p in parts)
    squash = lambda s: "".join(s.split())  # noqa: E731 - whitespace at cuts may move
    assert squash(_unfenced(parts)) == squash(_unfenced([text]))
