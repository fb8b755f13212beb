"""Telegram routes from real PTB Message objects (parsed from wire JSON)."""

from __future__ import annotations

from telegram import Message

from gateway.platforms.telegram.routes import route_of, send_arguments
from gateway.words.session_key import build_session_key


def message(chat: dict, **extra) -> Message:
    data = {"message_id": 7, "date": 0, "chat": chat, "text": "hi",
            "from": {"id": 5, "is_bot": False, "first_name": "Ann", "username": "ann"}, **extra}
    return Message.de_json(data, None)


FORUM = {"id": -1001, "type": "supergroup", "is_forum": True, "title": "Ops"}


def test_a_topic_message_is_its_topic() -> None:
    route = route_of(message(FORUM, message_thread_id=42, is_topic_message=True))
    assert (route.chat_type, route.chat_id, route.thread_id, route.message_id) == (
        "group", "-1001", "42", "7")
    assert send_arguments(route)["message_thread_id"] == 42


def test_a_reply_inside_general_is_not_a_topic() -> None:
    # a reply in General carries the replied-to message id as thread id, without is_topic_message
    route = route_of(message(FORUM, message_thread_id=3))
    assert route.thread_id is None
    assert "message_thread_id" not in send_arguments(route)


def test_the_general_topic_never_sends_thread_1() -> None:
    route = route_of(message(FORUM, message_thread_id=1, is_topic_message=True))
    assert route.thread_id is None
    assert "message_thread_id" not in send_arguments(route)


def test_dm_and_dm_topics_have_their_own_keys_and_a_reply_anchor() -> None:
    dm = route_of(message({"id": 5, "type": "private", "first_name": "Ann"}))
    topic = route_of(message({"id": 5, "type": "private", "first_name": "Ann"},
                             message_thread_id=9, is_topic_message=True))
    assert dm.chat_type == topic.chat_type == "dm"
    assert build_session_key(dm) != build_session_key(topic)
    args = send_arguments(topic)
    assert args["message_thread_id"] == 9 and args["reply_parameters"].message_id == 7


def test_same_topic_id_in_two_groups_is_two_conversations() -> None:
    other = {"id": -1002, "type": "supergroup", "is_forum": True, "title": "Dev"}
    a = route_of(message(FORUM, message_thread_id=42, is_topic_message=True))
    b = route_of(message(other, message_thread_id=42, is_topic_message=True))
    assert build_session_key(a) != build_session_key(b)


def test_channels_are_not_served() -> None:
    assert route_of(message({"id": -1003, "type": "channel", "title": "News"})) is None
