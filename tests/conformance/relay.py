"""Relay's harness: the example third-party platform (tests/example_platform/, found
through its ``homing.platforms`` entry point) against its fake server.

Relay is the least a platform may be: no edits, no buttons, no files (its spec's
capabilities say so). So a reply is sent whole, an approval is answered with
``/approve``, and the file case does not apply. Places: threads ``t-a`` and ``t-b`` of
the group ``g1``, and the person's DM. The cursor is the updates offset.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, ClassVar

from gateway.daemon.assembly import Gateway
from tests.conformance.harness import (
    GatewayHarness,
    Place,
    Places,
    Promise,
    Shown,
    approval_id_in,
)
from tests.fakes.relay_server import FakeRelay

PERSON = "u1"


class RelayHarness(GatewayHarness):
    name = "relay"
    does_not_apply: ClassVar[dict[Promise, str]] = {}

    def __init__(self) -> None:
        super().__init__()
        self._fake: FakeRelay | None = None

    @property
    def fake(self) -> FakeRelay:
        assert self._fake is not None, "the fake Relay server is not serving"
        return self._fake

    # -------------------------------------------------------------- lifecycle

    def serving(self) -> AbstractAsyncContextManager[object]:
        return self._serving()

    @asynccontextmanager
    async def _serving(self) -> AsyncIterator[FakeRelay]:
        async with FakeRelay() as fake:
            self._fake = fake
            yield fake

    def platform_section(self) -> dict[str, Any]:
        return {"token": self.fake.token, "base_url": self.fake.base_url,
                "allowed_users": [PERSON]}

    async def connected(self, gw: Gateway) -> None:
        await gw.runner.adapters["relay"].wait_connected()

    def quiet(self) -> bool:
        return not self.fake.pending  # every update confirmed

    # -------------------------------------------------------------- places

    def places(self) -> Places:
        return Places(Place("t-a", ("g1", "t-a")), Place("t-b", ("g1", "t-b")),
                      Place("dm", ("dm-u1", None)))

    # -------------------------------------------------------------- the person

    async def say(self, place: Place, text: str) -> None:
        chat, thread = place.where
        self.fake.user_message(chat=chat, thread=thread, text=text, user=PERSON)

    async def press(self, place: Place, approval_id: str, choice: str) -> None:
        await self.press_by_command(place, approval_id, choice)

    # -------------------------------------------------------------- what is seen

    def bot_texts(self, place: Place) -> list[str]:
        chat, thread = place.where
        return [p.text for p in self.fake.posted_in(chat, thread)]

    def previews(self, place: Place) -> list[str]:
        return []  # no edits: nothing is shown before the reply is whole

    def files_posted(self, place: Place) -> list[tuple[str, bytes]]:
        return []  # Relay has no files (its capabilities say so)

    def approvals_shown(self, place: Place) -> list[Shown]:
        """Without edits, a request's outcome is the message the gateway posts after it,
        naming the request ("a1b2c3d4: Approved once …")."""
        texts = self.bot_texts(place)
        shown = []
        for number, text in enumerate(texts):
            approval_id = approval_id_in(text)
            if approval_id is None or text.startswith(f"{approval_id}:"):
                continue
            outcome = next((t for t in texts[number + 1:]
                            if t.startswith(f"{approval_id}: ")), None)
            shown.append(Shown(approval_id, outcome))
        return shown

    def fail_sends(self, place: Place, status: int, *, count: int = 1,
                   retry_after: float | None = None, containing: str | None = None) -> None:
        self.fake.fail_next_sends(count, status=status, retry_after=retry_after or 1,
                                  containing=containing)

    def confirmed(self, place: Place, text: str) -> bool:
        chat, thread = place.where
        return not [u for u in self.fake.pending
                    if (u["message"]["chat"], u["message"]["thread"], u["message"]["text"])
                    == (chat, thread, text)]


HARNESS = RelayHarness
