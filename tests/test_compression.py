"""Which turns a compression keeps: whole turns only, so no tool call loses its result."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from agent.compression import render, split_for_compression
from agent.history import Message, estimate_tokens, notice_message
from agent.model_client import retry_after


def _turn(kind: str, size: int, calls: int) -> list[Message]:
    opening = (notice_message("x" * size, 1) if kind == "notice"
               else {"role": "user", "content": "u" * size})
    turn = [opening]
    for i in range(calls):
        turn.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": f"c{i}", "type": "function",
             "function": {"name": "terminal", "arguments": "{}"}}]})
        turn.append({"role": "tool", "tool_call_id": f"c{i}", "content": "r" * size})
    turn.append({"role": "assistant", "content": "a" * size})
    return turn


turns = st.lists(st.tuples(st.sampled_from(["user", "notice"]), st.integers(0, 3000),
                           st.integers(0, 3)), max_size=12)


@given(turns, st.integers(1, 5), st.integers(0, 5000))
def test_the_kept_turns_are_whole_recent_and_within_budget(spec, keep_turns, keep_tokens):
    history = [m for kind, size, calls in spec for m in _turn(kind, size, calls)]
    older, recent = split_for_compression(history, keep_turns, keep_tokens)
    tail = history[len(older):]
    assert history[:len(older)] == older and len(recent) == len(tail)
    if history:
        assert recent and recent[0]["role"] in ("user", "system")  # the last turn stays
    openings = [m for m in recent if m["role"] in ("user", "system")]
    assert len(openings) <= keep_turns
    if recent == tail and len(openings) > 1:
        assert sum(estimate_tokens(m) for m in recent) <= keep_tokens
    if recent != tail:  # the last turn alone, too long: its tool results were cut short
        assert len(openings) == 1
        for kept, whole in zip(recent, tail, strict=True):
            assert kept["role"] == whole["role"]
            assert kept == whole or kept["content"].endswith("compressed]")
    answered = [m["tool_call_id"] for m in recent if m["role"] == "tool"]
    asked = [c["id"] for m in recent for c in m.get("tool_calls") or ()]
    assert answered == asked


def test_the_summariser_sees_the_first_turn_even_when_the_rest_is_long() -> None:
    history = [{"role": "user", "content": "deploy to staging first"},
               *({"role": "assistant", "content": "z" * 5000} for _ in range(20))]
    text = render(history, limit_chars=4000)
    assert "deploy to staging first" in text
    assert len(text) < 20 * 220 + 100


def test_retry_after_reads_seconds_milliseconds_and_dates() -> None:
    assert retry_after({"retry-after": "2"}) == 2.0
    assert retry_after({"retry-after-ms": "1500", "retry-after": "9"}) == 1.5
    assert 55 < retry_after({"retry-after": _http_date(60)}) <= 60
    assert retry_after({"retry-after": "soon"}) is None
    assert retry_after({}) is None


def _http_date(seconds_ahead: int) -> str:
    import email.utils
    import time
    return email.utils.formatdate(time.time() + seconds_ahead, usegmt=True)
