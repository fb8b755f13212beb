"""Choice buttons on Discord: ``/sessions`` in a thread shows a button per other session,
and a click is the one who clicked sending ``/resume <id>`` in that thread — authorized
and journaled like a message. The real discord.py against the fake Discord.
"""

from __future__ import annotations

from pathlib import Path

import tests.test_discord as discord_tests
from gateway.daemon.assembly import Gateway, running_gateway
from gateway.words.events import Choice
from gateway.words.route import Route
from gateway.words.session_entry import SessionEntry
from tests.fakes.discord_server import FakeDiscord, SentRecord
from tests.helpers import eventually, eventually_async, settled
from tests.test_discord import ALICE, THREAD_A, discord_config

fake = discord_tests.fake  # the fixture: the fake Discord with its channel and threads
gateway = discord_tests.gateway  # the fixture: a gateway on it, connected

BOB = 2  # in the server, not among allowed_users
DEPLOYERS = 900  # a role
KEY = f"agent:main:discord:thread:{THREAD_A}:{THREAD_A}"


async def say(fake: FakeDiscord, text: str) -> SentRecord:
    """Alice writes in the thread; the gateway's answer to it."""
    message = await fake.user_message(channel_id=THREAD_A, content=text, author_id=ALICE)
    (answer,) = await eventually(
        lambda: [s for s in fake.sent if s.message_reference == int(message["id"])],
        what=f"the answer to {text!r}")
    return answer


async def sessions(gw: Gateway, fake: FakeDiscord, count: int) -> list[SessionEntry]:
    """``count`` sessions in the thread, oldest first, each with something said in it;
    the last is live."""
    made = []
    for number in range(1, count + 1):
        if number > 1:
            await say(fake, "/new")
        await say(fake, f"topic {number}")
        live = await gw.store.live_session(KEY)
        assert live is not None
        made.append(live)
    return made


def buttons(fake: FakeDiscord, sent: SentRecord) -> list[tuple[str, str]]:
    """(label, custom id) of each button under a message, row by row."""
    rows = fake.message_components(sent.channel_id, sent.message_id) or []
    return [(b["label"], b["custom_id"]) for row in rows for b in row["components"]]


async def live_id(gw: Gateway) -> str | None:
    live = await gw.store.live_session(KEY)
    return live.id if live is not None else None


async def test_sessions_in_a_thread_shows_a_button_per_other_session_and_a_click_resumes_it(
        gateway, fake) -> None:
    first, second, third = await sessions(gateway, fake, 3)
    listing = await say(fake, "/sessions")
    assert listing.channel_id == THREAD_A and "Resume one with /resume" in listing.content
    assert buttons(fake, listing) == [("2. topic 2", f"cmd:/resume {second.id}"),
                                      ("1. topic 1", f"cmd:/resume {first.id}")]

    click = await fake.press(THREAD_A, listing.message_id, f"cmd:/resume {first.id}",
                             user_id=ALICE)
    await fake.wait_for_interaction_responses(1)
    (answer,) = [a for a in fake.interaction_responses if a.id == click]
    assert answer.type == 6  # deferred update: what the command says comes in the thread

    async def first_is_live() -> bool:
        return await live_id(gateway) == first.id

    await eventually_async(first_is_live, what="the first session resumed")
    (resumed,) = await eventually(
        lambda: [s for s in fake.sent if s.content.startswith("Resumed session 1")],
        what="the answer to the click")
    # in the thread, as a reply to the message clicked on
    assert resumed.channel_id == THREAD_A and resumed.message_reference == listing.message_id
    ended = await gateway.store.get(third.id)
    assert ended is not None and ended.end_reason == "resume"

    await say(fake, "back on topic 1")
    await settled(gateway)
    assert "back on topic 1" in [line.text for line in await gateway.store.messages(first.id)]
    assert "back on topic 1" not in [line.text for line in
                                     await gateway.store.messages(third.id)]


async def test_a_click_by_someone_not_allowed_resumes_nothing(gateway, fake) -> None:
    first, second = await sessions(gateway, fake, 2)
    listing = await say(fake, "/sessions")
    assert buttons(fake, listing) == [("1. topic 1", f"cmd:/resume {first.id}")]
    sent_before = len(fake.sent)

    click = await fake.press(THREAD_A, listing.message_id, f"cmd:/resume {first.id}",
                             user_id=BOB, username="bob")
    # answered once the runner took it in as bob's message, and refused it
    (answer,) = await fake.wait_for_interaction_responses(1)
    assert answer.id == click and answer.type == 6
    await settled(gateway)
    assert await live_id(gateway) == second.id
    assert len(fake.sent) == sent_before  # nothing said in the thread either
    assert not await gateway.runner.inbound.seen("discord", str(click))

    # the same button, clicked by alice
    await fake.press(THREAD_A, listing.message_id, f"cmd:/resume {first.id}", user_id=ALICE)
    await fake.wait_for_interaction_responses(2)
    await settled(gateway)
    assert await live_id(gateway) == first.id


async def test_a_member_of_an_allowed_role_may_click(tmp_path: Path, fake) -> None:
    fake.add_role(DEPLOYERS, "deployers")
    config = discord_config(tmp_path / "home", fake,
                            platforms__discord__allowed_roles=[str(DEPLOYERS)])
    async with running_gateway(config) as gw:
        await gw.runner.adapters["discord"].inner.wait_connected(timeout=30)
        first, _ = await sessions(gw, fake, 2)
        listing = await say(fake, "/sessions")
        await fake.press(THREAD_A, listing.message_id, f"cmd:/resume {first.id}",
                         user_id=BOB, username="bob", roles=[DEPLOYERS])
        await fake.wait_for_interaction_responses(1)
        await settled(gw)
        assert await live_id(gw) == first.id


async def test_choices_fill_five_rows_of_five_under_the_last_part_labels_cut_at_80(
        gateway, fake) -> None:
    route = Route("discord", "thread", str(THREAD_A), thread_id=str(THREAD_A))
    choices = [Choice(f"{n}. " + "a long title " * 10, f"/resume {n}") for n in range(30)]
    choices.insert(3, Choice("too long for a button", "/resume " + "x" * 70))
    text = "\n\n".join(f"paragraph {n}: " + "words " * 40 for n in range(12))  # two parts
    result = await gateway.runner.adapters["discord"].send_choices(route, text, choices)
    assert result.ok
    head, tail = fake.sent
    assert buttons(fake, head) == []
    rows = fake.message_components(THREAD_A, tail.message_id) or []
    assert [len(row["components"]) for row in rows] == [5] * 5
    shown = buttons(fake, tail)
    assert [custom_id for _, custom_id in shown] == [f"cmd:/resume {n}" for n in range(25)]
    assert all(len(label) <= 80 for label, _ in shown) and shown[0][0].endswith("…")

