"""Approvals on Discord: the model's dangerous command waits under the message that asked
for it, with three buttons; a click decides it once, is answered once, and the request
is edited into its outcome. The real discord.py against the fake Discord and the fake
model endpoint.

(A Discord role member being answered and a user with neither id nor role refused is
pinned through the real adapter in tests/test_authorization.py.)
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

import tests.test_discord as discord_tests
from gateway.config.settings import Config
from gateway.daemon.assembly import Gateway, running_gateway
from gateway.platforms.discord.adapter import DiscordAdapter
from tests.approval_support import dangerous, runs
from tests.conftest import make_config
from tests.fakes.discord_server import FakeDiscord, InteractionResponseRecord, SentRecord
from tests.fakes.openai_server import CallTools, FakeOpenAI, Say
from tests.helpers import eventually
from tests.model_support import model_settings
from tests.test_discord import ALICE, CHANNEL, THREAD_A

fake = discord_tests.fake  # the fixture: the fake Discord with its channel and threads

BOB, CAROL = 2, 3  # bob may talk but did not ask; carol is an approver
REFUSED = "Only the person who asked, or an approver, can decide this."


def approvals_config(home: Path, fake: FakeDiscord, model: FakeOpenAI) -> Config:
    return make_config(
        home, platforms__discord__enabled=True,
        platforms__discord__token=fake.token, platforms__discord__api_base=fake.api_base,
        platforms__discord__gateway_url=fake.gateway_url,
        platforms__discord__guild_ready_timeout_seconds=fake.guild_ready_timeout,
        platforms__discord__allowed_users=[str(ALICE), str(BOB)],
        approvals__approvers={"discord": [str(CAROL)]}, **model_settings(model))


@asynccontextmanager
async def discord_gateway(config: Config) -> AsyncIterator[Gateway]:
    async with running_gateway(config) as gw:
        adapter = gw.runner.adapters["discord"].inner  # the platform's own, behind the fence
        assert isinstance(adapter, DiscordAdapter)
        await adapter.wait_connected(timeout=30)
        yield gw


@pytest.fixture
async def gateway(tmp_path: Path, fake: FakeDiscord, model: FakeOpenAI
                  ) -> AsyncIterator[Gateway]:
    async with discord_gateway(approvals_config(tmp_path / "home", fake, model)) as gw:
        yield gw


async def asked(fake: FakeDiscord, where: int = THREAD_A) -> tuple[SentRecord, str]:
    """The request message (the one with buttons) and its approval's id."""
    (request,) = await eventually(
        lambda: [s for s in fake.sent if s.channel_id == where and s.raw.get("components")],
        timeout=30, what="the approval request")
    custom_id = buttons(fake, request)[0][1]
    return request, custom_id.split(":")[1]


def buttons(fake: FakeDiscord, request: SentRecord) -> list[tuple[str, str, int]]:
    """(label, custom id, style) of each button the request shows now."""
    rows = fake.message_components(request.channel_id, request.message_id) or []
    return [(b["label"], b["custom_id"], b["style"]) for row in rows
            for b in row["components"]]


def shown(fake: FakeDiscord, request: SentRecord) -> str:
    return fake.message_content(request.channel_id, request.message_id) or ""


async def model_reply(fake: FakeDiscord, where: int = THREAD_A) -> dict:
    """The model's answer after the tool ran (or was refused): the tool's result."""
    (text,) = await eventually(
        lambda: [t for t in fake.visible(where) if t.startswith("tool said: ")],
        timeout=30, what="the model's reply")
    return json.loads(text.removeprefix("tool said: "))


def answer_to(fake: FakeDiscord, interaction_id: int) -> InteractionResponseRecord:
    (answer,) = [a for a in fake.interaction_responses if a.id == interaction_id]
    return answer


async def test_the_requesters_click_runs_the_command_once_and_the_result_comes_back(
        gateway, fake, model, marker) -> None:
    start = await fake.user_message(channel_id=THREAD_A, content="clean up")
    request, approval_id = await asked(fake)
    assert request.message_reference == int(start["id"])  # a reply to the asking message
    assert "Approval needed" in shown(fake, request) and dangerous(marker) in shown(
        fake, request)
    assert buttons(fake, request) == [
        ("Approve once", f"ap:{approval_id}:o", 3),
        ("Approve for this session", f"ap:{approval_id}:s", 1),
        ("Deny", f"ap:{approval_id}:d", 4)]
    # the turn waits: the model was asked once, and nothing ran
    assert len(model.requests) == 1 and runs(marker) == 0

    click = await fake.press(THREAD_A, request.message_id, f"ap:{approval_id}:o",
                             user_id=ALICE)
    await fake.wait_for_interaction_responses(1)
    assert answer_to(fake, click).type == 6  # deferred update: the edit shows the choice
    result = await model_reply(fake)
    assert result["exit"] == "exit code 0" and "DROP TABLE demo" in result["output"]
    assert runs(marker) == 1
    assert shown(fake, request).endswith("\nApproved once by alice (run in the turn).")
    assert dangerous(marker) in shown(fake, request) and buttons(fake, request) == []


async def test_deny_runs_nothing_tells_the_model_and_edits_the_request(
        gateway, fake, model, marker) -> None:
    await fake.user_message(channel_id=THREAD_A, content="clean up")
    request, approval_id = await asked(fake)
    click = await fake.press(THREAD_A, request.message_id, f"ap:{approval_id}:d",
                             user_id=ALICE)
    await fake.wait_for_interaction_responses(1)
    assert answer_to(fake, click).type == 6
    told = await model_reply(fake)
    assert told["error"].startswith("not run: alice denied it")
    (tool_result,) = [r.last["content"] for r in model.requests if r.last["role"] == "tool"]
    assert "not run" in tool_result
    assert shown(fake, request).endswith("\nDenied by alice: not run.")
    assert buttons(fake, request) == [] and runs(marker) == 0


async def test_another_users_click_is_refused_privately_and_an_approver_may_decide(
        gateway, fake, model, marker) -> None:
    await fake.user_message(channel_id=THREAD_A, content="clean up")
    request, approval_id = await asked(fake)
    before = shown(fake, request)
    refused = await fake.press(THREAD_A, request.message_id, f"ap:{approval_id}:o",
                               user_id=BOB, username="bob")
    await fake.wait_for_interaction_responses(1)
    answer = answer_to(fake, refused)
    assert (answer.type, answer.data["flags"], answer.data["content"]) == (4, 64, REFUSED)
    assert REFUSED not in fake.visible(THREAD_A)  # only bob saw it
    assert shown(fake, request) == before and len(buttons(fake, request)) == 3
    record = await gateway.runner.approvals.get(approval_id)
    assert record.state == "pending" and runs(marker) == 0

    approved = await fake.press(THREAD_A, request.message_id, f"ap:{approval_id}:o",
                                user_id=CAROL, username="carol")
    await fake.wait_for_interaction_responses(2)
    assert answer_to(fake, approved).type == 6
    assert (await model_reply(fake))["exit"] == "exit code 0"
    assert shown(fake, request).endswith("\nApproved once by carol (run in the turn).")
    assert buttons(fake, request) == [] and runs(marker) == 1


async def test_racing_clicks_and_a_deny_command_decide_once_and_each_is_answered_once(
        gateway, fake, model, marker) -> None:
    await fake.user_message(channel_id=THREAD_A, content="clean up")
    request, approval_id = await asked(fake)
    data = f"ap:{approval_id}:"
    clicks = await asyncio.gather(
        fake.press(THREAD_A, request.message_id, data + "o", user_id=ALICE),
        fake.press(THREAD_A, request.message_id, data + "d", user_id=ALICE),
        fake.press(THREAD_A, request.message_id, data + "s", user_id=CAROL,
                   username="carol"),
        fake.press(THREAD_A, request.message_id, data + "o", user_id=CAROL,
                   username="carol"))
    await fake.user_message(channel_id=THREAD_A, content=f"/deny {approval_id}")
    answers = await fake.wait_for_interaction_responses(len(clicks))
    result = await model_reply(fake)
    await eventually(lambda: [t for t in fake.visible(THREAD_A)
                              if t.startswith(("Denied", "Already settled"))],
                     timeout=30, what="the /deny's answer")

    record = await gateway.runner.approvals.get(approval_id)
    assert record.state in ("approved", "denied")
    assert sorted(a.id for a in answers) == sorted(clicks)  # each answered, once
    callbacks = [s for m, p, s in fake.requests if m == "POST" and "/interactions/" in p]
    assert len(callbacks) == len(clicks) and all(s < 300 for s in callbacks)
    accepted = [a for a in answers if a.type == 6]
    assert len(accepted) <= 1  # the /deny may have won, then every click lost
    assert all(a.type == 4 and a.data["flags"] == 64 and
               a.data["content"].startswith("Already settled") for a in answers
               if a.type != 6)
    edits = [e for e in fake.edits if e.message_id == request.message_id]
    assert len(edits) == 1 and edits[0].content.endswith(record.outcome_text())
    assert runs(marker) == (1 if record.state == "approved" else 0)
    assert ("error" in result) == (record.state == "denied")


async def test_clicks_on_other_buttons_are_left_for_their_owner(gateway, fake) -> None:
    await fake.user_message(channel_id=CHANNEL, content="hello")
    (reply,) = await fake.wait_for_sent(1)
    await fake.press(CHANNEL, reply.message_id, "someone-else:42")
    await fake.press(CHANNEL, reply.message_id, "ap:nothere:o")  # not an approval id
    unknown = await fake.press(CHANNEL, reply.message_id, "ap:a0000000:o")
    await fake.wait_for_interaction_responses(1)
    (answer,) = fake.interaction_responses  # only the approval-shaped one is ours
    assert answer.id == unknown and answer.type == 4
    assert answer.data["content"] == "There is no approval a0000000."


async def test_a_command_too_long_for_one_message_is_cut_with_a_note_under_its_buttons(
        gateway, fake, model, marker) -> None:
    long_command = dangerous(marker) + "; : " + "x" * 3000
    model.brain = lambda req: (Say("tool said: " + req.last["content"])
                               if req.last["role"] == "tool"
                               else CallTools([("terminal", {"command": long_command})]))
    await fake.user_message(channel_id=THREAD_A, content="clean up")
    request, approval_id = await asked(fake)
    asking = shown(fake, request)
    assert len(asking) <= 2000 and "Approval needed" in asking
    assert "The command above is cut" in asking and f"/deny {approval_id}" in asking
    await fake.press(THREAD_A, request.message_id, f"ap:{approval_id}:d", user_id=ALICE)
    await model_reply(fake)
    settled = shown(fake, request)
    # the command as cut, the outcome in place of the instructions to answer
    assert settled.endswith("\nDenied by alice: not run.") and "/deny" not in settled
    assert settled.split("```")[0] == asking.split("```")[0]
    assert "The command above is cut" in settled
    assert len(settled) <= 2000 and runs(marker) == 0


async def test_a_request_posted_before_a_restart_is_still_decided_by_its_buttons(
        tmp_path: Path, fake, model, marker) -> None:
    config = approvals_config(tmp_path / "home", fake, model)
    async with discord_gateway(config):
        await fake.user_message(channel_id=THREAD_A, content="clean up")
        request, approval_id = await asked(fake)
    assert "not run yet: the gateway is restarting" in (await model_reply(fake))["error"]

    async with discord_gateway(config):  # a new process: no view of ours anywhere
        click = await fake.press(THREAD_A, request.message_id, f"ap:{approval_id}:o",
                                 user_id=ALICE)
        await fake.wait_for_interaction_responses(1)
        assert answer_to(fake, click).type == 6
        await eventually(lambda: runs(marker) == 1, timeout=30, what="the late run")
        assert "Approved once by alice (running as background job" in shown(fake, request)
        assert buttons(fake, request) == []


async def test_an_outcome_that_cannot_be_shown_still_stands_and_later_clicks_hear_it(
        gateway, fake, model, marker) -> None:
    await fake.user_message(channel_id=THREAD_A, content="clean up")
    request, approval_id = await asked(fake)
    fake.fail_next_edit(channel_id=THREAD_A, status=403, code=50001, message="Missing Access")
    first = await fake.press(THREAD_A, request.message_id, f"ap:{approval_id}:d",
                             user_id=ALICE)
    await fake.wait_for_interaction_responses(1)
    assert answer_to(fake, first).type == 6  # answered, though the edit failed
    assert (await model_reply(fake))["error"].startswith("not run: alice denied it")
    assert len(buttons(fake, request)) == 3  # the edit failed: the buttons stay

    again = await fake.press(THREAD_A, request.message_id, f"ap:{approval_id}:o",
                             user_id=ALICE)
    await fake.wait_for_interaction_responses(2)
    answer = answer_to(fake, again)
    assert (answer.type, answer.data["flags"]) == (4, 64)
    assert answer.data["content"] == "Already settled: Denied by alice: not run."
    assert runs(marker) == 0
