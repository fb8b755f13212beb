"""Choice buttons on Slack: ``/sessions`` in a thread shows a Block Kit button per other
session, and a press is the one who pressed sending ``/resume <id>`` in that thread —
authorized and journaled like a message, its envelope acked once journaled. The real
slack-sdk (Socket Mode and the Web API) against the fake Slack.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

import tests.test_slack as slack_tests
from gateway.daemon.assembly import Gateway
from gateway.words.events import Choice
from gateway.words.route import Route
from gateway.words.session_entry import SessionEntry
from tests.fakes.slack_server import FakeSlack, SlackMessage
from tests.helpers import eventually, eventually_async, settled, write_lock_held
from tests.test_slack import ALICE, EVE, GENERAL, slack_config, slack_gateway

fake = slack_tests.fake  # the fixture: the fake Slack


@pytest.fixture
async def gateway(tmp_path: Path, fake: FakeSlack) -> AsyncIterator[Gateway]:
    async with slack_gateway(slack_config(tmp_path / "home", fake)) as gw:
        yield gw


class Thread:
    """Alice's thread in #general: its first message starts it (reply_in_thread)."""

    def __init__(self, gw: Gateway, fake: FakeSlack) -> None:
        self.gw, self.fake = gw, fake
        self.ts: str | None = None

    @property
    def key(self) -> str:
        return f"agent:main:slack:thread:{GENERAL}:{self.ts}"

    async def say(self, text: str) -> SlackMessage:
        """Alice writes in the thread; the gateway's answer to it."""
        before = len(self.fake.posts)
        ts = self.fake.user_message(channel=GENERAL, text=text, thread_ts=self.ts)
        self.ts = self.ts or ts
        await self.fake.wait_for_posts(before + 1)
        return self.fake.messages(GENERAL, self.ts)[-1]

    async def sessions(self, count: int) -> list[SessionEntry]:
        """``count`` sessions here, oldest first, each with something said in it; the last
        is live."""
        made = []
        for number in range(1, count + 1):
            if number > 1:
                await self.say("/new")
            await self.say(f"topic {number}")
            made.append(await self.live())
        return made

    async def live(self) -> SessionEntry:
        live = await self.gw.store.live_session(self.key)
        assert live is not None
        return live


def buttons(message: SlackMessage) -> list[tuple[str, str]]:
    """(label, action id) of each button on a message, block by block."""
    return [(b["text"]["text"], b["action_id"]) for block in message.blocks or []
            if block["type"] == "actions" for b in block["elements"]]


def sections(message: SlackMessage) -> list[str]:
    return [b["text"]["text"] for b in message.blocks or [] if b["type"] == "section"]


def press(fake: FakeSlack, message: SlackMessage, action_id: str, user: str = ALICE) -> str:
    return fake.press_button(channel=message.channel, message_ts=message.ts,
                             action_id=action_id, value=action_id, user=user)


async def test_sessions_in_a_thread_shows_a_button_per_other_session_and_a_press_resumes_it(
        gateway, fake) -> None:
    thread = Thread(gateway, fake)
    first, second, third = await thread.sessions(3)
    listing = await thread.say("/sessions")
    assert listing.thread_ts == thread.ts and "Resume one with /resume" in listing.text
    assert sections(listing) == [listing.text]  # the text as sent without buttons
    assert buttons(listing) == [("2. topic 2", f"cmd:/resume {second.id}"),
                                ("1. topic 1", f"cmd:/resume {first.id}")]

    envelope = press(fake, listing, f"cmd:/resume {first.id}")
    await fake.wait_acked(envelope)

    async def first_is_live() -> bool:
        return (await thread.live()).id == first.id

    await eventually_async(first_is_live, what="the first session resumed")
    (resumed,) = await eventually(
        lambda: [m for m in fake.messages(GENERAL, thread.ts)
                 if m.text.startswith("Resumed session 1")], what="the answer to the press")
    ended = await gateway.store.get(third.id)
    assert ended is not None and ended.end_reason == "resume"

    await thread.say("back on topic 1")
    await settled(gateway)
    assert "back on topic 1" in [line.text for line in await gateway.store.messages(first.id)]
    assert "back on topic 1" not in [line.text for line in
                                     await gateway.store.messages(third.id)]


async def test_a_press_by_someone_not_allowed_resumes_nothing(gateway, fake) -> None:
    thread = Thread(gateway, fake)
    first, second = await thread.sessions(2)
    listing = await thread.say("/sessions")
    assert buttons(listing) == [("1. topic 1", f"cmd:/resume {first.id}")]
    posts_before = len(fake.posts)

    # acked once the runner took it in as eve's message, and refused it
    await fake.wait_acked(press(fake, listing, f"cmd:/resume {first.id}", user=EVE))
    await settled(gateway)
    assert (await thread.live()).id == second.id
    assert len(fake.posts) == posts_before  # nothing said in the thread either

    # the same button, pressed by alice
    await fake.wait_acked(press(fake, listing, f"cmd:/resume {first.id}"))
    await settled(gateway)
    assert (await thread.live()).id == first.id


async def test_a_press_is_acked_only_once_journaled(tmp_path: Path, fake) -> None:
    fake.ack_deadline = 0.5
    config = slack_config(tmp_path / "home", fake)
    async with slack_gateway(config) as gw:
        thread = Thread(gw, fake)
        first, _ = await thread.sessions(2)
        listing = await thread.say("/sessions")
        async with write_lock_held(str(config.state_db)):
            pressed = press(fake, listing, f"cmd:/resume {first.id}")
            # a message after it, unacked too, is sent again once the deadline passed
            fake.user_message(channel=GENERAL, thread_ts=thread.ts, text="meanwhile")
            await eventually(lambda: [e for e in fake.envelopes
                                      if e.get("retry_attempt", 0) >= 1],
                             what="the message sent again, unacked")
            assert pressed not in fake.acked, "acked before its journal commit"
        await settled(gw)  # (its ack came after Slack's deadline: Slack ignores it)
        assert (await thread.live()).id == first.id


async def test_choices_fill_actions_blocks_of_25_under_the_last_part_labels_cut_at_75(
        gateway, fake) -> None:
    route = Route("slack", "group", GENERAL)
    choices = [Choice(f"{n}. " + "a long title " * 10, f"/resume {n}") for n in range(30)]
    choices.insert(3, Choice("too long for a button", "/resume " + "x" * 70))
    text = "\n\n".join(f"paragraph {n}: " + "words " * 40 for n in range(30))  # two parts
    result = await gateway.runner.adapters["slack"].send_choices(route, text, choices)
    assert result.ok
    head, tail = fake.messages(GENERAL)
    assert head.blocks is None
    blocks: list[dict[str, Any]] = tail.blocks or []
    assert [b["type"] for b in blocks] == ["section", "section", "actions", "actions"]
    assert " ".join(sections(tail)).split() == tail.text.split()  # the part, in sections
    assert all(len(s) <= 3000 for s in sections(tail))
    assert [len(b["elements"]) for b in blocks if b["type"] == "actions"] == [25, 5]
    shown = buttons(tail)
    assert [action_id for _, action_id in shown] == [f"cmd:/resume {n}" for n in range(30)]
    assert all(len(label) <= 75 for label, _ in shown) and shown[0][0].endswith("…")
