"""Discord's harness: the real discord.py against the fake REST API and gateway.

Places: two threads of one text channel, and a DM channel. A preview is the bot's
message edited as the reply grows; a button press is an interaction; what was said
while the daemon was down is read back from each channel's history after a new
session (there is no cursor to confirm: see ``does_not_apply``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, ClassVar

import discord

from gateway.contract.approval import button_data
from gateway.daemon.assembly import Gateway
from gateway.platforms.preview import WRITING
from tests.conformance.harness import (
        GatewayHarness,
    Place,
    Places,
    Promise,
    Shown,
    approval_id_in,
)
from tests.fakes.discord_server import FakeDiscord
from tests.helpers import eventually

CHANNEL, THREAD_A, THREAD_B, DM = 500, 601, 602, 700
PERSON = 1


class DiscordHarness(GatewayHarness):
    name = "discord"
    does_not_apply: ClassVar[dict[Promise, str]] = {
        Promise.CURSOR: "no cursor to confirm: Discord keeps no offset or ack, the "
                        "journal is the mark the history is read back from after a new "
                        "session (the while_down case checks that)",
    }

    def __init__(self) -> None:
        super().__init__()
        self._fake: FakeDiscord | None = None

    @property
    def fake(self) -> FakeDiscord:
        assert self._fake is not None, "the fake Discord is not serving"
        return self._fake

    # -------------------------------------------------------------- lifecycle

    def serving(self) -> AbstractAsyncContextManager[object]:
        return self._serving()

    @asynccontextmanager
    async def _serving(self) -> AsyncIterator[FakeDiscord]:
        # the adapter points discord.py's class-level endpoints at the fake: put them back
        base = discord.http.Route.BASE
        gateway = discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY
        try:
            async with FakeDiscord() as fake:
                fake.add_channel(CHANNEL, "builds")
                fake.add_thread(THREAD_A, CHANNEL)
                fake.add_thread(THREAD_B, CHANNEL)
                self._fake = fake
                yield fake
        finally:
            discord.http.Route.BASE = base
            discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = gateway

    def platform_section(self) -> dict[str, Any]:
        fake = self.fake
        return {"token": fake.token, "api_base": fake.api_base,
                "gateway_url": fake.gateway_url,
                "guild_ready_timeout_seconds": fake.guild_ready_timeout,
                "allowed_users": [str(PERSON)], "stream_edit_interval_seconds": 0.2}

    async def connected(self, gw: Gateway) -> None:
        await gw.runner.adapters["discord"].wait_connected(timeout=30)

    def quiet(self) -> bool:
        adapter = self.gateway.runner.adapters["discord"].inner
        catching_up = getattr(adapter, "_catching_up", None)  # the history read back
        return catching_up is None or catching_up.done()

    # -------------------------------------------------------------- places

    def places(self) -> Places:
        return Places(Place("thread-a", (THREAD_A, True)), Place("thread-b", (THREAD_B, True)),
                      Place("dm", (DM, False)))

    # -------------------------------------------------------------- the person

    async def say(self, place: Place, text: str) -> None:
        channel, guild = place.where
        await self.fake.user_message(channel_id=channel, guild=guild, content=text,
                                     author_id=PERSON)

    async def send_file(self, place: Place, name: str, data: bytes,
                        caption: str | None = None) -> None:
        channel, guild = place.where
        await self.fake.user_message(channel_id=channel, guild=guild, content=caption or "",
                                     author_id=PERSON,
                                     attachments=[{"filename": name, "data": data}])

    async def press(self, place: Place, approval_id: str, choice: str) -> None:
        channel, _ = place.where
        (request,) = [s for s in self.fake.sent if approval_id_in(s.content or "") == approval_id]
        click = await self.fake.press(channel, request.message_id,
                                      button_data(approval_id, choice),  # type: ignore[arg-type]
                                      user_id=PERSON)
        await eventually(lambda: [a for a in self.fake.interaction_responses if a.id == click],
                         what=f"the answer to the click on {approval_id}")

    # -------------------------------------------------------------- what is seen

    def bot_texts(self, place: Place) -> list[str]:
        channel, _ = place.where
        return self.fake.visible(channel)

    def previews(self, place: Place) -> list[str]:
        channel, _ = place.where
        shown = [s.content or "" for s in self.fake.sent if s.channel_id == channel]
        shown += [e.content or "" for e in self.fake.edits if e.channel_id == channel]
        return [t.removesuffix(WRITING).rstrip() for t in shown if t.endswith(WRITING)]

    def files_posted(self, place: Place) -> list[tuple[str, bytes]]:
        channel, _ = place.where
        return [(f.filename, f.data) for s in self.fake.sent if s.channel_id == channel
                for f in s.attachments]

    def approvals_shown(self, place: Place) -> list[Shown]:
        channel, _ = place.where
        shown = []
        for sent in self.fake.sent:
            approval_id = approval_id_in(sent.content or "")
            if sent.channel_id != channel or approval_id is None:
                continue
            waiting = bool(self.fake.message_components(channel, sent.message_id))
            text = self.fake.message_content(channel, sent.message_id)
            shown.append(Shown(approval_id, None if waiting else text))
        return shown

    def fail_sends(self, place: Place, status: int, *, count: int = 1,
                   retry_after: float | None = None, containing: str | None = None) -> None:
        channel, _ = place.where
        message = "You are being rate limited." if status == 429 else "upstream unavailable"
        self.fake.fail_next_post(channel_id=channel, status=status, count=count,
                                 retry_after=0.1 if retry_after is None else retry_after,
                                 message=message, content=containing)

    def confirmed(self, place: Place, text: str) -> bool:
        raise AssertionError(self.does_not_apply[Promise.CURSOR])


HARNESS = DiscordHarness
