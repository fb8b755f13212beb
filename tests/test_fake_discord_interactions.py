"""Buttons, clicks and interaction answers of the fake Discord, against the real discord.py."""

from __future__ import annotations

from typing import Any, cast

import aiohttp
import discord
import pytest

import tests.test_fake_discord_server as server_tests
from tests.fakes.discord_server import FakeDiscord, InteractionResponseRecord
from tests.helpers import eventually
from tests.test_fake_discord_server import CHANNEL, DM, ROLE, THREAD, Recorder, running

fake = server_tests.fake  # the fixture: a started fake, discord.py pointed at it


class Clicker(Recorder):
    """A client that also keeps every interaction it receives."""

    def __init__(self) -> None:
        super().__init__()
        self.interactions: list[discord.Interaction] = []

    async def on_interaction(self, interaction: discord.Interaction) -> None:
        self.interactions.append(interaction)


def approval(job: str, on_approve: Any) -> discord.ui.View:
    """An approve/deny view; clicking approve runs ``on_approve(interaction)``."""
    view = discord.ui.View(timeout=None)
    approve = discord.ui.Button(label="Approve", style=discord.ButtonStyle.success,
                                custom_id=f"approve:{job}")
    approve.callback = on_approve  # type: ignore[method-assign]
    view.add_item(approve)
    view.add_item(discord.ui.Button(label="Deny", style=discord.ButtonStyle.danger,
                                    custom_id=f"deny:{job}"))
    view.add_item(discord.ui.Button(label="Log", url="https://example.com/jobs/42"))
    return view


async def rest(fake: FakeDiscord, method: str, path: str,
               payload: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    headers = {"Authorization": f"Bot {fake.token}"}
    async with aiohttp.ClientSession() as http, http.request(
            method, f"{fake.api_base}{path}", json=payload, headers=headers) as response:
        return response.status, await response.json()


async def test_a_click_reaches_the_views_callback_and_its_answer_updates_the_message(
        fake: FakeDiscord) -> None:
    async def on_approve(interaction: discord.Interaction) -> None:
        await interaction.response.edit_message(content="Job 42 approved", view=None)

    async with running(fake, Clicker) as recorder:
        client = cast(Clicker, recorder)
        channel = client.get_channel(CHANNEL)
        assert isinstance(channel, discord.TextChannel)
        message = await channel.send("Run job 42?", view=approval("42", on_approve))
        components = fake.message_components(CHANNEL, message.id)
        assert components is not None
        assert [b.get("custom_id") for b in components[0]["components"]] == [
            "approve:42", "deny:42", None]

        interaction_id = await fake.press(CHANNEL, message.id, "approve:42", user_id=7,
                                          username="bob", roles=[ROLE])
        (answer,) = await fake.wait_for_interaction_responses(1)
        assert answer == InteractionResponseRecord(
            id=interaction_id, type=7, data=answer.data)
        assert answer.data["content"] == "Job 42 approved" and answer.data["components"] == []
        assert fake.message_content(CHANNEL, message.id) == "Job 42 approved"
        assert fake.message_components(CHANNEL, message.id) == []
        assert fake.edits == []  # an interaction's update is no PATCH

        (interaction,) = client.interactions
        assert interaction.id == interaction_id
        assert interaction.type is discord.InteractionType.component
        assert interaction.data is not None and interaction.data.get("custom_id") == "approve:42"
        assert isinstance(interaction.user, discord.Member) and interaction.user.id == 7
        assert [r.id for r in interaction.user.roles if r.id != fake.guild_id] == [ROLE]
        assert interaction.message is not None and interaction.message.id == message.id
        assert interaction.channel is not None and interaction.channel.id == CHANNEL
        await eventually(interaction.response.is_done, 5, "discord.py heard the answer")

        with pytest.raises(discord.HTTPException) as refused:  # a second answer, sent anyway
            await discord.InteractionResponse(interaction).send_message("again")
        assert refused.value.status == 400 and refused.value.code == 40060
        assert len(fake.interaction_responses) == 1


async def test_answers_post_ephemeral_and_public_messages_or_defer(fake: FakeDiscord) -> None:
    answers = {"approve:1": {"content": "only you see this", "ephemeral": True},
               "approve:2": {"content": "everyone sees this"}}

    async def on_approve(interaction: discord.Interaction) -> None:
        assert interaction.data is not None
        custom_id = interaction.data.get("custom_id")
        if custom_id in answers:
            await interaction.response.send_message(**answers[custom_id])
        else:
            await interaction.response.defer()

    async with running(fake, Clicker) as recorder:
        client = cast(Clicker, recorder)
        thread = client.get_channel(THREAD)
        assert isinstance(thread, discord.Thread)
        sent = [await thread.send(f"Run job {job}?", view=approval(job, on_approve))
                for job in ("1", "2", "3")]
        for job, message in zip(("1", "2", "3"), sent, strict=True):
            await fake.press(THREAD, message.id, f"approve:{job}")
        records = await fake.wait_for_interaction_responses(3)

        assert sorted((r.type, r.data.get("flags", 0)) for r in records) == [
            (4, 0), (4, 64), (6, 0)]
        assert fake.visible(THREAD) == ["Run job 1?", "Run job 2?", "Run job 3?",
                                        "everyone sees this"]
        assert all(isinstance(i.channel, discord.Thread) for i in client.interactions)


async def test_a_click_in_a_dm_comes_from_a_user(fake: FakeDiscord) -> None:
    async def on_approve(interaction: discord.Interaction) -> None:
        await interaction.response.edit_message(content="approved")

    async with running(fake, Clicker) as recorder:
        client = cast(Clicker, recorder)
        await fake.user_message(channel_id=DM, content="run it", guild=False, author_id=7)
        # the DM channel: discord.py learns it from the message
        await eventually(lambda: client.received, 5, "the DM")
        message = await client.received[0].channel.send("Run?", view=approval("9", on_approve))
        await fake.press(DM, message.id, "approve:9", user_id=7)
        await fake.wait_for_interaction_responses(1)
        (interaction,) = client.interactions
        assert interaction.guild is None and not isinstance(interaction.user, discord.Member)
        assert interaction.user.id == 7 and isinstance(interaction.channel, discord.DMChannel)
        assert fake.message_content(DM, message.id) == "approved"
        # a view=None was not given: the buttons stay
        assert len(fake.message_components(DM, message.id) or []) == 1


async def test_unknown_interactions_and_stale_clicks(fake: FakeDiscord) -> None:
    async with running(fake, Clicker) as recorder:
        client = cast(Clicker, recorder)
        status, body = await rest(fake, "POST", "/interactions/123/nope/callback",
                                  {"type": 6})
        assert (status, body["code"], body["message"]) == (404, 10062, "Unknown interaction")

        status, posted = await rest(fake, "POST", f"/channels/{CHANNEL}/messages", {
            "content": "Run?", "components": [{"type": 1, "components": [
                {"type": 2, "style": 1, "label": "Go", "custom_id": "go"}]}]})
        assert status == 200 and posted["components"][0]["components"][0]["custom_id"] == "go"
        interaction_id = await fake.press(CHANNEL, int(posted["id"]), "gone-button")
        status, body = await rest(fake, "POST", f"/interactions/{interaction_id}/wrong/callback",
                                  {"type": 6})
        assert status == 404 and body["code"] == 10062
        await eventually(lambda: client.interactions, 5, "the stale click")
        assert client.interactions[0].data == {"custom_id": "gone-button", "component_type": 2}
        with pytest.raises(KeyError):
            await fake.press(CHANNEL, 1, "go")

        # an answer after Discord's window (3 s; none here) is for an interaction it gave up on
        fake.answer_window = 0.0
        late = await fake.press(CHANNEL, int(posted["id"]), "go")
        token = fake._interactions[late].token
        status, body = await rest(fake, "POST", f"/interactions/{late}/{token}/callback",
                                  {"type": 6})
        assert (status, body["code"]) == (404, 10062)


def _row(*buttons: dict[str, Any]) -> dict[str, Any]:
    return {"type": 1, "components": list(buttons)}


_GO = {"type": 2, "style": 1, "label": "Go", "custom_id": "go"}


@pytest.mark.parametrize(("components", "path", "code"), [
    ([_row({**_GO, "custom_id": "x" * 101})], ["0", "components", "0", "custom_id"],
     "BASE_TYPE_BAD_LENGTH"),
    ([_row({**_GO, "custom_id": ""})], ["0", "components", "0", "custom_id"],
     "BASE_TYPE_BAD_LENGTH"),
    ([_row({"type": 2, "style": 1, "label": "Go"})], ["0", "components", "0", "custom_id"],
     "BASE_TYPE_REQUIRED"),
    ([_row({"type": 2, "style": 5, "label": "Log", "url": "https://x.example",
            "custom_id": "log"})], ["0", "components", "0", "custom_id"],
     "BUTTON_COMPONENT_CUSTOM_ID_NOT_ALLOWED"),
    ([_row({"type": 2, "style": 5, "label": "Log"})], ["0", "components", "0", "url"],
     "URL_TYPE_INVALID_URL"),
    ([_row(_GO, _GO)], ["0", "components", "1", "custom_id"], "COMPONENT_CUSTOM_ID_DUPLICATED"),
    ([_row(*({**_GO, "custom_id": f"b{i}"} for i in range(6)))], ["0", "components"],
     "BASE_TYPE_MAX_LENGTH"),
    ([_GO], ["0", "type"], "UNION_TYPE_CHOICES"),
    ([_row({**_GO, "style": 9})], ["0", "components", "0", "style"], "BASE_TYPE_CHOICES"),
])
async def test_bad_components_are_an_invalid_form_body(
        fake: FakeDiscord, components: list[Any], path: list[str], code: str) -> None:
    status, body = await rest(fake, "POST", f"/channels/{CHANNEL}/messages",
                              {"content": "Run?", "components": components})
    assert (status, body["code"], body["message"]) == (400, 50035, "Invalid Form Body")
    errors = body["errors"]["components"]
    for key in path:
        errors = errors[key]
    assert errors["_errors"][0]["code"] == code
    assert fake.sent == []

    status, posted = await rest(fake, "POST", f"/channels/{CHANNEL}/messages",
                                {"content": "Run?", "components": [_row(_GO)]})
    status, body = await rest(fake, "PATCH", f"/channels/{CHANNEL}/messages/{posted['id']}",
                              {"components": components})
    assert (status, body["code"]) == (400, 50035)
    status, edited = await rest(fake, "PATCH", f"/channels/{CHANNEL}/messages/{posted['id']}",
                                {"content": "Run now?"})
    assert status == 200 and edited["components"] == [_row(_GO)]  # not given: kept
