"""Approvals through the web chat: the model's dangerous command waits for a choice made
on the page, its outcome is decided once, and a restart keeps it pending."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

from gateway.daemon.assembly import running_gateway
from tests.approval_support import dangerous, runner_brain, runs
from tests.fakes.openai_server import CallTools, ChatRequest, FakeOpenAI, Response, Say
from tests.helpers import eventually, eventually_async, write_lock_held
from tests.model_support import is_notice, is_subagent, model_config, web_base
from tests.test_web import Tab, open_tab


async def next_of(tab: Tab, kind: str, timeout: float = 10) -> dict[str, Any]:
    while True:
        frame = await tab.frame(timeout)
        if frame["type"] == kind:
            return frame


async def choose(tab: Tab, approval_id: str, decision: str) -> None:
    await tab.ws.send_str(json.dumps({"type": "approve", "id": approval_id,
                                      "decision": decision}))


async def test_approve_once_runs_the_command_and_its_result_comes_back(
        model_gateway, marker: Path, http) -> None:
    gw, base = model_gateway
    tab = await open_tab(http, base)
    await tab.say("clean up")
    asked = await next_of(tab, "approval")
    assert asked["command"] == dangerous(marker)
    assert asked["reason"] == "dropping a database or a table"
    # the turn waits on the request: pending in the store, its conversation mid-turn
    record = await gw.runner.approvals.get(asked["id"])
    assert record is not None and record.state == "pending"
    assert record.address.session_key in gw.runner.busy_session_keys
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
        model_gateway, marker: Path, http) -> None:
    _, base = model_gateway
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
        model_gateway, marker: Path, http) -> None:
    _, base = model_gateway
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
        model_gateway, marker: Path, http) -> None:
    gw, base = model_gateway
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


async def test_kill_9_with_an_approval_pending_then_approve_runs_it_once_as_a_job(
        tmp_path: Path, model: FakeOpenAI, http) -> None:
    from tests.real_daemon import cli_json, run_cli, start_daemon, web_home

    marker = tmp_path / "marker"

    def brain(req: ChatRequest) -> Response:
        if is_notice(req):
            return Say("It came back: " + ("ok" if "DROP TABLE demo" in req.last["content"]
                                           else "without its output"))
        return runner_brain(marker)(req)

    model.brain = brain
    env = web_home(tmp_path / "home", f"agent: {{backend: openai, base_url: "
                                      f"'{model.base_url}', model: fake-model}}\n")
    proc, url = await start_daemon(env)
    try:
        tab = await open_tab(http, url.rstrip("/"))
        await tab.say("clean up")
        asked = await next_of(tab, "approval")
        proc.kill()  # the turn that asked dies with the daemon; the approval does not
        await proc.wait()
        (listed,) = await cli_json("approvals", env=env)
        assert (listed["id"], listed["state"]) == (asked["id"], "pending")
        code, table, _ = await run_cli("approvals", env=env)
        assert code == 0 and table.splitlines()[1].split()[:2] == [asked["id"], "pending"]

        proc, url = await start_daemon(env)
        tab = await open_tab(http, url.rstrip("/"), conversation=tab.ready["conversation"])
        again = await next_of(tab, "approval")  # still pending, shown to the new tab
        assert again["id"] == asked["id"] and again["command"] == dangerous(marker)
        await asyncio.gather(choose(tab, asked["id"], "once"), choose(tab, asked["id"], "once"))
        decided = await next_of(tab, "approval_decided")
        assert decided["state"] == "approved" and "background job j" in decided["text"]
        assert "Already settled" in (await next_of(tab, "error"))["error"]
        notice = await next_of(tab, "message", timeout=20)
        assert notice["kind"] == "notification"
        assert "finished: exit code 0" in notice["text"]
        assert notice["text"].endswith("\nIt came back: ok")
        assert runs(marker) == 1
        (listed,) = await cli_json("approvals", env=env)
        assert (listed["state"], listed["decision"], listed["decided_by"]) == (
            "approved", "once", "web")
    finally:
        proc.terminate()
        await proc.wait()


async def test_after_a_restart_a_pending_approval_ends_with_its_session_or_expires(
        tmp_path: Path, model: FakeOpenAI, http) -> None:
    marker = tmp_path / "marker"
    model.brain = runner_brain(marker)
    config = model_config(tmp_path / "home", model)
    async with running_gateway(config) as gw:
        tab = await open_tab(http, web_base(gw))
        await tab.say("clean up")
        first = await next_of(tab, "approval")
    # the daemon stopped while the turn waited: the turn went on, its model told
    told = await next_of(tab, "message")
    assert "not run yet: the gateway is restarting" in told["text"]

    async with running_gateway(config) as gw:
        tab = await open_tab(http, web_base(gw), conversation=tab.ready["conversation"])
        assert (await next_of(tab, "approval"))["id"] == first["id"]
        await tab.say("/new")  # the session it belonged to ends: so does the approval
        cancelled = await next_of(tab, "approval_decided")
        assert (cancelled["id"], cancelled["state"]) == (first["id"], "cancelled")
        assert "the session ended" in cancelled["text"]
        await tab.say("clean up")
        second = await next_of(tab, "approval")

    # started again after its time ran out: it expires at once, and is not shown
    async with running_gateway(config, clock=lambda: time.time() + 3600) as gw:
        approvals = gw.runner.approvals

        async def expired() -> bool:
            record = await approvals.get(second["id"])
            return record is not None and record.state == "expired"

        await eventually_async(expired, what="the overdue approval to expire")
        tab = await open_tab(http, web_base(gw), conversation=tab.ready["conversation"])
        await tab.no_frame()
    assert runs(marker) == 0


async def test_two_tabs_pressing_at_once_after_a_restart_start_the_command_once(
        tmp_path: Path, model: FakeOpenAI, http) -> None:
    """The turn that asked is gone, so approving starts the command as a job: two presses
    that both find the approval pending race to that start, and one of them wins."""

    marker = tmp_path / "marker"
    model.brain = runner_brain(marker)
    config = model_config(tmp_path / "home", model)
    async with running_gateway(config) as gw:
        tab = await open_tab(http, web_base(gw))
        await tab.say("clean up")
        asked = await next_of(tab, "approval")
    # the daemon stopped while the turn waited: the approval stays pending
    jobs = config.home_path / "jobs"
    async with running_gateway(config) as gw:
        conversation = tab.ready["conversation"]
        a = await open_tab(http, web_base(gw), conversation)
        b = await open_tab(http, web_base(gw), conversation)
        for each in (a, b):
            assert (await next_of(each, "approval"))["id"] == asked["id"]
        async with write_lock_held(str(config.state_location)):
            await asyncio.gather(choose(a, asked["id"], "once"), choose(b, asked["id"], "once"))
            # both presses found it pending and got as far as starting the command: each
            # job's folder is made before its row is written, which waits for the lock —
            # so neither write can have failed yet (the loser's folder goes when it does)
            await eventually(lambda: jobs.is_dir() and len(list(jobs.iterdir())) == 2,
                             what="both presses starting the command")
        decided = [await next_of(each, "approval_decided") for each in (a, b)]
        assert {(d["id"], d["state"]) for d in decided} == {(asked["id"], "approved")}
        frames = [await next_of(each, "message", timeout=20) for each in (a, b)]
        assert all(f["kind"] == "notification" and "finished: exit code 0" in f["text"]
                   for f in frames)  # the job's completion, in both tabs

        async def settled_jobs() -> list[Any]:
            listed = await gw.jobs.list()
            return listed if all(j.state != "running" for j in listed) else []

        started = await eventually_async(settled_jobs, what="the job's end")
    assert [job.command for job in started] == [dangerous(marker)]  # started once
    assert runs(marker) == 1
    assert [p.name for p in jobs.iterdir()] == [started[0].id]  # the loser's folder went
    assert f"background job {started[0].id}" in decided[0]["text"]


async def test_a_sub_agents_dangerous_command_is_asked_in_the_conversation_that_delegated(
        model_gateway, model: FakeOpenAI, http, tmp_path: Path) -> None:
    _, base = model_gateway
    marker = tmp_path / "marker"

    def brain(req: ChatRequest) -> Response:
        if is_subagent(req):
            if req.last["role"] == "tool":
                return Say("Sub-agent summary: " + json.loads(req.last["content"])["exit"])
            return CallTools([("terminal", {"command": dangerous(marker)})])
        if is_notice(req):
            return Say("Back from the sub-agent.")
        if req.last["role"] == "tool":
            return Say("Delegated.")
        return CallTools([("delegate_task", {"task": "tidy the demo database"})])

    model.brain = brain
    tab = await open_tab(http, base)
    await tab.say("research")
    assert (await next_of(tab, "message"))["text"] == "Delegated."
    asked = await next_of(tab, "approval")
    assert asked["command"] == dangerous(marker)
    await choose(tab, asked["id"], "once")
    notice = await next_of(tab, "message", timeout=30)
    assert notice["kind"] == "notification" and notice["text"].endswith("Back from the sub-agent.")
    (heard,) = [r for r in model.requests if is_notice(r)]
    assert "Sub-agent summary: exit code 0" in heard.last["content"]  # it ran, and said so
    assert runs(marker) == 1


async def test_a_schedule_whose_command_is_denied_is_not_created(
        model_gateway, model: FakeOpenAI, http, tmp_path: Path) -> None:
    gw, base = model_gateway
    marker = tmp_path / "marker"

    def brain(req: ChatRequest) -> Response:
        if req.last["role"] == "tool":
            return Say("tool said: " + req.last["content"])
        return CallTools([("schedule", {"action": "create", "every": "1h",
                                        "command": dangerous(marker)})])

    model.brain = brain
    tab = await open_tab(http, base)
    await tab.say("every hour, clean the demo table")
    asked = await next_of(tab, "approval")
    await tab.say(f"/deny {asked['id']}")
    replies = [await next_of(tab, "message") for _ in range(2)]  # the /deny note, the answer
    assert "Denied by web: not run." in [r["text"] for r in replies]
    answer = next(r for r in replies if r["text"].startswith("tool said: "))
    assert "not run: web denied it" in answer["text"]
    assert await gw.scheduler.list(tab.ready["session_key"]) == []


async def test_stop_cancels_the_request_of_the_turn_it_stops(
        model_gateway, marker: Path, http) -> None:
    _, base = model_gateway
    tab = await open_tab(http, base)
    await tab.say("clean up")
    asked = await next_of(tab, "approval")
    await tab.say("/stop")
    cancelled = await next_of(tab, "approval_decided")
    assert (cancelled["state"], cancelled["text"]) == (
        "cancelled", "Cancelled (the turn was stopped): not run.")
    await choose(tab, asked["id"], "once")
    assert "Already settled" in (await next_of(tab, "error"))["error"]
    assert runs(marker) == 0
