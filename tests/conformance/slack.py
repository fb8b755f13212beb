"""Slack's harness: the real slack-sdk (Socket Mode and the Web API) against the fake Slack.

Places: two threads of ``#general``, each under a colleague's message (posted before
the gateway starts: someone the bot does not serve, so nothing answers it), and the
person's DM with the bot. Threads from the start, so the adapter's ``reply_in_thread``
(a top-level message is answered in a thread under it) changes nothing here. A
preview is the bot's message edited (``chat.update``) as the reply grows; a button
press is an ``interactive`` envelope; the cursor is the Socket Mode ack: an envelope
acknowledged is one Slack will not deliver again.

While the daemon is down, Slack retries each event a few times, the last some minutes
after it, then gives up: the harness's downtime is that long for all but the last
message said meanwhile, which comes as a retry once the socket is back. The others are
only in the history, to be read back — and the last is there too, to be taken once.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, ClassVar

from gateway.contract.approval import button_data
from gateway.daemon.assembly import Gateway
from gateway.formatting.mrkdwn import unescape
from gateway.platforms.preview import WRITING
from tests.conformance.harness import (
    GatewayHarness,
    Place,
    Places,
    Promise,
    Shown,
    approval_id_in,
)
from tests.fakes.slack_server import APP_TOKEN, BOT_TOKEN, DEFAULT_USER, FakeSlack
from tests.helpers import eventually

GENERAL, DM = "C0GENERAL", "D0DM"
PERSON = DEFAULT_USER
#: whose messages the threads hang under: a member of the channel the bot does not serve
COLLEAGUE = "U0BOB"
#: an envelope not acked is delivered again after this (Slack: 3 s; the cursor case waits)
ACK_DEADLINE = 1.0


class SlackHarness(GatewayHarness):
    name = "slack"
    does_not_apply: ClassVar[dict[Promise, str]] = {}

    def __init__(self) -> None:
        super().__init__()
        self._fake: FakeSlack | None = None
        self._threads: tuple[str, str] | None = None
        self._said_while_down = 0

    @property
    def fake(self) -> FakeSlack:
        assert self._fake is not None, "the fake Slack is not serving"
        return self._fake

    # -------------------------------------------------------------- lifecycle

    def serving(self) -> AbstractAsyncContextManager[object]:
        return self._serving()

    @asynccontextmanager
    async def _serving(self) -> AsyncIterator[FakeSlack]:
        async with FakeSlack() as fake:
            fake.ack_deadline = ACK_DEADLINE
            fake.add_user(COLLEAGUE, "bob")
            self._threads = (
                fake.user_message(channel=GENERAL, text="a thread for A", user=COLLEAGUE),
                fake.user_message(channel=GENERAL, text="a thread for B", user=COLLEAGUE))
            self._fake = fake
            yield fake

    def platform_section(self) -> dict[str, Any]:
        return {"bot_token": BOT_TOKEN, "app_token": APP_TOKEN,
                "api_base": self.fake.api_base, "allowed_users": [PERSON],
                "stream_edit_interval_seconds": 0.2}

    async def start_daemon(self) -> Gateway:
        if self._said_while_down:  # down longer than Slack's retries of all but the last
            self.fake.lose_undelivered(keep=1)
            self._said_while_down = 0
        return await super().start_daemon()

    async def connected(self, gw: Gateway) -> None:
        await gw.runner.adapters["slack"].wait_connected(timeout=30)

    def quiet(self) -> bool:
        """Every envelope sent and acked, and the history read back with what waited."""
        fake = self.fake
        adapter = self.gateway.runner.adapters["slack"].inner
        catching_up = getattr(adapter, "_catching_up", None)
        return (not fake.unacked and not fake.pending
                and (catching_up is None or catching_up.done())
                and getattr(adapter, "_held", None) is None)

    # -------------------------------------------------------------- places

    def places(self) -> Places:
        assert self._threads is not None, "places inside running()"
        a, b = self._threads
        return Places(Place("thread-a", (GENERAL, a)), Place("thread-b", (GENERAL, b)),
                      Place("dm", (DM, None)))

    # -------------------------------------------------------------- the person

    async def say(self, place: Place, text: str) -> None:
        channel, thread = place.where
        self.fake.user_message(channel=channel, text=text, user=PERSON, thread_ts=thread)
        if self._life is None:
            self._said_while_down += 1

    async def send_file(self, place: Place, name: str, data: bytes,
                        caption: str | None = None) -> None:
        channel, thread = place.where
        shared = self.fake.add_file(name=name, content=data, user=PERSON)
        self.fake.user_message(channel=channel, text=caption or "", user=PERSON,
                               thread_ts=thread, files=[shared])

    async def press(self, place: Place, approval_id: str, choice: str) -> None:
        channel, thread = place.where
        (request,) = [m for m in self.fake.messages(channel, thread)
                      if approval_id_in(m.text) == approval_id]
        answers = self._answers(channel, request.ts)
        data = button_data(approval_id, choice)  # type: ignore[arg-type]
        envelope = self.fake.press_button(channel=channel, message_ts=request.ts,
                                          action_id=data, value=data, user=PERSON,
                                          stale=True)  # a decided one: from an old view
        await self.fake.wait_acked(envelope)
        # answered: the request updated into its outcome, or the presser told why not
        await eventually(lambda: self._answers(channel, request.ts) > answers,
                         what=f"the answer to the press on {approval_id}")

    def _answers(self, channel: str, message_ts: str) -> int:
        told = [c for c in self.fake.calls if c.method == "chat.postEphemeral"
                and c.params.get("user") == PERSON and c.params.get("channel") == channel]
        updated = [u for u in self.fake.updates if u.params.get("channel") == channel
                   and u.params.get("ts") == message_ts]
        return len(told) + len(updated)

    # -------------------------------------------------------------- what is seen

    def bot_texts(self, place: Place) -> list[str]:
        channel, thread = place.where
        return [unescape(m.text) for m in self.fake.messages(channel, thread)]

    def previews(self, place: Place) -> list[str]:
        channel, thread = place.where
        shown = [text for m in self.fake.messages(channel, thread, deleted=True)
                 for text in (*m.edits, m.text)]
        return [unescape(t.removesuffix(WRITING)).rstrip() for t in shown
                if t.endswith(WRITING)]

    def files_posted(self, place: Place) -> list[tuple[str, bytes]]:
        channel, thread = place.where
        return [(u.filename, u.content) for u in self.fake.uploads
                if (u.channel, u.thread_ts) == (channel, thread)]

    def approvals_shown(self, place: Place) -> list[Shown]:
        channel, thread = place.where
        shown = []
        for message in self.fake.messages(channel, thread):
            approval_id = approval_id_in(message.text)
            if approval_id is None:
                continue
            waiting = any(b.get("type") == "actions" for b in message.blocks or [])
            shown.append(Shown(approval_id, None if waiting else unescape(message.text)))
        return shown

    def fail_sends(self, place: Place, status: int, *, count: int = 1,
                   retry_after: float | None = None, containing: str | None = None) -> None:
        channel, _ = place.where  # scripted per channel, told apart by their text
        self.fake.fail_next("chat.postMessage", status=status, count=count, channel=channel,
                            text=containing,
                            error="ratelimited" if status == 429 else "service_unavailable",
                            retry_after=1 if retry_after is None else retry_after)

    def confirmed(self, place: Place, text: str) -> bool:
        channel, thread = place.where
        carrying = [e["envelope_id"] for e in self.fake.envelopes
                    if _said(e, channel, thread, text)]
        return any(envelope in self.fake.acked for envelope in carrying)


def _said(envelope: dict[str, Any], channel: str, thread: str | None, text: str) -> bool:
    """Whether ``envelope`` carries the person's message ``text`` in that place."""
    event = (envelope.get("payload") or {}).get("event") or {}
    return (envelope.get("type") == "events_api" and event.get("type") == "message"
            and event.get("user") == PERSON and event.get("text") == text
            and event.get("channel") == channel and event.get("thread_ts") == thread)


HARNESS = SlackHarness
