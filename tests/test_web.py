"""The built-in web chat, through its real WebSocket and REST API."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from gateway.daemon.assembly import running_gateway
from gateway.words.route import Route
from tests.conftest import make_config
from tests.helpers import eventually_async


class Tab:
    """One browser tab: a WebSocket with its ready frame."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse, ready: dict[str, Any]) -> None:
        self.ws, self.ready = ws, ready
        #: streamed replies' delta frames, set aside by frame() (tests of streaming
        #: read them with deltas=True)
        self.deltas: list[dict[str, Any]] = []

    async def say(self, text: str) -> None:
        await self.ws.send_str(json.dumps({"type": "message", "text": text}))

    async def frame(self, timeout: float = 20, *, deltas: bool = False) -> dict[str, Any]:
        while True:
            frame = await self.ws.receive_json(timeout=timeout)
            if deltas or frame.get("type") != "delta":
                return frame
            self.deltas.append(frame)

    async def no_frame(self, wait: float = 0.3) -> None:
        with pytest.raises(asyncio.TimeoutError):
            frame = await self.frame(timeout=wait)
            pytest.fail(f"unexpected frame {frame}")


async def open_tab(http: aiohttp.ClientSession, base: str, conversation: str | None = None,
                   **query: str) -> Tab:
    if conversation:
        query["conversation"] = conversation
    ws = await http.ws_connect(f"{base}/ws", params=query)
    ready = await ws.receive_json(timeout=20)
    assert ready["type"] == "ready"
    return Tab(ws, ready)


async def test_each_conversation_hears_only_its_own_frames(web, http) -> None:
    _, base = web
    a, b = await open_tab(http, base), await open_tab(http, base)
    assert a.ready["conversation"] != b.ready["conversation"]
    assert a.ready["session_key"] == f"agent:main:web:dm:{a.ready['conversation']}"
    await asyncio.gather(a.say("from A"), b.say("from B"))
    reply_a, reply_b = await a.frame(), await b.frame()
    assert (reply_a["kind"], reply_b["kind"]) == ("reply", "reply")
    assert "from A" in reply_a["text"] and "from B" in reply_b["text"]
    assert reply_a["session_id"] == a.ready["session_id"]
    await a.no_frame()
    await b.no_frame(0.05)


async def test_two_tabs_on_one_conversation_both_receive_its_frames(web, http) -> None:
    _, base = web
    first = await open_tab(http, base)
    second = await open_tab(http, base, first.ready["conversation"])
    other = await open_tab(http, base)
    assert second.ready["session_id"] == first.ready["session_id"]
    assert second.ready["tab"] != first.ready["tab"]
    await first.say("hello both")
    for tab in (first, second):
        frame = await tab.frame()
        assert (frame["type"], frame["kind"]) == ("message", "reply")
        assert "hello both" in frame["text"]
        assert frame["session_id"] == first.ready["session_id"]
    await other.no_frame()


async def test_a_tab_can_ask_to_see_what_other_tabs_send(web, http) -> None:
    _, base = web
    first = await open_tab(http, base)
    second = await open_tab(http, base, first.ready["conversation"], echo="1")
    await first.say("hello both")
    echo = await second.frame()
    assert (echo["kind"], echo["text"], echo["from_tab"]) == (
        "user", "hello both", first.ready["tab"])
    assert "hello both" in (await first.frame())["text"]
    assert "hello both" in (await second.frame())["text"]
    await first.no_frame(0.05)  # no echo of its own message


async def test_new_rotates_the_session_id_and_keeps_the_key(web, http) -> None:
    runner, base = web
    tab = await open_tab(http, base)
    await tab.say("/new")
    frame = await tab.frame()
    assert frame["kind"] == "system"
    assert frame["session_key"] == tab.ready["session_key"]
    assert frame["session_id"] != tab.ready["session_id"]
    live = await runner.store.live_session(tab.ready["session_key"])
    assert live is not None and live.id == frame["session_id"]
    rejoined = await open_tab(http, base, tab.ready["conversation"])
    assert rejoined.ready["session_id"] == frame["session_id"]


@pytest.mark.parametrize(("raw", "error"), [
    ("not json", "not valid JSON"),
    ("[1, 2]", "JSON object"),
    ('{"type": "typing"}', "unknown frame type"),
    ('{"type": "message", "text": ""}', "non-empty string"),
    ('{"type": "message", "text": 5}', "non-empty string"),
    (json.dumps({"type": "message", "text": "x" * 70_000}), "message too long"),
    (json.dumps({"type": "typing", "text": "x" * 70_000}), "frame too large"),
])
async def test_bad_frames_get_an_error_and_the_tab_stays_open(web, http, raw, error) -> None:
    _, base = web
    tab = await open_tab(http, base)
    await tab.ws.send_str(raw)
    frame = await tab.frame()
    assert frame["type"] == "error" and error in frame["error"]
    await tab.say("still here?")
    assert "still here?" in (await tab.frame())["text"]


async def test_binary_frames_are_refused_politely(web, http) -> None:
    _, base = web
    tab = await open_tab(http, base)
    await tab.ws.send_bytes(b"\x00\x01")
    assert (await tab.frame())["type"] == "error"
    await tab.say("ok")
    assert (await tab.frame())["kind"] == "reply"


async def test_an_invalid_conversation_id_is_refused(web, http) -> None:
    _, base = web
    with pytest.raises(aiohttp.WSServerHandshakeError) as err:
        await http.ws_connect(f"{base}/ws?conversation=../../etc")
    assert err.value.status == 400


async def test_sessions_api_lists_renames_archives_and_shows_transcripts(web, http) -> None:
    _, base = web
    tab = await open_tab(http, base)
    sid = tab.ready["session_id"]
    await tab.say("remember me")
    await tab.frame()

    async with http.get(f"{base}/api/sessions") as resp:
        listed = (await resp.json())["sessions"]
    mine = next(s for s in listed if s["id"] == sid)
    assert mine["conversation"] == tab.ready["conversation"] and mine["archived"] is False

    async with http.patch(f"{base}/api/sessions/{sid}",
                          json={"title": "deploys", "archived": True}) as resp:
        assert resp.status == 200
        assert (await resp.json())["title"] == "deploys"
    for archived, present in (("exclude", False), ("only", True), ("include", True)):
        async with http.get(f"{base}/api/sessions?archived={archived}") as resp:
            ids = [s["id"] for s in (await resp.json())["sessions"]]
        assert (sid in ids) is present, archived

    async with http.get(f"{base}/api/sessions/{sid}/messages") as resp:
        lines = (await resp.json())["messages"]
    assert [line["role"] for line in lines] == ["user", "reply"]
    assert lines[0]["text"] == "remember me"


async def test_sessions_api_pages_with_a_total_and_the_next_offset(web, http) -> None:
    runner, base = web
    routes = [Route("web", "dm", f"c{n}", user_id=f"c{n}") for n in range(1234)]
    created = await asyncio.gather(*(runner.store.get_or_create(
        runner.session_key_for(r), r) for r in routes))
    async with http.get(f"{base}/api/sessions") as resp:
        first = await resp.json()
    assert len(first["sessions"]) == 1000  # the default page, not all of them silently
    assert (first["total"], first["next_offset"]) == (1234, 1000)
    async with http.get(f"{base}/api/sessions?offset={first['next_offset']}") as resp:
        rest = await resp.json()
    assert len(rest["sessions"]) == 234
    assert (rest["total"], rest["next_offset"]) == (1234, None)
    # every session once across the pages: none repeated, none skipped
    ids = [s["id"] for s in first["sessions"] + rest["sessions"]]
    assert sorted(ids) == sorted(s.id for s in created)
    async with http.get(f"{base}/api/sessions?archived=include&limit=10&offset=20") as resp:
        page = await resp.json()
    assert [s["id"] for s in page["sessions"]] == ids[20:30]
    assert (page["total"], page["next_offset"]) == (1234, 30)
    async with http.get(f"{base}/api/sessions?offset=" + "9" * 40) as resp:
        past = await resp.json()  # past the end: an empty page, not a failing query
    assert resp.status == 200 and past["sessions"] == [] and past["next_offset"] is None


@pytest.mark.parametrize(("query", "named"), [
    ("limit=0", "limit"), ("limit=1001", "limit"), ("limit=ten", "limit"), ("limit=", "limit"),
    ("limit=-5", "limit"), ("offset=-1", "offset"), ("offset=1.5", "offset"),
    ("offset=%D9%A1", "offset"),  # an Arabic-Indic one: a digit, but not a number here
])
async def test_a_bad_page_of_sessions_is_refused_by_name(web, http, query, named) -> None:
    _, base = web
    async with http.get(f"{base}/api/sessions?{query}") as resp:
        assert resp.status == 400
        assert (await resp.json())["error"].startswith(f"{named} must be a whole number")


@pytest.mark.parametrize(("method", "path", "body", "status"), [
    ("GET", "/api/sessions?archived=sometimes", None, 400),
    ("PATCH", "/api/sessions/{sid}", {}, 400),
    ("PATCH", "/api/sessions/{sid}", {"archived": "yes"}, 400),
    ("PATCH", "/api/sessions/{sid}", {"title": 7}, 400),
    ("PATCH", "/api/sessions/{sid}", {"colour": "red"}, 400),
    ("PATCH", "/api/sessions/nope", {"title": "x"}, 404),
    ("GET", "/api/sessions/nope/messages", None, 404),
])
async def test_rest_errors(web, http, method, path, body, status) -> None:
    _, base = web
    tab = await open_tab(http, base)
    url = base + path.format(sid=tab.ready["session_id"])
    async with http.request(method, url, json=body) as resp:
        assert resp.status == status
        assert "error" in await resp.json()


async def test_a_token_is_required_on_every_request_when_set(tmp_path: Path, http) -> None:
    config = make_config(tmp_path, platforms__web__token="s3cret")
    async with running_gateway(config) as gateway:
        base = f"http://127.0.0.1:{gateway.runner.adapters['web'].port}"
        async with http.get(f"{base}/api/sessions") as resp:
            assert resp.status == 401
        with pytest.raises(aiohttp.WSServerHandshakeError):
            await http.ws_connect(f"{base}/ws")
        async with http.get(f"{base}/api/sessions",
                            headers={"Authorization": "Bearer s3cret"}) as resp:
            assert resp.status == 200
        ws = await http.ws_connect(f"{base}/ws?token=s3cret")
        assert (await ws.receive_json(timeout=20))["type"] == "ready"
        await ws.close()


async def test_the_chat_page_is_served(web, http) -> None:
    _, base = web
    async with http.get(base + "/") as resp:
        assert resp.status == 200
        page = await resp.text()
    assert 'id="messages"' in page and "/ws" in page


async def _frames_until(tab: Tab, predicate, timeout: float = 10) -> list[dict[str, Any]]:
    seen = []
    while True:
        frame = await tab.frame(timeout)
        seen.append(frame)
        if predicate(frame):
            return seen


async def test_job_notices_reach_only_their_conversation_and_wait_for_a_busy_one(
        web, http, tmp_path: Path) -> None:
    runner, base = web
    a, b = await open_tab(http, base), await open_tab(http, base)
    await a.say("/bg sleep 1; echo marker-A")
    await b.say("/bg sleep 1; echo marker-B")
    started_a = (await a.frame())["text"]
    assert "Started job" in started_a
    assert "Started job" in (await b.frame())["text"]
    job_a = started_a.split()[2].rstrip(",;")
    go_on = tmp_path / "go-on"  # A is mid-turn when its job ends, until this is there
    await a.say(f"/run while [ ! -e {go_on} ]; do sleep 0.05; done; echo slow-done")

    arrivals: list[tuple[str, dict[str, Any]]] = []  # both tabs, in arrival order

    async def collect(name: str, tab: Tab, count: int) -> None:
        for _ in range(count):
            arrivals.append((name, await tab.frame(15)))

    async def a_notice_claimed() -> bool:  # the router has it in hand, in A's lane
        return bool(await runner.store.db.fetchall(
            "SELECT 1 FROM notifications WHERE job_id = ? AND state = 'claimed'", (job_a,)))

    await collect("B", b, 1)  # while A's turn goes on
    await eventually_async(a_notice_claimed, timeout=30, what="A's notice claimed")
    await a.no_frame(0.2)  # and kept back
    go_on.touch()
    await collect("A", a, 2)
    order = [(name, f["kind"], _marker(f["text"])) for name, f in arrivals]
    assert order == [("B", "notification", "marker-B"),  # B at once, while A is busy
                     ("A", "reply", "slow-done"),         # A's turn ends first,
                     ("A", "notification", "marker-A")]   # then A gets its notice
    await b.no_frame()
    await a.no_frame(0.05)


def _marker(text: str) -> str:
    return next(word for word in text.split() if word.startswith(("marker-", "slow-")))


@pytest.mark.parametrize("headers", [
    {"Origin": "https://evil.example"},
    {"Host": "attacker.example:8765"},
])
async def test_without_a_token_foreign_pages_are_refused(web, http, headers) -> None:
    _, base = web
    async with http.get(f"{base}/api/sessions", headers=headers) as resp:
        assert resp.status == 403
    with pytest.raises(aiohttp.WSServerHandshakeError) as err:
        await http.ws_connect(f"{base}/ws", headers=headers)
    assert err.value.status == 403


async def test_a_plain_get_of_the_socket_creates_nothing(web, http) -> None:
    runner, base = web
    async with http.get(f"{base}/ws") as resp:
        assert resp.status == 400
    assert await runner.store.list_sessions("include") == []


async def test_archiving_hides_a_session_but_its_notices_still_arrive(web, http) -> None:
    runner, base = web
    tab = await open_tab(http, base)
    async with http.patch(f"{base}/api/sessions/{tab.ready['session_id']}",
                          json={"archived": True}) as resp:
        assert resp.status == 200
    await tab.say("/bg sleep 0.3; echo archived-but-alive")
    assert "Started job" in (await tab.frame())["text"]
    notice = await tab.frame()
    assert notice["kind"] == "notification" and "archived-but-alive" in notice["text"]
    entry = await runner.store.get(tab.ready["session_id"])
    assert entry is not None and entry.archived and entry.is_live


async def test_closing_a_tab_ends_nothing(web, http) -> None:
    runner, base = web
    tab = await open_tab(http, base)
    await tab.say("/bg sleep 0.5; echo done-while-closed")
    assert "Started job" in (await tab.frame())["text"]
    await tab.ws.close()

    async def delivered() -> list:
        return await runner.store.messages(tab.ready["session_id"])

    lines = await eventually_async(
        lambda: _with_notice(delivered), what="the notice in the transcript")
    assert any("done-while-closed" in line.text for line in lines)
    again = await open_tab(http, base, tab.ready["conversation"])
    assert again.ready["session_id"] == tab.ready["session_id"]


async def _with_notice(fetch) -> list:
    lines = await fetch()
    return lines if any(line.role == "notification" for line in lines) else []


async def test_a_fenced_life_closes_its_tabs_with_1001_at_once(tmp_path: Path,
                                                                http: aiohttp.ClientSession
                                                                ) -> None:
    """What a daemon does when its life among the instances ends: the pages are told to
    go elsewhere now (1001), through the adapter the runner holds behind its fence."""
    from gateway.daemon.assembly import _close_listeners
    from gateway.platforms.web.adapter import WebAdapter

    async with running_gateway(make_config(tmp_path / "home")) as gw:
        web = gw.runner.adapters["web"].inner  # the platform's own, behind the fence
        assert isinstance(web, WebAdapter)
        tab = await open_tab(http, f"http://127.0.0.1:{web.port}")
        # (the page answers the close as it reads it, while the server closes)
        closing, _ = await asyncio.wait_for(asyncio.gather(
            tab.ws.receive(), _close_listeners(gw)), 20)
        assert closing.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED)
        assert tab.ws.close_code == 1001
