"""The ownership rule, branch by branch (pure function, no I/O)."""

from __future__ import annotations

import time

import pytest

from gateway.delivery.notifications import Notification
from gateway.delivery.ownership import DeliverNotice, DeliverTurn, OwnerFacts, Park, resolve_owner
from gateway.words.return_address import ReturnAddress
from gateway.words.route import Route
from gateway.words.session_entry import SessionEntry

TOPIC = Route("telegram", "group", "-1001", thread_id="42", user_id="7", message_id="555")
KEY = "agent:main:telegram:group:-1001:42"


def session(key: str = KEY, route: Route = TOPIC, ended: str | None = None, sid: str = "s1",
            parent: str | None = None) -> SessionEntry:
    now = time.time()
    return SessionEntry(id=sid, session_key=key, route=route.with_anchor("999"), created_at=now,
                        last_active_at=now, ended_at=now if ended else None, end_reason=ended,
                        parent_session_id=parent)


def notification(key: str = KEY, sid: str = "s1", route: Route = TOPIC,
                 address_json: str | None = None, kind: str = "completion",
                 tab: str | None = None) -> Notification:
    address = ReturnAddress(session_key=key, session_id=sid, route=route, tab_id=tab)
    return Notification(
        id=1, idempotency_key="j1:completion:0", kind=kind, job_id="j1",
        session_key=key, session_id=sid, tab_id=tab,
        address_json=address_json if address_json is not None else address.to_json(),
        text="done", state="claimed", reason=None, attempts=0, last_error=None,
        not_before=None, claimed_by="r", sent_message_id=None, created_at=time.time(),
        delivered_at=None)


def facts(s: SessionEntry | None, tip: SessionEntry | None = None,
          tab: SessionEntry | None = None) -> OwnerFacts:
    return OwnerFacts(session=s, tip=tip, tab_session=tab)


def test_a_live_owner_gets_a_turn_in_its_topic_under_the_captured_anchor() -> None:
    decision = resolve_owner(notification(), facts(session()), {"telegram"})
    assert isinstance(decision, DeliverTurn)
    assert (decision.route.chat_id, decision.route.thread_id) == ("-1001", "42")
    assert decision.route.message_id == "555"  # captured at start, not the session's latest


def test_an_ended_owner_gets_a_labelled_job_notice_and_no_turn() -> None:
    decision = resolve_owner(notification(), facts(session(ended="new")), {"telegram"})
    assert isinstance(decision, DeliverNotice)
    assert decision.route.thread_id == "42"


def test_a_delegation_result_for_an_ended_owner_is_parked_owner_ended() -> None:
    n = notification(kind="async_delegation")
    decision = resolve_owner(n, facts(session(ended="new")), {"telegram"})
    assert isinstance(decision, Park) and decision.reason == "owner_ended"


def test_a_compressed_owner_hands_over_to_the_live_tip_of_its_lineage() -> None:
    tip = session(sid="s3", parent="s2")
    for kind in ("completion", "async_delegation"):
        decision = resolve_owner(notification(kind=kind),
                                 facts(session(ended="compression"), tip=tip), {"telegram"})
        assert isinstance(decision, DeliverTurn) and decision.session.id == "s3"
        assert decision.route.message_id == "555"


def test_a_lineage_whose_tip_was_reset_does_not_reach_the_new_session() -> None:
    ended_tip = session(sid="s3", parent="s2", ended="new")
    decision = resolve_owner(notification(kind="async_delegation"),
                             facts(session(ended="compression"), tip=ended_tip), {"telegram"})
    assert isinstance(decision, Park) and decision.reason == "owner_ended"


def test_an_open_tab_proves_ownership_when_the_session_lookup_fails() -> None:
    web = Route("web", "dm", "conv1")
    key = "agent:main:web:dm:conv1"
    live = session(key=key, route=web, sid="s9")
    n = notification(key=key, sid="unknown", route=web, tab="tab1", kind="async_delegation")
    decision = resolve_owner(n, facts(None, tab=live), {"web"})
    assert isinstance(decision, DeliverTurn) and decision.session.id == "s9"
    # the same lookup without the tab proves nothing
    assert isinstance(resolve_owner(n, facts(None), {"web"}), Park)
    # and a tab open on another conversation proves nothing either
    other = session(key="agent:main:web:dm:conv2", route=Route("web", "dm", "conv2"))
    assert isinstance(resolve_owner(n, facts(None, tab=other), {"web"}), Park)


def test_an_open_tab_does_not_undo_a_reset() -> None:
    web = Route("web", "dm", "conv1")
    key = "agent:main:web:dm:conv1"
    n = notification(key=key, route=web, tab="tab1", kind="async_delegation")
    new_session = session(key=key, route=web, sid="s2")
    decision = resolve_owner(n, facts(session(key=key, route=web, ended="new"), tab=new_session),
                             {"web"})
    assert isinstance(decision, Park) and decision.reason == "owner_ended"


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
    decision = resolve_owner(n, facts(s), platforms)
    assert isinstance(decision, Park) and decision.reason == reason
