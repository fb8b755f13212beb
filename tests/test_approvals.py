"""Approvals through the web chat: the model's dangerous command waits for a choice made
on the page, its outcome is decided once, and a restart keeps it pending."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from gateway.daemon import running_gateway

from .fakes.openai_server import CallTools, ChatRequest, FakeOpenAI, Response, Say
from .model_support import model_config, user_says, web_base
from .test_web import Tab, open_tab


def dangerous(marker: Path) -> str:
    """A command the built-in list asks about ("DROP TABLE"), harmless to run: it appends
    a line to ``marker``, so a test can count how often it ran."""
    return f"echo ran >> {marker}; echo 'DROP TABLE demo'"


def runner_brain(marker: Path, **calls: Any):
    """The model: "clean up" runs the dangerous command; a tool result is reported."""
    def brain(req: ChatRequest) -> Response:
        if req.last["role"] == "tool":
            return Say("tool said: " + req.last["content"])
        if user_says(req, "clean up"):
            return CallTools([("terminal", {"command": dangerous(marker), **calls})])
        return Say("ok")
    return brain


async def next_of(tab: Tab, kind: str, timeout: float = 10) -> dict[str, Any]:
    while True:
        frame = await tab.frame(timeout)
        if frame["type"] == kind:
            return frame


def runs(marker: Path) -> int:
    return marker.read_text().count("ran") if marker.exists() else 0


async def choose(tab: Tab, approval_id: str, decision: str) -> None:
    await tab.ws.send_str(json.dumps({"type": "approve", "id": approval_id,
                                      "decision": decision}))


async def test_approve_once_runs_the_command_and_its_result_comes_back(
        model_gateway, model: FakeOpenAI, http, tmp_path: Path) -> None:
    _, base = model_gateway
    marker = tmp_path / "marker"
    model.brain = runner_brain(marker)
    tab = await open_tab(http, base)
    await tab.say("clean up")
    asked = await next_of(tab, "approval")
    assert asked["command"] == dangerous(marker)
    assert asked["reason"] == "dropping a database or a table"
    await asyncio.sleep(0.2)
    assert runs(marker) == 0  # nothing runs before the choice

    await choose(tab, asked["id"], "once")
    decided = await next_of(tab, "approval_decided")
    assert (decided["id"], decided["state"], decided["decision"]) == (asked["id"], "approved",
                                                                      "once")
    reply = await next_of(tab, "message")
    assert reply["text"].startswith("tool said: ")
    result = json.loads(reply["text"].removeprefix("tool said: "))
    assert result["exit"] == "exit code 0" and "DROP TABLE demo" in result["output"]
    assert runs(marker) == 1


async def test_deny_and_timeout_do_not_run_it_and_the_model_is_told_why(
        tmp_path: Path, model: FakeOpenAI, http) -> None:
    marker = tmp_path / "marker"
    model.brain = runner_brain(marker)
    config = model_config(tmp_path / "home", model, approvals__timeout_seconds=0.5)
    async with running_gateway(config) as gw:
        tab = await open_tab(http, web_base(gw))
        await tab.say("clean up")
        asked = await next_of(tab, "approval")
        await choose(tab, asked["id"], "deny")
        assert (await next_of(tab, "approval_decided"))["state"] == "denied"
        told = json.loads((await next_of(tab, "message"))["text"].removeprefix("tool said: "))
        assert told["error"].startswith("not run: web denied it")

        await tab.say("clean up")  # no answer this time
        asked = await next_of(tab, "approval")
        expired = await next_of(tab, "approval_decided")
        assert (expired["id"], expired["state"]) == (asked["id"], "expired")
        told = json.loads((await next_of(tab, "message"))["text"].removeprefix("tool said: "))
        assert "nobody approved it within 0.5 s" in told["error"]
        await choose(tab, asked["id"], "once")  # too late: it stays expired
        late = await next_of(tab, "error")
        assert late["id"] == asked["id"] and "Already settled" in late["error"]
    assert runs(marker) == 0


async def test_approve_for_this_session_skips_the_question_until_new(
        model_gateway, model: FakeOpenAI, http, tmp_path: Path) -> None:
    _, base = model_gateway
    marker = tmp_path / "marker"
    model.brain = runner_brain(marker)
    tab = await open_tab(http, base)
    await tab.say("clean up")
    await choose(tab, (await next_of(tab, "approval"))["id"], "session")
    assert (await next_of(tab, "approval_decided"))["decision"] == "session"
    await next_of(tab, "message")

    await tab.say("clean up")  # the same kind of command, same session: not asked
    reply = await next_of(tab, "message")
    assert reply["text"].startswith("tool said: ") and runs(marker) == 2

    other = await open_tab(http, base)  # another conversation: its own session
    await other.say("clean up")
    await next_of(other, "approval")

    await tab.say("/new")
    await next_of(tab, "message")
    await tab.say("clean up")  # a new session: asked again
    await next_of(tab, "approval")
    assert runs(marker) == 2


async def test_two_tabs_and_a_deny_racing_decide_once(
        model_gateway, model: FakeOpenAI, http, tmp_path: Path) -> None:
    _, base = model_gateway
    marker = tmp_path / "marker"
    model.brain = runner_brain(marker)
    a = await open_tab(http, base)
    b = await open_tab(http, base, conversation=a.ready["conversation"])
    await a.say("clean up")
    asked = await next_of(a, "approval")
    assert (await next_of(b, "approval"))["id"] == asked["id"]
    await asyncio.gather(choose(a, asked["id"], "once"), choose(b, asked["id"], "deny"),
                         a.say(f"/deny {asked['id']}"), choose(b, asked["id"], "session"))
    frames: list[dict[str, Any]] = []
    while not any(f["type"] == "message" and f["text"].startswith("tool said")
                  for f in frames):
        frames.append(await a.frame(10))
    decided = [f for f in frames if f["type"] == "approval_decided"]
    assert len(decided) == 1  # one outcome, shown once
    refusals = [f for f in frames if f["type"] == "error"]
    notes = [f["text"] for f in frames if f["type"] == "message" and f["kind"] == "system"]
    # three of the four choices lost; tab A heard its own refusal (if it lost) or the /deny's
    assert len(refusals) + len(notes) >= 1
    result = json.loads(frames[-1]["text"].removeprefix("tool said: "))
    assert runs(marker) == (1 if decided[0]["state"] == "approved" else 0)
    assert ("error" in result) == (decided[0]["state"] == "denied")


async def test_a_pending_approval_is_shown_to_a_tab_that_opens_later(
        model_gateway, model: FakeOpenAI, http, tmp_path: Path) -> None:
    gw, base = model_gateway
    model.brain = runner_brain(tmp_path / "marker")
    tab = await open_tab(http, base)
    await tab.say("clean up")
    asked = await next_of(tab, "approval")
    late = await open_tab(http, base, conversation=tab.ready["conversation"])
    assert (await next_of(late, "approval"))["id"] == asked["id"]
    stranger = await open_tab(http, base)  # another conversation is not shown it
    await stranger.no_frame()
    await tab.say("/approve")  # the one waiting here, without its id
    assert (await next_of(late, "approval_decided"))["state"] == "approved"
    assert [r.state for r in await gw.runner.approvals.pending_in(
        tab.ready["session_key"])] == []
