"""The web chat's conversations as a person sees them: titles, the last message, the
whole transcript across /new, notices that say how their work went, and a late notice
from an ended session that never takes the page away from the live one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gateway.daemon.assembly import running_gateway
from tests.fakes.openai_server import FakeOpenAI, Say
from tests.model_support import model_config, web_base
from tests.test_web import Tab, open_tab


async def frames_until(tab: Tab, done: Any, limit: int = 20) -> list[dict[str, Any]]:
    frames: list[dict[str, Any]] = []
    while not frames or not done(frames[-1]):
        frames.append(await tab.frame(10))
        assert len(frames) <= limit, frames
    return frames


async def test_a_conversation_is_named_by_its_first_message_until_renamed(web, http) -> None:
    _, base = web
    tab = await open_tab(http, base)
    conversation = tab.ready["conversation"]
    await tab.say("  Deploy the   staging box\nand then the rest")
    await tab.frame()
    async with http.get(f"{base}/api/conversations") as r:
        (found,) = [c for c in (await r.json())["conversations"]
                    if c["conversation"] == conversation]
    assert found["title"] == "Deploy the staging box"
    assert found["last"]["role"] == "reply" and found["live"] is True
    async with http.patch(f"{base}/api/conversations/{conversation}",
                          json={"title": "Staging"}) as r:
        assert r.status == 200 and (await r.json())["title"] == "Staging"
    await tab.say("/new")
    await tab.frame()
    async with http.get(f"{base}/api/conversations") as r:
        (found,) = [c for c in (await r.json())["conversations"]
                    if c["conversation"] == conversation]
    assert found["title"] == "Staging"  # the new session keeps the conversation's name
    assert found["session_id"] != tab.ready["session_id"]


async def listed(http: Any, base: str, conversation: str) -> dict[str, Any]:
    async with http.get(f"{base}/api/conversations") as r:
        (found,) = [c for c in (await r.json())["conversations"]
                    if c["conversation"] == conversation]
    return found  # type: ignore[no-any-return]


async def test_a_command_names_no_conversation_and_the_last_line_is_plain_words(
        tmp_path: Path, model: FakeOpenAI, http: Any) -> None:
    model.brain = lambda req: Say(
        "## Deploy plan\n\n**Approval needed** (a2293e5d): run `make deploy`")
    async with running_gateway(model_config(tmp_path / "home", model)) as gw:
        base = web_base(gw)
        tab = await open_tab(http, base)
        conversation = tab.ready["conversation"]
        await tab.say("/help")
        assert (await tab.frame())["kind"] == "system"
        found = await listed(http, base, conversation)
        assert found["title"] is None  # "/help" is no name: the page says "New conversation"
        assert found["last"]["plain"].startswith("Commands: /help — list the commands")

        await tab.say("**Ship** the `v2` release\nwith its notes")
        assert (await tab.frame(10))["kind"] == "reply"
        found = await listed(http, base, conversation)
        assert found["title"] == "Ship the v2 release"  # the first that is not a command
        assert found["last"]["plain"] == "Deploy plan Approval needed (a2293e5d): run make deploy"
        assert found["last"]["text"] == "## Deploy plan"  # the field as it was: as written


async def test_after_new_the_sidebar_line_says_new_session_and_never_its_ids(
        web, http) -> None:
    _, base = web
    tab = await open_tab(http, base)
    conversation, first = tab.ready["conversation"], tab.ready["session_id"]
    await tab.say("hello")
    await tab.frame()
    await tab.say("/new")
    started = await tab.frame()
    assert started["new_session"]["previous_session_id"] == first
    found = await listed(http, base, conversation)
    assert found["last"]["role"] == "system"
    assert found["last"]["plain"] == "New session"  # the ids are the bubble's details
    assert started["session_id"] in found["last"]["text"]  # the field as written

    # the same words typed are quoted as they are: only the gateway's line is renamed
    await tab.say(f"Started a new session ({first}). The previous one ({first}) is closed.")
    assert (await tab.frame())["kind"] == "reply"
    found = await listed(http, base, conversation)
    assert found["last"]["plain"].startswith(f"Received: Started a new session ({first})")


async def test_the_transcript_is_the_whole_conversation_and_late_notices_stay_put(
        web, http) -> None:
    _, base = web
    tab = await open_tab(http, base)
    conversation, first_session = tab.ready["conversation"], tab.ready["session_id"]
    await tab.say("/bg sleep 0.5; echo late-result; exit 3")
    await tab.frame()
    await tab.say("/new")
    started = await tab.frame()
    assert started["kind"] == "system" and started["live"] is True
    live_session = started["session_id"]
    # what the page says "New session" for, with the ids it keeps under details
    named = {"session_id": live_session, "previous_session_id": first_session}
    assert started["new_session"] == named
    notice = (await frames_until(tab, lambda f: f.get("kind") == "notification"))[-1]
    assert notice["session_id"] == first_session and notice["live"] is False
    assert notice["notice"] == {"kind": "completion", "outcome": "failed"}
    assert "late-result" in notice["html"]
    async with http.get(f"{base}/api/conversations/{conversation}/messages") as r:
        body = await r.json()
    assert [s["id"] for s in body["sessions"]] == [first_session, live_session]
    assert body["live_session_id"] == live_session
    kinds = [(m["session_id"], m["role"]) for m in body["messages"]]
    assert kinds[0] == (first_session, "user")
    assert (first_session, "notification") in kinds and (live_session, "system") in kinds
    (stored,) = [m for m in body["messages"] if m["role"] == "notification"]
    assert stored["notice"] == {"kind": "completion", "outcome": "failed"}
    (new_line,) = [m for m in body["messages"] if m["role"] == "system"]
    assert new_line["new_session"] == named  # a reloaded page says it the same way
    assert all("new_session" not in m for m in body["messages"] if m is not new_line)


async def test_a_job_that_succeeds_says_so(web, http) -> None:
    _, base = web
    tab = await open_tab(http, base)
    await tab.say("/bg echo fine")
    await tab.frame()
    notice = (await frames_until(tab, lambda f: f.get("kind") == "notification"))[-1]
    assert notice["notice"] == {"kind": "completion", "outcome": "ok"} and notice["live"]


async def test_start_is_a_welcome_with_the_user_id_not_agent_input(web, http) -> None:
    _, base = web
    tab = await open_tab(http, base)
    await tab.say("/start")
    welcome = await tab.frame()
    assert welcome["kind"] == "system"
    assert "Your web user id is web." in welcome["text"] and "/help" in welcome["text"]


async def test_conversation_requests_are_checked(web, http) -> None:
    _, base = web
    async with http.get(f"{base}/api/conversations/nope!/messages") as r:
        assert r.status == 400
    async with http.get(f"{base}/api/conversations/never-seen/messages") as r:
        assert r.status == 404
    async with http.patch(f"{base}/api/conversations/never-seen",
                          json={"title": "x"}) as r:
        assert r.status == 404
    async with http.get(f"{base}/api/conversations?archived=maybe") as r:
        assert r.status == 400
