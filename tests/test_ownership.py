"""The ownership rule, branch by branch (pure function, no I/O)."""

from __future__ import annotations

import time

import pytest

from gateway.notifications import Notification, ReturnAddress
from gateway.ownership import DeliverNotice, DeliverTurn, Park, resolve_owner
from gateway.route import Route
from gateway.store import SessionEntry

TOPIC = Route("telegram", "group", "-1001", thread_id="42", user_id="7", message_id="555")
KEY = "agent:main:telegram:group:-1001:42"


def session(key: str = KEY, route: Route = TOPIC, ended: bool = False, sid: str = "s1"
            ) -> SessionEntry:
    now = time.time()
    return SessionEntry(id=sid, session_key=key, route=route.with_anchor("999"), created_at=now,
                        last_active_at=now, ended_at=now if ended else None,
                        end_reason="new" if ended else None)


def notification(key: str = KEY, sid: str = "s1", route: Route = TOPIC,
                 address_json: str | None = None) -> Notification:
    address = ReturnAddress(session_key=key, session_id=sid, route=route)
    return Notification(
        id=1, idempotency_key="j1:completion:0", kind="completion", job_id="j1",
        session_key=key, session_id=sid, tab_id=None,
        address_json=address_json if address_json is not None else address.to_json(),
        text="done", state="claimed", reason=None, attempts=0, last_error=None,
        not_before=None, claimed_by="r", sent_message_id=None, created_at=time.time(),
        delivered_at=None)


def test_a_live_owner_gets_a_turn_in_its_topic_under_the_captured_anchor() -> None:
    decision = resolve_owner(notification(), session(), {"telegram"})
    assert isinstance(decision, DeliverTurn)
    assert (decision.route.chat_id, decision.route.thread_id) == ("-1001", "42")
    assert decision.route.message_id == "555"  # captured at start, not the session's latest


def test_an_ended_owner_gets_a_labelled_notice_and_no_turn() -> None:
    decision = resolve_owner(notification(), session(ended=True), {"telegram"})
    assert isinstance(decision, DeliverNotice)
    assert decision.route.thread_id == "42"


@pytest.mark.parametrize(("n", "s", "platforms", "reason"), [
    (notification(key="garbage"), session(), {"telegram"}, "no_route"),
    (notification(key="agent:main:telegram:bogus:1"), session(), {"telegram"}, "no_route"),
    (notification(key="agent:main:matrix:dm:1"), session(), {"telegram"}, "unknown_platform"),
    (notification(), session(), {"web"}, "unknown_platform"),
    (notification(), None, {"telegram"}, "no_route"),  # the lookup failed: proves nothing
    (notification(address_json="{not json"), session(), {"telegram"}, "no_route"),
    (notification(), session(key="agent:main:telegram:group:-1001:17"), {"telegram"},
     "no_route"),
    (notification(), session(route=Route("telegram", "group", "-1002", thread_id="42")),
     {"telegram"}, "no_route"),
])
def test_anything_unproven_is_parked(n, s, platforms, reason) -> None:
    decision = resolve_owner(n, s, platforms)
    assert isinstance(decision, Park) and decision.reason == reason
