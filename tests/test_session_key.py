from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.words.route import Route
from gateway.words.session_key import (
    SessionKeyError,
    SessionKeyParts,
    build_session_key,
    format_session_key,
    key_parts_for,
    parse_session_key,
)

ids = st.text(min_size=1, max_size=24)
numeric_ids = st.integers(min_value=-10**13, max_value=10**13).map(str)
any_id = st.one_of(ids, numeric_ids)


@st.composite
def routes(draw: st.DrawFn) -> Route:
    chat_type = draw(st.sampled_from(["dm", "group", "channel", "thread"]))
    return Route(
        platform=draw(st.sampled_from(["telegram", "discord", "web"]) | ids),
        chat_type=chat_type,
        chat_id=draw(any_id),
        thread_id=draw(st.none() | any_id),
        user_id=draw(st.none() | any_id),
    )


@given(routes(), st.booleans(), st.booleans())
def test_build_and_parse_round_trip_for_every_shape(route: Route, per_user_group: bool,
                                                    per_user_thread: bool) -> None:
    opts = dict(group_sessions_per_user=per_user_group, thread_sessions_per_user=per_user_thread)
    key = build_session_key(route, **opts)
    parts = parse_session_key(key)
    assert parts == key_parts_for(route, **opts)
    assert parts.chat_id == route.chat_id
    assert parts.thread_id == route.thread_id  # a topic id is never lost
    assert format_session_key(parts) == key


@given(st.builds(SessionKeyParts, platform=ids, chat_type=st.sampled_from(["dm", "group"]),
                 chat_id=any_id, thread_id=st.none() | any_id, user_id=st.none() | any_id))
def test_parse_inverts_format(parts: SessionKeyParts) -> None:
    assert parse_session_key(format_session_key(parts)) == parts


def test_known_shapes() -> None:
    forum_topic = Route("telegram", "group", "-1001234567890", thread_id="42", user_id="7")
    assert build_session_key(forum_topic) == "agent:main:telegram:group:-1001234567890:42"
    assert build_session_key(forum_topic, thread_sessions_per_user=True) == (
        "agent:main:telegram:group:-1001234567890:42:7")
    group = Route("telegram", "group", "-100555", user_id="7")
    assert build_session_key(group) == "agent:main:telegram:group:-100555::7"
    assert build_session_key(group, group_sessions_per_user=False) == (
        "agent:main:telegram:group:-100555")
    dm = Route("telegram", "dm", "7", user_id="7")
    assert build_session_key(dm) == "agent:main:telegram:dm:7"
    thread = Route("discord", "thread", "998877", thread_id="998877", user_id="5")
    assert parse_session_key(build_session_key(thread)).thread_id == "998877"


def test_the_forum_topic_is_read_back_as_a_topic_not_a_user() -> None:
    parts = parse_session_key("agent:main:telegram:group:-1001234567890:42")
    assert (parts.thread_id, parts.user_id) == ("42", None)
    parts = parse_session_key("agent:main:telegram:group:-100555::7")
    assert (parts.thread_id, parts.user_id) == (None, "7")


@pytest.mark.parametrize("key", [
    "", "telegram:dm:1", "agent:main:telegram", "agent:main:telegram:dm",
    "agent:main:telegram:bogus:1", "agent:main::dm:1", "agent:main:telegram:dm:",
    "agent:main:telegram:group:1:", "agent:main:telegram:group:1:2:",
    "agent:main:telegram:group:1:2:3:4",
])
def test_malformed_keys_are_rejected(key: str) -> None:
    with pytest.raises(SessionKeyError):
        parse_session_key(key)
